"""``ReplayOptions.order_runs``: how many times the offline reference (``opt``) may replay to its own
order. Run k is the same replay whatever the limit, so a limit of k reports exactly run k of an
unlimited replay; ``pbkv-bench advise`` defaults to fewer runs than the studies (``--order-runs``)."""
from __future__ import annotations

import dataclasses
import sys

import pytest

from pbkv_contract.trace import read_trace
from pbkv_server.cli.entry import pbkv_bench
from pbkv_server.engine.policies import REFERENCE_POLICY
from pbkv_server.hardware.profiles import get_profile
from pbkv_server.sim.advise import ADVISE_ORDER_RUNS, advice_lines, advise
from pbkv_server.sim.simulator import (MAX_ORDER_RUNS, ORDER_RUNS_LIMIT, ReplayConfig, ReplayOptions, load_workload,
                                       simulate)
from pbkv_server.sim.synth.agents import write_trace

PROFILE = get_profile("h100-qwen2.5-32b")
DEVICE = 40_000


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    # 40 codegen workflows at C=4 on 40k + 40k tokens: opt's order settles after 4 runs (probed), so
    # limits of 1 and 2 stop it before its fixed point
    path = tmp_path_factory.mktemp("or") / "t.jsonl"
    write_trace(str(path), graph="codegen", workflows=40, seed=0)
    return read_trace(str(path))


def _opt(records, runs: int | None = None) -> dict:
    options = ReplayOptions(concurrency=4) if runs is None else ReplayOptions(concurrency=4, order_runs=runs)
    return simulate(load_workload(records), ReplayConfig(REFERENCE_POLICY, PROFILE, device_tokens=DEVICE,
                                                         host_tokens=DEVICE), options).summary


def test_a_limit_reports_that_run_of_the_unlimited_replay(records):
    full = _opt(records)
    assert full["order_runs"] == 4 and full["order_stable"] and MAX_ORDER_RUNS > 4
    lat = full["order_run_mean_latency_s"]
    for k in (1, 2):
        s = _opt(records, k)
        assert s["order_runs"] == k and not s["order_stable"]
        assert s["order_run_mean_latency_s"] == lat[:k] and s["mean_latency_s"] == lat[k - 1]
    assert _opt(records, ORDER_RUNS_LIMIT)["order_run_mean_latency_s"] == lat  # a larger limit stops at the fixed point


@pytest.mark.parametrize("runs", [0, ORDER_RUNS_LIMIT + 1])
def test_a_limit_outside_the_bound_is_refused(records, runs):
    with pytest.raises(ValueError, match=rf"order runs must be in 1\.\.{ORDER_RUNS_LIMIT}, got {runs}"):
        _opt(records, runs)


def test_advise_runs_its_own_default_and_says_so(records):
    profile = dataclasses.replace(PROFILE, device_kv_tokens=DEVICE)
    lat = _opt(records)["order_run_mean_latency_s"]
    quick = advise(records, profile, concurrency=4, policies=("lru", REFERENCE_POLICY))
    assert ADVISE_ORDER_RUNS == 3 and quick.order_runs == 3 and quick.reference_runs == 3
    assert quick.latency_s[REFERENCE_POLICY] == lat[2]
    assert quick.reference_stable is False
    assert any(line.endswith("(3 order runs; its order was not yet stable; the studies run --order-runs 8)")
               for line in advice_lines(quick))
    full = advise(records, profile, concurrency=4, policies=("lru", REFERENCE_POLICY), order_runs=8)
    assert full.reference_runs == 4 and full.latency_s[REFERENCE_POLICY] == lat[3]
    assert any(line.endswith("(4 order runs; its order was stable)") for line in advice_lines(full))
    assert full.to_json()["reference_runs"] == 4 and full.to_json()["reference_stable"] is True
    # stable on the last run allowed: the line says so (it does not infer stability from runs < limit)
    last = advise(records, profile, concurrency=4, policies=("lru", REFERENCE_POLICY), order_runs=4)
    assert (last.reference_runs, last.reference_stable) == (4, True)
    assert any(line.endswith("(4 order runs; its order was stable)") for line in advice_lines(last))
    # not stable at the studies' count: no pointer to the studies
    capped = dataclasses.replace(quick, order_runs=MAX_ORDER_RUNS, reference_runs=MAX_ORDER_RUNS)
    assert any(line.endswith("(8 order runs; its order was not yet stable)") for line in advice_lines(capped))


@pytest.mark.parametrize("command", ["replay", "advise"])
@pytest.mark.parametrize("runs", ["0", str(ORDER_RUNS_LIMIT + 1)])
def test_the_cli_bound_is_one_usage_line(monkeypatch, capsys, command, runs):
    monkeypatch.setattr(sys, "argv", ["prog", command, "t.jsonl", "--order-runs", runs])
    assert pbkv_bench() == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Invalid value for '--order-runs'" in err, err


@pytest.mark.parametrize("args", [["--no-reference", "--order-runs", "2"], ["--order-runs", "3", "--no-reference"]])
def test_order_runs_without_the_reference_is_refused(monkeypatch, capsys, tmp_path, args):
    monkeypatch.setattr(sys, "argv", ["prog", "advise", str(tmp_path / "t.jsonl"), *args])
    assert pbkv_bench() == 2
    assert capsys.readouterr().err == ("error: --order-runs sets the offline reference's runs and --no-reference "
                                       "skips it: give one of them\n")


def test_replay_refuses_order_runs_when_no_policy_iterates(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(sys, "argv", ["prog", "replay", str(tmp_path / "t.jsonl"), "--policy", "lru", "--no-gap",
                                      "--order-runs", "2"])
    assert pbkv_bench() == 2
    assert capsys.readouterr().err == (f"error: --order-runs: no policy replayed iterates its order "
                                       f"({REFERENCE_POLICY} does; --no-gap leaves it out unless listed)\n")


def test_replay_passes_its_limit_to_opt(records, tmp_path, monkeypatch):
    import json

    from pbkv_contract.trace import TraceWriter

    path = tmp_path / "t.jsonl"
    with TraceWriter(path) as writer:
        for rec in records:
            writer.write(rec)
    out = tmp_path / "r.json"
    monkeypatch.setattr(sys, "argv", ["prog", "replay", str(path), "--policy", REFERENCE_POLICY, "--no-gap",
                                      "--concurrency", "4", "--profile", PROFILE.name, "--device-tokens", str(DEVICE),
                                      "--host-tokens", str(DEVICE), "--order-runs", "2", "--json", str(out)])
    assert pbkv_bench() == 0
    summary = json.loads(out.read_text())[REFERENCE_POLICY]
    assert summary["order_runs"] == 2 and summary["mean_latency_s"] == _opt(records)["order_run_mean_latency_s"][1]
