"""Replicas behind a router in the simulator: the driver, the three router models and the CLI."""

from __future__ import annotations

import json
from collections import Counter
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from pbkv_server.bench_cli import app
from pbkv_server.engine import EngineRequest
from pbkv_server.predictors import make_predictor
from pbkv_server.sim.cluster import AffinityRouter, CacheAwareRouter, CacheAwareSettings, simulate_cluster
from pbkv_server.sim.profiles import get_profile
from pbkv_server.sim.simulator import load_workload, simulate
from pbkv_server.sim.synth import generate, write_trace

HW = get_profile("h100-qwen2.5-32b")
KEYS = ("hit_rate", "host_hit_rate", "mean_latency_s", "p99_latency_s", "mean_ttft_s", "workflows", "requests",
        "timeline")


@pytest.fixture(scope="module")
def trace():
    records = list(generate("research", 40, seed=5))
    return records, load_workload(records)


@pytest.mark.parametrize("policy", ["lru", "pbkv"])
def test_one_replica_replays_exactly_like_the_single_engine_simulator(trace, policy):
    records, workload = trace
    single = simulate(workload, policy, HW, concurrency=8, predictor=make_predictor("markov", 3, records),
                      device_tokens=30_000)
    cluster = simulate_cluster(workload, policy, HW, replicas=1, router="round-robin", concurrency=8,
                               predictor_factory=lambda: make_predictor("markov", 3, records), device_tokens=30_000)
    assert single.engine.stats.evictions > 0, "the device must be tight, or the comparison checks little"
    assert {k: cluster.summary[k] for k in KEYS} == {k: single.summary[k] for k in KEYS}
    assert cluster.summary["evictions"] == single.engine.stats.evictions


def test_affinity_keeps_every_workflow_on_one_replica_and_ends_it_there_only(trace):
    records, workload = trace
    result = simulate_cluster(workload, "pbkv", HW, replicas=4, router="affinity", concurrency=16,
                              predictor_factory=lambda: make_predictor("markov", 3, records), device_tokens=30_000)
    s = result.summary
    assert s["single_replica_share"] == 1.0 and s["end_deliveries"] == 40 and s["requests"] == workload.invocations
    ring = AffinityRouter(4)  # the same ring, asked independently
    expected = Counter(ring.route(None, wid, []) for wid in {u.workflow_ids[0] for u in workload.units})
    served = Counter({r: e.stats.retired_workflows for r, e in enumerate(result.engines)})
    assert +served == +expected  # each replica retired exactly the workflows hashed to it
    assert all(not e.active_workflows() for e in result.engines)


def test_round_robin_spreads_requests_evenly_and_ends_reach_every_replica_that_served(trace):
    records, workload = trace
    result = simulate_cluster(workload, "lru", HW, replicas=3, router="round-robin", concurrency=12,
                              device_tokens=30_000)
    counts = [r["requests"] for r in result.summary["per_replica"]]
    assert sum(counts) == workload.invocations and max(counts) - min(counts) <= 1
    assert all(not e.active_workflows() for e in result.engines)  # no workflow left active anywhere
    assert result.summary["end_deliveries"] == sum(e.stats.retired_workflows for e in result.engines)
    assert result.summary["single_replica_share"] < 0.2


def test_affinity_ring_is_consistent_a_new_replica_takes_keys_only_for_itself():
    keys = [f"wf-{i}" for i in range(2000)]
    before = {k: AffinityRouter(8).route(None, k, []) for k in keys}
    after = {k: AffinityRouter(9).route(None, k, []) for k in keys}
    moved = [k for k in keys if before[k] != after[k]]
    assert all(after[k] == 8 for k in moved)  # nothing moves between old replicas
    assert 0.06 < len(moved) / len(keys) < 0.18  # about 1/9 of the keys
    assert max(Counter(before.values()).values()) < 1.35 * len(keys) / 8  # 150 points each: a fair spread


def _req(rid, blocks, tokens):
    return EngineRequest(request_id=rid, blocks=list(blocks), block_tokens=list(tokens), output_tokens=1)


def _engines(*loads):
    return [SimpleNamespace(stats=SimpleNamespace(queue_depth=0, running=n)) for n in loads]


def test_cache_aware_follows_the_longest_prefix_above_the_threshold_else_the_smallest_mirror():
    router = CacheAwareRouter(3)
    idle = _engines(0, 0, 0)
    assert router.route(_req("a", "ABC", [10, 10, 10]), "w1", idle) == 0  # empty mirrors: smallest, lowest index
    assert router.route(_req("b", "XY", [10, 10]), "w2", idle) == 1  # no match: replica 1 holds 0 tokens
    # A, B, C, D: 30 of 40 tokens match on replica 0 (75% > 30%)
    assert router.route(_req("c", "ABCD", [10, 10, 10, 10]), "w1", idle) == 0
    # A + 90 new tokens: 10/100 = 10% <= 30% -> the smallest mirror: replica 2 (0 tokens)
    assert router.route(_req("d", "AZ", [10, 90]), "w3", idle) == 2
    # X Y Q: 20 of 30 on replica 1 (67%), although replica 1 is the busiest of a balanced cluster
    assert router.route(_req("e", "XYQ", [10, 10, 10]), "w2", _engines(1, 9, 1)) == 1


@pytest.mark.parametrize("loads, expected", [
    ((10, 3), 1),  # 10 - 3 > 4 and 10 > 1.5 * 3: imbalanced, the least loaded despite the full match
    ((10, 7), 0),  # 10 - 7 <= 4: balanced, the match wins
    ((30, 21), 0),  # 30 - 21 > 4 but 30 <= 1.5 * 21: balanced
])
def test_cache_aware_goes_to_the_least_loaded_replica_only_when_the_cluster_is_imbalanced(loads, expected):
    router = CacheAwareRouter(2, CacheAwareSettings(balance_abs_threshold=4, balance_rel_threshold=1.5))
    router.route(_req("a", "AB", [10, 10]), "w1", _engines(0, 0))  # mirrored on replica 0
    assert router.route(_req("b", "AB", [10, 10]), "w1", _engines(*loads)) == expected


def test_offline_policies_are_refused_on_a_cluster(trace):
    with pytest.raises(ValueError, match="offline"):
        simulate_cluster(trace[1], "belady", HW, replicas=2)


def test_bench_replay_with_replicas_writes_the_cluster_figures(tmp_path):
    runner = CliRunner()
    path, out = tmp_path / "t.jsonl", tmp_path / "r.json"
    write_trace(str(path), graph="codegen", workflows=12, seed=2)
    result = runner.invoke(app, ["replay", str(path), "--policy", "lru,pbkv", "--concurrency", "8", "--replicas", "2",
                                 "--router", "cache-aware", "--device-tokens", "40000", "--json", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert list(data) == ["lru", "pbkv"]  # no baseline/reference replays added for gap closed
    for summary in data.values():
        assert summary["replicas"] == 2 and summary["router"] == "cache-aware" and len(summary["per_replica"]) == 2
    assert "2 replicas, router cache-aware" in result.output
    bad = runner.invoke(app, ["replay", str(path), "--policy", "belady", "--replicas", "2"])
    assert bad.exit_code == 2 and "offline" in bad.output
    bad = runner.invoke(app, ["replay", str(path), "--replicas", "2", "--router", "random"])
    assert bad.exit_code == 2 and "--router" in bad.output
