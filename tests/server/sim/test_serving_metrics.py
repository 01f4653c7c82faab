"""bench_serving-named serving metrics, goodput and the hit-rate ceiling, against hand counts."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pbkv_server.engine import FirstToken
from pbkv_server.sim.ceiling import infinite_cache_hit_rate
from pbkv_server.sim.metrics import MetricsCollector
from pbkv_server.sim.serving_metrics import RequestTiming, Slo, distribution, serving_metrics, weighted_percentile
from pbkv_server.sim.simulator import ReplayConfig, ReplayOptions, load_workload, simulate
from .sim_fixtures import make_end, make_inv, unit_profile  # noqa: F401  (fixture)


def test_weighted_percentile_is_the_percentile_of_the_repeated_values():
    # (1 x2, 3, 10) is [1, 1, 3, 10]: rank (4 - 1) q / 100, linear between neighbours
    pairs = [(3.0, 1), (1.0, 2), (10.0, 1)]
    assert weighted_percentile(pairs, 50) == pytest.approx(2.0)  # rank 1.5: 1 + 0.5 * (3 - 1)
    assert weighted_percentile(pairs, 90) == pytest.approx(7.9)  # rank 2.7: 3 + 0.7 * 7
    assert weighted_percentile(pairs, 99) == pytest.approx(9.79)
    assert weighted_percentile(pairs, 100) == 10.0 and weighted_percentile(pairs, 0) == 1.0
    assert math.isnan(weighted_percentile([], 50)) and math.isnan(weighted_percentile([(1.0, 0)], 50))
    d = distribution("itl", pairs=pairs)
    assert d["mean_itl_ms"] == pytest.approx(3750.0) and d["median_itl_ms"] == pytest.approx(2000.0)


def three_requests() -> list[RequestTiming]:
    """r1: TTFT 1.0, TPOT 0.5, E2E 3.0; r2: one token, TTFT 0.2; r3: TTFT 2.0, TPOT 1.0, E2E 4.0."""
    return [RequestTiming(0.0, 1.0, 3.0, 100, 5, [(0.5, 4)]),
            RequestTiming(1.0, 1.2, 1.2, 50, 1, []),
            RequestTiming(2.0, 4.0, 6.0, 250, 3, [(1.5, 1), (0.5, 1)])]


def test_serving_metrics_match_a_hand_count():
    m = serving_metrics(three_requests(), workflow_latencies_s=[5.0, 4.0])
    assert (m["completed"], m["total_input"], m["total_output"], m["duration_s"]) == (3, 400, 9, 6.0)
    assert m["request_throughput"] == pytest.approx(0.5)
    assert m["input_throughput"] == pytest.approx(400 / 6) and m["output_throughput"] == pytest.approx(1.5)
    assert m["total_throughput"] == pytest.approx(409 / 6)
    # TTFT [0.2, 1.0, 2.0] s
    assert m["mean_ttft_ms"] == pytest.approx(3200 / 3) and m["median_ttft_ms"] == pytest.approx(1000)
    assert m["p90_ttft_ms"] == pytest.approx(1800) and m["p99_ttft_ms"] == pytest.approx(1980)
    # TPOT of r1 and r3 only (r2 has one token): [0.5, 1.0] s
    assert m["mean_tpot_ms"] == pytest.approx(750) and m["median_tpot_ms"] == pytest.approx(750)
    assert m["p90_tpot_ms"] == pytest.approx(950) and m["p99_tpot_ms"] == pytest.approx(995)
    # ITL [0.5 x5, 1.5] s (token-weighted over every gap)
    assert m["mean_itl_ms"] == pytest.approx(4000 / 6) and m["median_itl_ms"] == pytest.approx(500)
    assert m["p90_itl_ms"] == pytest.approx(1000) and m["p99_itl_ms"] == pytest.approx(1450)
    # E2E [0.2, 3.0, 4.0] s
    assert m["mean_e2e_latency_ms"] == pytest.approx(2400) and m["median_e2e_latency_ms"] == pytest.approx(3000)
    assert m["p90_e2e_latency_ms"] == pytest.approx(3800) and m["p99_e2e_latency_ms"] == pytest.approx(3980)
    assert m["mean_workflow_latency_ms"] == pytest.approx(4500) and m["p90_workflow_latency_ms"] == pytest.approx(4900)
    assert "request_goodput" not in m and "mean_session_latency_ms" not in m  # no SLO, no sessions given


@pytest.mark.parametrize("slo, good", [
    (Slo(ttft_ms=1500, tpot_ms=600), 2),  # r3's TTFT 2000 ms misses; r2's one token counts TPOT 0
    (Slo(tpot_ms=800), 2),  # r3's TPOT 1000 ms misses
    (Slo(ttft_ms=2000), 3),  # bounds are inclusive
    (Slo(ttft_ms=100), 0),
])
def test_goodput_counts_the_requests_meeting_every_slo(slo, good):
    m = serving_metrics(three_requests(), slo)
    assert m["request_goodput"] == pytest.approx(good / 6.0)
    assert m["slo_attainment"] == pytest.approx(good / 3)
    assert (m["slo_ttft_ms"], m["slo_tpot_ms"]) == (slo.ttft_ms, slo.tpot_ms)


@pytest.mark.parametrize("bad", [0.0, -1.0, math.inf, math.nan])
def test_an_slo_must_be_a_positive_number(bad):
    with pytest.raises(ValueError, match="--slo-ttft must be a positive"):
        Slo(ttft_ms=bad)


def test_collector_rebuilds_inter_token_gaps_from_admission_iterations():
    m = MetricsCollector()
    m.workflow_started("w1", 0.0, "s")
    m.request_arrived("r1", 0.0, "a", workflow_id="w1")
    m.first_token(FirstToken("r1", 1.0, 100, 0, 0, admitted_at=0.0, load_s=0.0, prefill_s=0.9), source=0)
    m.request_arrived("r2", 1.5, "b", workflow_id="w2")
    m.workflow_started("w2", 1.5, "s")
    # r2's admission iteration [1.6, 2.0] is one of r1's gaps (it decoded a token for r1 too)
    m.first_token(FirstToken("r2", 2.0, 50, 0, 0, admitted_at=1.6, load_s=0.0, prefill_s=0.3), source=0)
    m.finished("r2", 2.0, output_tokens=1)
    m.finished("r1", 3.0, output_tokens=5)
    m.workflow_ended("w2", 2.5)
    m.workflow_ended("w1", 4.0)
    timings = {t.arrival: t for t in m.request_timings()}
    # r1: 4 gaps, one of 0.4 s, the other three share 3.0 - 1.0 - 0.4 = 1.6 s
    assert timings[0.0].itl == [(pytest.approx(0.4), 1), (pytest.approx(1.6 / 3), 3)]
    assert timings[1.5].itl == []
    s = m.summary()
    assert s["mean_itl_ms"] == pytest.approx(500.0) and s["mean_tpot_ms"] == pytest.approx(500.0)
    # sorted gaps [0.4, 0.533, 0.533, 0.533]: p99 at rank 2.97, p0 the interrupting iteration
    assert s["p99_itl_ms"] == pytest.approx(1e3 * 1.6 / 3)
    assert weighted_percentile(timings[0.0].itl, 0) == pytest.approx(0.4)
    # workflows w1 (4.0 s) and w2 (1.0 s) in one session from 0.0 to 4.0
    assert s["mean_workflow_latency_ms"] == pytest.approx(2500.0)
    assert s["mean_session_latency_ms"] == pytest.approx(4000.0)


def test_ceiling_is_an_infinite_caches_hit_rate():
    prompts = [(["a", "b", "c"], [4, 4, 2]), (["a", "b", "d"], [4, 4, 3]), (["e"], [5]), (["a", "b", "c"], [4, 4, 2])]
    # 36 prompt tokens; first occurrences a 4, b 4, c 2, d 3, e 5 = 18 miss
    assert infinite_cache_hit_rate(prompts) == pytest.approx(18 / 36)
    assert infinite_cache_hit_rate([]) == 0.0
    # a block repeated within one prompt hits its own earlier copy: 8 tokens, a (3) misses once
    assert infinite_cache_hit_rate([(["a", "x", "a"], [3, 2, 3])]) == pytest.approx(3 / 8)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.tuples(st.sampled_from("abcdefgh"), st.integers(0, 64)), max_size=8), max_size=8))
def test_ceiling_equals_a_block_by_block_count(prompts):
    """The whole-prompt path (no repeat within a prompt) and the block-by-block path agree with
    a plain count: the first occurrence of a block in the whole sequence misses, later ones hit."""
    seen, hit, total = set(), 0, 0
    for prompt in prompts:
        for block, n in prompt:
            total += n
            hit += n if block in seen else 0
            seen.add(block)
    pairs = [([b for b, _ in p], [n for _, n in p]) for p in prompts]
    assert infinite_cache_hit_rate(pairs) == (hit / total if total else 0.0)


def test_replay_reports_the_ceiling_above_every_hit_rate(unit_profile):  # noqa: F811
    records = [
        make_inv("w1", 0, "a", ["x", "y"], [300, 200], out=4), make_end("w1", 2.0),
        make_inv("w2", 0, "a", ["x", "z"], [300, 100], out=4), make_end("w2", 2.0),
        make_inv("w3", 0, "a", ["x", "y"], [300, 200], out=4), make_end("w3", 2.0),
    ]
    # 1,400 prompt tokens; misses x 300, y 200, z 100: ceiling 800 / 1400
    workload = load_workload(records)
    for device in (100_000, 600):  # everything fits; only one prompt fits
        result = simulate(workload, ReplayConfig("lru", unit_profile, device_tokens=device, host_tokens=0),
                          ReplayOptions(concurrency=1, slo=Slo(ttft_ms=1e6)))
        s = result.summary
        assert s["hit_rate_ceiling"] == pytest.approx(800 / 1400)
        assert s["hit_rate"] + s["host_hit_rate"] <= s["hit_rate_ceiling"] + 1e-12
        assert s["completed"] == 3 and s["total_output"] == 12 and s["slo_attainment"] == 1.0
    assert s["hit_rate"] < s["hit_rate_ceiling"]  # the small device lost some
