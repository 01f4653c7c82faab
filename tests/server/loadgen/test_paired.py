"""Pieces of the paired live benchmark (pbkv_server/loadgen/paired.py), checked by hand."""

from __future__ import annotations

import os

import pytest

from pbkv_contract.trace import InvocationRecord, WorkflowEndRecord
from pbkv_server.loadgen.paired import Spread, group_cpu_seconds, prompt_heavy_records, speedups


def test_prompt_heavy_trace_shares_the_preamble_and_each_agents_growing_prefix():
    records = prompt_heavy_records(workflows=4, seed=1, output_tokens=2)
    invs = [r for r in records if isinstance(r, InvocationRecord)]
    assert sum(isinstance(r, WorkflowEndRecord) for r in records) == 4
    assert all(r.completion_tokens == 2 and sum(r.block_tokens) == r.prompt_tokens for r in invs)
    # the 256-token preamble is 16 blocks of 16 tokens, the same in every call
    assert len({tuple(r.prefix_hashes[:16]) for r in invs}) == 1
    # a workflow's second call of the same agent extends its first: same role, task, older history
    by_wf = {}
    for r in invs:
        if r.agent == "code":
            by_wf.setdefault(r.workflow_id, []).append(r.prefix_hashes)
    looped = [h for h in by_wf.values() if len(h) >= 2]
    assert looped  # this seed has a workflow with two code steps
    for first, second, *_ in looped:
        assert second[:len(first) - 1] == first[:-1]  # the last block may be partial
    assert prompt_heavy_records(workflows=4, seed=1) == records


def test_group_cpu_seconds_sums_the_groups_processes(tmp_path):
    tick = os.sysconf("SC_CLK_TCK")
    # /proc/PID/stat after "pid (comm) ": state ppid pgrp session tty tpgid flags minflt cminflt majflt
    # cmajflt utime stime cutime cstime ...
    for pid, pgrp, times in ((10, 7, (100, 50, 10, 0)), (11, 7, (20, 30, 0, 0)), (12, 9, (999, 999, 0, 0))):
        d = tmp_path / str(pid)
        d.mkdir()
        d.joinpath("stat").write_text(f"{pid} (py thon) S 1 {pgrp} 1 0 -1 0 0 0 0 0 {' '.join(map(str, times))} 20 0\n")
    (tmp_path / "self").mkdir()
    assert group_cpu_seconds(7, tmp_path) == pytest.approx((160 + 50) / tick)


def test_speedups_are_per_round_baseline_over_policy():
    rounds = [{"lru": 10.0, "pbkv": 8.0}, {"lru": 12.0, "pbkv": 10.0}, {"lru": 9.0, "pbkv": 10.0}]
    s = speedups(rounds, "lru")
    assert s["lru"] == Spread(1.0, 1.0, 1.0)
    assert s["pbkv"] == Spread(1.2, 0.9, 1.25)
    with pytest.raises(ValueError, match="baseline"):
        speedups([{"pbkv": 1.0}], "lru")


def _live_paired():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[3] / "benchmarks" / "live_paired.py"
    spec = importlib.util.spec_from_file_location("live_paired", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_live_paired_block_shows_the_probed_terms_and_reads_older_results():
    one = {"median": 1.0, "low": 1.0, "high": 1.0}
    fit = {"fixed_s": 0.014, "prefill_tokens_per_s": 35000.0, "attn_pair_s": 2.8e-8, "cold_rel_err": 0.08,
           "decode_base_s": 0.004, "decode_per_seq_s": 0.0007, "decode_per_token_s": 1.5e-6, "cached_ratio": [0.84]}
    pol = {"live": {k: one for k in ("ttft_s", "workflow_s", "cpu_s")}, "sim_ttft_speedup": 1.0,
           "sim_workflow_speedup": 1.0, "live_hit_rate": 0.5, "sim_hit_rate": 0.5}
    old = {"base": "lru", "rounds": [{}] * 3, "fit": fit, "concurrency": 4, "max_total_tokens": 3000,
           "policies": {"lru": pol, "pbkv": pol}}
    text = _live_paired().render(old)  # a result written before the probed terms existed
    assert "| pbkv | 1.000 (1.000-1.000) |" in text and "| - |" in text and "side by side" in text
    new = {**old, "mode": "one at a time", "flags": "--rounds 3 --one-at-a-time",
           "fit": {**fit, "cached_token_s": 8.89e-6, "cached_pair_s": 2.8e-8, "cached_rel_err": 0.15,
                   "held_out_rel_err": 0.21},
           "policies": {"lru": pol, "pbkv": {**pol, "sim_workflow_speedup": 1.039, "sim_workflow_speedup_plain": 1.198,
                                              "sim_workflow_speedup_without": {"request": 1.061, "cached": 1.11,
                                                                               "both": 1.198}}}}
    text = _live_paired().render(new)
    assert "| 1.039 | 0.962 | 1.198 |" in text  # sim, live / sim = 1 / 1.039, sim without both terms
    assert "a cached token 8.89 us + 2.8e-08 s per pair of cached tokens" in text
    assert "cached 15%, held-out mixed probes 21%" in text
    assert "pbkv 1.061 / 1.110 / 1.198" in text and "--rounds 3 --one-at-a-time --docs PAGE" in text


def test_live_paired_runs_one_server_at_a_time_unless_side_by_side():
    mod = _live_paired()
    assert not mod.parse_args([]).side_by_side  # one at a time is the default
    assert not mod.parse_args(["--one-at-a-time"]).side_by_side  # still accepted
    assert mod.parse_args(["--side-by-side"]).side_by_side
    with pytest.raises(SystemExit):
        mod.parse_args(["--side-by-side", "--one-at-a-time"])
    with pytest.raises(SystemExit):
        mod.parse_args(["--rounds", "2"])


def test_live_paired_block_of_a_side_by_side_run_names_the_flag():
    one = {"median": 1.0, "low": 1.0, "high": 1.0}
    fit = {"fixed_s": 0.014, "prefill_tokens_per_s": 35000.0, "attn_pair_s": 2.8e-8, "cold_rel_err": 0.08,
           "decode_base_s": 0.004, "decode_per_seq_s": 0.0007, "decode_per_token_s": 1.5e-6}
    pol = {"live": {k: one for k in ("ttft_s", "workflow_s", "cpu_s")}, "sim_ttft_speedup": 1.0,
           "sim_workflow_speedup": 1.0, "live_hit_rate": 0.5, "sim_hit_rate": 0.5}
    result = {"base": "lru", "rounds": [{}] * 3, "fit": fit, "concurrency": 4, "max_total_tokens": 3000,
              "policies": {"lru": pol}, "flags": "--rounds 3"}
    # written when side by side was the default (no mode recorded, no flag): rerunning needs the flag now
    assert "--rounds 3 --side-by-side --docs PAGE" in _live_paired().render(result)
    text = _live_paired().render({**result, "mode": "side by side", "flags": "--rounds 3 --side-by-side"})
    assert "--rounds 3 --side-by-side --docs PAGE" in text and "servers side by side" in text
    text = _live_paired().render({**result, "mode": "one at a time"})
    assert "--rounds 3 --docs PAGE" in text and "servers one at a time" in text
