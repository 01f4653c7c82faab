"""Metric definitions (docs/architecture.md, "Metrics"), checked on hand-made event streams."""

from __future__ import annotations

import math

import pytest

from pbkv_server.engine import FirstToken
from pbkv_server.sim.metrics import MetricsCollector, latency_summary, percentile


def test_percentile_interpolates_between_ranks():
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([10, 20], 99) == pytest.approx(19.9)
    assert math.isnan(percentile([], 50))


def test_latency_summary_in_milliseconds():
    s = latency_summary([0.001, 0.003])
    assert s["n"] == 2 and s["mean_ms"] == pytest.approx(2.0) and s["p99_ms"] == pytest.approx(2.98)


def feed():
    m = MetricsCollector(timeline_bins=2)
    m.workflow_started("w1", 0.0)
    m.request_arrived("r1", 0.0, "planner")
    m.first_token(FirstToken("r1", 1.0, prompt_tokens=100, device_cached_tokens=0, host_cached_tokens=0))
    m.finished("r1", 2.0)
    m.request_arrived("r2", 3.0, "coder")
    m.first_token(FirstToken("r2", 3.5, prompt_tokens=300, device_cached_tokens=150, host_cached_tokens=60))
    m.request_arrived("r3", 3.0, "coder")
    m.first_token(FirstToken("r3", 4.0, prompt_tokens=100, device_cached_tokens=100, host_cached_tokens=0))
    m.request_arrived("r4", 3.9, "coder")  # never served: excluded from every rate
    m.workflow_ended("w1", 5.0)
    m.workflow_ended("w1", 9.0)  # only the first end counts
    m.workflow_ended("ghost", 1.0)  # never started: ignored
    return m


def test_summary_matches_hand_computation():
    s = feed().summary()
    assert s["hit_rate"] == pytest.approx(250 / 500)
    assert s["host_hit_rate"] == pytest.approx(60 / 500)
    assert s["mean_ttft_s"] == pytest.approx((1.0 + 0.5 + 1.0) / 3)
    assert s["per_agent_ttft_s"] == pytest.approx({"coder": 0.75, "planner": 1.0})
    assert s["mean_latency_s"] == 5.0 and s["workflows"] == 1 and s["requests"] == 3


def test_timeline_bins_requests_by_first_token_time():
    # Span [0 (first arrival), 4.0 (last first token)] in 2 bins of 2 s: r1 in bin 0; r2, r3 in bin 1.
    tl = feed().timeline()
    assert [b["requests"] for b in tl] == [1, 2]
    assert tl[0]["hit_rate"] == 0.0
    assert tl[1]["hit_rate"] == pytest.approx(250 / 400)
    assert tl[1]["host_hit_rate"] == pytest.approx(60 / 400)
    assert (tl[0]["t_start"], tl[1]["t_end"]) == (0.0, 4.0)


def test_events_for_unknown_requests_are_ignored():
    m = MetricsCollector()
    m.first_token(FirstToken("nope", 1.0, 10, 5, 0))
    m.finished("nope", 2.0)
    assert m.summary()["requests"] == 0 and m.timeline() == []
