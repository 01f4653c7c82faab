"""Latency breakdown (docs/architecture.md, "Metrics"): where a workflow's latency goes.

The collector's arithmetic is checked on a hand-made event stream, the engine's admission fields on
a two-request scenario worked out by hand, and a whole replay on the identity "the parts add up to
the mean latency".
"""

from __future__ import annotations

import math

import pytest

from pbkv_server.engine import FirstToken
from pbkv_server.sim.metrics import BREAKDOWN_PARTS, MetricsCollector
from pbkv_server.sim.simulator import ReplayConfig, ReplayOptions, load_workload, simulate
from pbkv_server.sim.synth.agents import generate
from pbkv_server.hardware.profiles import get_profile

from ..engine.engine_helpers import make_engine, request


def _two_workflows() -> MetricsCollector:
    # w1: r1 arrives at 0, waits 0.5 s, its admission iteration [0.5, 1.5] loads 0.2 s, prefills
    # 0.6 s and decodes the running batch for 0.2 s; r1 runs until 3.0 and w1 ends at 4.0 (1 s gap).
    # w2: r2 arrives at 1.8, is admitted by the iteration [2.0, 2.5] (load 0.1, prefill 0.3), which
    # r1 sits through while running, and finishes at 2.9 when w2 ends.
    m = MetricsCollector()
    m.workflow_started("w1", 0.0)
    m.request_arrived("r1", 0.0, "a", "app", "w1")
    m.first_token(FirstToken("r1", 1.5, 100, 0, 20, admitted_at=0.5, load_s=0.2, prefill_s=0.6))
    m.workflow_started("w2", 1.8)
    m.request_arrived("r2", 1.8, "a", "app", "w2")
    m.first_token(FirstToken("r2", 2.5, 100, 50, 10, admitted_at=2.0, load_s=0.1, prefill_s=0.3))
    m.finished("r2", 2.9)
    m.workflow_ended("w2", 2.9)
    m.finished("r1", 3.0)
    m.workflow_ended("w1", 4.0)
    return m


def test_breakdown_counts_other_requests_prefill_as_waiting_and_sums_to_the_latency():
    b = _two_workflows().latency_breakdown()
    # w1: queue 0.5, load 0.2 + 0.1, prefill 0.6 + 0.3, decode 2.5 - 0.3 - 0.9 = 1.3, tool 1.0
    # w2: queue 0.2, load 0.1, prefill 0.3, decode 0.9 - 0.4 = 0.5, tool 0.0
    assert b == pytest.approx({"queue_s": 0.35, "load_s": 0.2, "prefill_s": 0.6, "decode_s": 0.9, "tool_s": 0.5})
    assert sum(b.values()) == pytest.approx((4.0 + 1.1) / 2)


def test_ttft_breakdown_is_the_admission_iteration_of_each_request():
    t = _two_workflows().ttft_breakdown()
    assert t == pytest.approx({"queue_s": 0.35, "load_s": 0.15, "prefill_s": 0.45, "decode_s": 0.15})
    summary = _two_workflows().summary()
    assert sum(summary["ttft_breakdown_s"].values()) == pytest.approx(summary["mean_ttft_s"])


def test_mean_queue_length_is_the_total_wait_over_the_served_span():
    # waits 0.5 s (r1) and 0.2 s (r2) over [0, 2.5] (first arrival to last first token)
    assert _two_workflows().mean_queue_length() == pytest.approx(0.7 / 2.5)
    assert MetricsCollector().mean_queue_length() == 0.0


def test_first_token_without_admission_time_counts_the_ttft_as_waiting():
    m = MetricsCollector()
    m.workflow_started("w", 0.0)
    m.request_arrived("r", 0.0, None, None, "w")
    m.first_token(FirstToken("r", 1.0, 10, 0, 0))
    m.finished("r", 3.0)
    m.workflow_ended("w", 3.0)
    assert m.latency_breakdown() == pytest.approx({"queue_s": 1.0, "load_s": 0.0, "prefill_s": 0.0,
                                                   "decode_s": 2.0, "tool_s": 0.0})
    assert all(math.isnan(v) for v in MetricsCollector().latency_breakdown().values())


def test_engine_reports_admission_time_and_the_iteration_load_and_prefill():
    # Test profile: prefill 1000 tok/s, decode 0.01 s + 0.001 s per running sequence.
    engine = make_engine()
    engine.submit(request("a", range(10), output=3))  # 100 tokens
    (first_a,) = engine.step()
    assert first_a == FirstToken("a", pytest.approx(0.1), 100, 0, 0, admitted_at=0.0, load_s=0.0,
                                 prefill_s=pytest.approx(0.1))
    engine.submit(request("b", [f"b{i}" for i in range(20)], output=1))  # 200 tokens, arrives at 0.1
    events = engine.step()
    first_b = next(e for e in events if isinstance(e, FirstToken))
    # b's admission iteration: prefill 0.2 s + one decode step of the running batch (a): 0.011 s
    assert first_b.admitted_at == pytest.approx(0.1) and first_b.prefill_s == pytest.approx(0.2)
    assert first_b.time == pytest.approx(0.1 + 0.2 + 0.011)
    assert engine.stats.decode_iterations == 1 and engine.stats.decode_s == pytest.approx(0.011)


def test_replay_breakdown_adds_up_to_the_mean_latency_for_every_policy():
    records = list(generate(graph="codegen", workflows=12, seed=3))
    workload = load_workload(records)
    for policy in ("lru", "pbkv"):
        s = simulate(workload, ReplayConfig(policy, get_profile("h100-qwen2.5-32b"), device_tokens=60_000,
                                            host_tokens=60_000),
                     ReplayOptions(concurrency=4)).summary
        parts = s["latency_breakdown_s"]
        assert list(parts) == list(BREAKDOWN_PARTS) and min(parts.values()) >= -1e-9
        assert sum(parts.values()) == pytest.approx(s["mean_latency_s"], rel=1e-9)
        assert parts["prefill_s"] > 0 and parts["decode_s"] > 0
        assert 0 < s["mean_decode_step_s"] < 1
