"""``--concurrency`` is bounded on every simulating and load-generating command (issue 35: replay and
advise accepted ``--concurrency 100000000000000000000000``), one rule: ``MAX_CONCURRENCY``."""
from __future__ import annotations

import sys

import pytest

from pbkv_server.cli.entry import pbkv_bench
from pbkv_server.hardware.profiles import DEFAULT_PROFILE, get_profile
from pbkv_server.sim.simulator import MAX_CONCURRENCY, ReplayConfig, ReplayOptions, Workload, simulate


@pytest.mark.parametrize("args", [
    ["replay", "t.jsonl", "--concurrency", str(10**23)],
    ["advise", "t.jsonl", "--concurrency", str(MAX_CONCURRENCY + 1)],
    ["replay", "t.jsonl", "--concurrency", "0"],
    ["live-replay", "t.jsonl", "--target", "http://127.0.0.1:9", "--concurrency", str(MAX_CONCURRENCY + 1)],
    ["study", "paper", "out", "--concurrency", str(MAX_CONCURRENCY + 1)],
])
def test_a_concurrency_outside_the_bound_is_one_usage_line(monkeypatch, capsys, args):
    monkeypatch.setattr(sys, "argv", ["prog", *args])
    assert pbkv_bench() == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Invalid value for '--concurrency'" in err, err


def test_the_study_sweep_list_meets_the_same_bound(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(sys, "argv", ["prog", "study", "paper", str(tmp_path / "runs"),
                                      "--concurrencies", f"8,{MAX_CONCURRENCY + 1}"])
    assert pbkv_bench() != 0
    err = capsys.readouterr().err
    assert err == f"error: --concurrencies must be in 1..1,000,000, got '8,{MAX_CONCURRENCY + 1}'\n"


def test_python_callers_meet_the_same_bound():
    with pytest.raises(ValueError, match=r"concurrency must be in 1\.\.1,000,000, got 1,000,001"):
        simulate(Workload(units=[]), ReplayConfig(policy="lru", profile=get_profile(DEFAULT_PROFILE)), ReplayOptions(concurrency=MAX_CONCURRENCY + 1))
