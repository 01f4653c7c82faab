"""Replay block identity: the tree is keyed by path, and a hash met under two parents is detected and
reported (regression case 7 (a) and (c))."""

from __future__ import annotations

import json
import logging

import pytest
from typer.testing import CliRunner

import pbkv_contract.blocks as blocks
from pbkv_contract.trace import TraceWriter
from pbkv_server.cli.bench import app
from pbkv_server.engine.policies import REPLAY, available_policies
from pbkv_server.hardware.profiles import get_profile
from pbkv_server.sim.simulator import ReplayConfig, ReplayOptions, load_workload, simulate
from pbkv_server.sim.synth.agents import generate
from .sim_fixtures import make_end, make_inv, unit_profile  # noqa: F401 (fixture)


def _case_a_records():
    """A = [a1, h, a3], then C = [a1, h, c3] (really shares a1 and h with A), then B = [b1, h, b3]:
    the same hash h at depth 2 under another parent. 10 tokens per block, one workflow at a time."""
    return [
        make_inv("A", 0, "x", ["a1", "h", "a3"], [10, 10, 10], t_start=0.0, t_end=1.0), make_end("A", 1.5),
        make_inv("C", 0, "x", ["a1", "h", "c3"], [10, 10, 10], t_start=2.0, t_end=3.0), make_end("C", 3.5),
        make_inv("B", 0, "x", ["b1", "h", "b3"], [10, 10, 10], t_start=4.0, t_end=5.0), make_end("B", 5.5),
    ]


@pytest.mark.parametrize("policy", available_policies(REPLAY))
def test_case_7a_a_hash_under_another_parent_gets_no_cache_under_every_policy(policy, unit_profile, caplog):
    with caplog.at_level(logging.WARNING, logger="pbkv_server.sim.simulator"):
        workload = load_workload(_case_a_records())
    assert workload.hash_collisions == 1
    assert [r.blocks for wf in workload.units for r in wf.requests] == [
        ["a1", "h", "a3"], ["a1", "h", "c3"], ["b1", "h~1", "b3"]]
    [warning] = caplog.records
    assert warning.getMessage().startswith("1 block hash(es) of the trace follow two or more different blocks")
    result = simulate(workload, ReplayConfig(policy, unit_profile), ReplayOptions(concurrency=1))
    # token-level ground truth: A 0, C 20 (a1 and h), B 0 (its first block differs) of 90 prompt tokens
    assert result.summary["hit_rate"] == pytest.approx(20 / 90)
    assert result.summary["hash_collisions"] == 1


def test_the_replay_json_reports_hash_collisions(tmp_path):
    trace = tmp_path / "a.jsonl"
    with TraceWriter(trace) as writer:
        for rec in _case_a_records():
            writer.write(rec)
    out = tmp_path / "r.json"
    result = CliRunner().invoke(app, ["replay", str(trace), "--policy", "lru", "--no-gap", "--concurrency", "1",
                                      "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["lru"]["hash_collisions"] == 1


@pytest.mark.slow
def test_case_7c_8_bit_hashes_are_detected_and_reported_full_width_ones_are_not(monkeypatch, caplog):
    """1,000 synthetic workflows: with the hash cut to 8 bits, hashes meet under other parents and the
    replay says so (a warning with the count, and ``hash_collisions`` in the summary); at full width
    the same workload has none. A collision under the *same* parent cannot be told from real sharing
    by hashes alone: full width is what makes it negligible."""
    profile = get_profile("h100-qwen2.5-32b")
    counts = {}
    for hex_digits in (blocks.HASH_HEX, 2):
        monkeypatch.setattr(blocks, "HASH_HEX", hex_digits)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="pbkv_server.sim.simulator"):
            workload = load_workload(generate("research", 1000, seed=3))
        assert len(caplog.records) == (1 if workload.hash_collisions else 0)
        result = simulate(workload, ReplayConfig("lru", profile, device_tokens=120_000, host_tokens=0),
                          ReplayOptions(concurrency=16))
        counts[hex_digits] = result.summary["hash_collisions"]
        assert workload.invocations > 5000
    assert counts[64] == 0
    assert counts[2] == 256  # every one of the 256 values of an 8-bit hash follows several different blocks
