"""One metrics vocabulary: the server's /metrics and the replay summaries use the same names.

Every engine figure of :mod:`pbkv_server.engine.metric_names` is an ``EngineStats`` field, appears on a live
server's ``/metrics`` under ``pbkv_<key>`` with the vocabulary's definition, and the replay
summary reports the engine counters and decision latencies under the same keys.
"""

from __future__ import annotations

import httpx

from pbkv_contract.hints import Hints
from pbkv_server.engine import EngineStats
from pbkv_server.engine.metric_names import ENGINE_METRICS, LATENCY_METRICS, prometheus_name
from pbkv_server.predictors import make_predictor
from pbkv_server.hardware.profiles import get_profile
from pbkv_server.sim.simulator import ReplayConfig, ReplayOptions, load_workload, simulate
from pbkv_server.sim.synth.agents import generate
from .server_http_fixtures import chat


def test_every_engine_metric_is_an_engine_stats_field():
    stats = EngineStats()
    assert all(hasattr(stats, m.key) for m in ENGINE_METRICS + LATENCY_METRICS)
    assert prometheus_name(LATENCY_METRICS[0]) == "pbkv_eviction_decision_seconds"


def test_server_exposes_every_engine_metric_with_its_definition(start_server):
    server = start_server(policy="pbkv")
    with httpx.Client(base_url=server.url, timeout=30) as client:
        assert chat(client, [{"role": "user", "content": "hello " * 50}], Hints("wf-m", "planner", 0, "demo")).status_code == 200
        text = client.get("/metrics").text
    for metric in ENGINE_METRICS:
        name = prometheus_name(metric) + ("_total" if metric.kind == "counter" else "")
        assert f"\n{name} " in text, name
        assert f"# HELP {prometheus_name(metric)}" in text and metric.help in text, metric.key
    assert "\npbkv_prompt_tokens_total 0.0" not in text  # the request was counted


def test_replay_summary_uses_the_vocabulary_keys():
    records = list(generate("codegen", 6, seed=2))
    result = simulate(load_workload(records), ReplayConfig("pbkv", get_profile("h100-qwen2.5-32b"),
                                                           device_tokens=60_000),
                      ReplayOptions(concurrency=2, predictor=make_predictor("markov", 3, records)))
    summary = result.summary
    stats = result.engine.stats
    for key in ("evictions", "evicted_tokens", "prefetched_tokens"):
        assert summary[key] == getattr(stats, key)
    assert summary["hit_rate"] == stats.hit_rate  # same definition, per-request and engine-wide
    assert set(summary["latency_ms"]) == {m.key.removesuffix("_s") for m in LATENCY_METRICS}
