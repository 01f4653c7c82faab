"""The device-capacity rule on a hand-built trace, and the Table-1 comparisons on hand-made results."""

from __future__ import annotations

import math

import pytest

from examples.common.capacity import device_capacity, replay_capacity, working_set
from examples.common.results import PolicyResult, compare
from pbkv_contract.trace import InvocationRecord, WorkflowEndRecord


def _inv(wf: str, step: int, blocks: list[str], tokens: list[int]) -> InvocationRecord:
    return InvocationRecord(app="t", workflow_id=wf, step=step, agent="a", t_start=0.0, t_end=1.0,
                            prompt_tokens=sum(tokens), completion_tokens=5, prefix_hashes=blocks, block_tokens=tokens)


def test_working_set_separates_shared_reusable_and_single_use_blocks() -> None:
    # "sys" is shared by both workflows; w1 reuses "c1" across its two calls; "x", "y", "z" are single-use.
    records = [
        _inv("w1", 0, ["sys", "c1", "x"], [100, 40, 10]),
        _inv("w1", 1, ["sys", "c1", "y"], [100, 40, 20]),
        _inv("w2", 0, ["sys", "z"], [100, 30]),
        WorkflowEndRecord(app="t", workflow_id="w1", t=2.0),
    ]
    ws = working_set(records)
    assert ws.workflows == 2 and ws.requests == 3
    assert ws.shared_tokens == 100
    assert ws.mean_private_tokens == pytest.approx(40 / 2)  # only c1 is private and reused
    assert ws.single_use_tokens == 10 + 20 + 30
    assert ws.unshared_prompt_tokens == (40 + 10) + (40 + 20) + 30
    assert ws.max_prompt_tokens == 160 and ws.total_prompt_tokens == 150 + 160 + 130
    # C = 8 > n = 2 workflows: W = 100 + 2 * 20 = 140; A = 2 * 140 / 3; device = A + 0.5 W
    assert ws.live_tokens(8) == 140
    assert ws.in_flight_tokens(8) == pytest.approx(2 * 140 / 3)
    assert device_capacity(ws, 8, 0.5, min_requests=1) == math.ceil(2 * 140 / 3 + 70)
    # The floor: never below min_requests times the largest prompt.
    assert device_capacity(ws, 8, 0.5, min_requests=4) == 4 * 160


def test_device_capacity_rejects_bad_pressure_and_concurrency() -> None:
    ws = working_set([_inv("w", 0, ["b"], [10])])
    with pytest.raises(ValueError, match="pressure"):
        device_capacity(ws, 4, 0.0)
    with pytest.raises(ValueError, match="concurrency"):
        device_capacity(ws, 0, 0.5)


def test_paper_setup_takes_the_gpu_memory_capacity_and_a_host_tier_of_the_same_size() -> None:
    ws = working_set([_inv("w", 0, ["b"], [10])])
    paper = replay_capacity("paper", ws, 72, 96_092, "a6000-qwen3-14b")
    assert (paper.device_tokens, paper.host_tokens, paper.host_ratio) == (96_092, 96_092, 1.0)
    assert "GPU memory of profile a6000-qwen3-14b" in paper.rule and paper.setup == "paper"
    assert replay_capacity("paper", ws, 72, 96_092, "p", host_ratio=0).host_tokens == 0


def test_trace_setup_keeps_the_working_set_rule_and_hicache_default_ratio() -> None:
    ws = working_set([_inv("w", 0, ["b"], [10])])
    trace = replay_capacity("trace", ws, 8, 96_092, "p")
    assert trace.device_tokens == device_capacity(ws, 8) and trace.host_tokens == 2 * trace.device_tokens
    assert "A + 0.5 W" in trace.rule
    with pytest.raises(ValueError, match="unknown setup"):
        replay_capacity("cloud", ws, 8, 96_092, "p")


def _result(policy: str, latency: float, ttft: float, hit: float) -> PolicyResult:
    return PolicyResult(policy, latency, 2 * latency, ttft, {}, hit, 0.0, 10.0)


def test_compare_gives_speedups_over_baseline_and_gap_to_reference() -> None:
    results = [_result("lru", 10.0, 0.8, 0.2), _result("pbkv", 5.0, 0.4, 0.5), _result("opt", 4.0, 0.2, 0.6)]
    by = {c.policy: c for c in compare(results)}
    assert by["lru"].latency_speedup == 1.0 and by["lru"].hit_rate_ratio == 1.0
    assert by["pbkv"].latency_speedup == 2.0 and by["pbkv"].ttft_speedup == 2.0
    assert by["pbkv"].hit_rate_ratio == pytest.approx(2.5)
    assert by["pbkv"].hit_rate_gap_to_ref == pytest.approx(0.1)
    assert by["pbkv"].latency_vs_ref == pytest.approx(1.25)


def test_compare_gives_latency_capture_and_prefill_saved_and_the_table_shows_them() -> None:
    from rich.console import Console

    from examples.common.report import results_table

    # lru 10 s, pbkv 7 s, opt 6 s: capture = (10 - L) / (10 - 6); host hits worth 0.5 of a prefill
    results = [PolicyResult("lru", 10.0, 20.0, 1.0, {}, 0.2, 0.4, 10.0),
               PolicyResult("pbkv", 7.0, 14.0, 1.0, {}, 0.3, 0.1, 10.0),
               PolicyResult("opt", 6.0, 12.0, 1.0, {}, 0.5, 0.2, 10.0)]
    by = {c.policy: c for c in compare(results, host_value=0.5)}
    assert [by[p].latency_capture for p in ("lru", "pbkv", "opt")] == pytest.approx([0.0, 0.75, 1.0])
    assert [by[p].prefill_saved for p in ("lru", "pbkv", "opt")] == pytest.approx([0.4, 0.35, 0.6])
    assert compare(results, reference=None)[1].latency_capture is None and compare(results)[1].prefill_saved is None
    console = Console(width=250, record=True, file=open("/dev/null", "w"))
    console.print(results_table("setup paper: device 100 tok, host 1x", results, list(by.values())))
    text = console.export_text()
    row = next(line for line in text.splitlines() if "pbkv" in line)
    assert "35.0%" in row and "1.43x" in row and "0.75" in row  # saved, speedup 10/7, capture
    assert "speedup vs LRU = LRU mean latency / policy mean latency (x, >1 faster)" in " ".join(text.split())


def test_compare_without_reference_and_with_zero_baseline_hits() -> None:
    results = [_result("lru", 10.0, 1.0, 0.0), _result("he", 10.0, 1.0, 0.3)]
    he = compare(results, reference=None)[1]
    assert he.hit_rate_gap_to_ref is None and he.latency_vs_ref is None
    assert he.hit_rate_ratio == math.inf
    with pytest.raises(KeyError, match="baseline policy 'kvflow'"):
        compare(results, baseline="kvflow")
