"""The metrics vocabulary: one name, unit and definition per figure, for the simulator and the server.

``pbkv-bench replay`` reports a JSON summary per policy (:mod:`pbkv_server.sim.metrics`) and
``pbkv-server`` exposes Prometheus metrics (:mod:`pbkv_server.http.metrics`). Both take their
names and definitions from here, so "hit rate" means the same thing in a replay table, a JSON
file and a Grafana panel (``docs/architecture.md``, "Metrics"):

* engine figures (:data:`ENGINE_METRICS`) are fields of
  :class:`~pbkv_server.engine.EngineStats`: the summary key is the field name and the Prometheus
  name is ``pbkv_`` + the field name (counters get ``_total`` from the client library);
* decision latencies (:data:`LATENCY_METRICS`) are the engine's wall-clock samples, reported as
  mean / p99 in milliseconds in the summary and as a p50 / p99 / mean gauge family on the server;
* request-level figures (:data:`REQUEST_METRICS`): time to first token (computed per request in
  the simulator, observed as a histogram by the server) and workflow latency (simulator only: the
  server cannot see when a client's workflow began).

The server's p50 / p99 of the decision latencies are nearest-rank over the engine's newest
samples; the replay's p99 interpolates between ranks (:func:`pbkv_server.sim.metrics.percentile`).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Metric", "ENGINE_METRICS", "LATENCY_METRICS", "REQUEST_METRICS", "prometheus_name"]

PREFIX = "pbkv_"


@dataclass(frozen=True, slots=True)
class Metric:
    """One figure.

    Attributes:
        key: summary key and :class:`~pbkv_server.engine.EngineStats` field (engine figures).
        kind: ``counter`` (cumulative since start), ``gauge`` (current value) or ``latency``.
        unit: ``tokens``, ``ratio``, ``nodes``, ``workflows``, ``requests`` or ``seconds``.
        help: the definition, as printed in help texts and on ``/metrics``.
    """

    key: str
    kind: str
    unit: str
    help: str


def prometheus_name(metric: Metric) -> str:
    """The metric's Prometheus name: ``pbkv_<key>`` with a trailing ``_s`` spelled ``_seconds``."""
    key = metric.key[:-2] + "_seconds" if metric.key.endswith("_s") else metric.key
    return PREFIX + key


ENGINE_METRICS = (
    Metric("prompt_tokens", "counter", "tokens", "Prompt tokens of the requests admitted by the engine"),
    Metric("device_hit_tokens", "counter", "tokens", "Prompt tokens served from the device prefix cache"),
    Metric("host_hit_tokens", "counter", "tokens", "Prompt tokens loaded from the host tier"),
    Metric("evictions", "counter", "nodes", "Radix-tree nodes evicted from the device"),
    Metric("evicted_tokens", "counter", "tokens", "Tokens evicted from the device"),
    Metric("dropped_tokens", "counter", "tokens",
           "Tokens that left the cache for good (device evictions the host could not take, host evictions)"),
    Metric("prefetched_tokens", "counter", "tokens", "Tokens prefetched from the host tier to the device"),
    Metric("speculative_prefill_tokens", "counter", "tokens",
           "Prompt tokens of speculative next-turn prefills (not counted in prompt_tokens or the hit rates)"),
    Metric("hit_rate", "gauge", "ratio",
           "Token-level device hit rate: prompt tokens served from device cache / all prompt tokens"),
    Metric("host_hit_rate", "gauge", "ratio",
           "Token-level host hit rate: prompt tokens loaded from the host tier / all prompt tokens"),
    Metric("device_used_tokens", "gauge", "tokens", "Device KV tokens in use (cached + reserved for outputs)"),
    Metric("host_used_tokens", "gauge", "tokens", "Host KV tokens in use"),
    Metric("active_workflows", "gauge", "workflows", "Workflows the engine considers active"),
    Metric("retired_workflows", "counter", "workflows", "Workflows the engine has retired (ended, idle or over the bound)"),
    Metric("queue_depth", "gauge", "requests", "Requests waiting for admission"),
    Metric("running", "gauge", "requests", "Requests in the running batch"),
    Metric("guard_switches", "counter", "switches",
           "Robustness guard mode changes (predicted order <-> LRU order, predictive policies)"),
    Metric("guard_fallback_evictions", "counter", "nodes", "Device evictions made in LRU order by the robustness guard"),
    Metric("guard_ghost_host_hit_tokens", "counter", "tokens",
           "Prompt tokens the guard's ghost LRU found on its host tier (compare host_hit_tokens)"),
    Metric("guard_ghost_hit_tokens", "counter", "tokens",
           "Prompt tokens the guard's ghost LRU found on its device (compare device_hit_tokens)"),
)

LATENCY_METRICS = (
    Metric("eviction_decision_s", "latency", "seconds", "Eviction decision latency (choosing and applying victims)"),
    Metric("score_update_s", "latency", "seconds", "Score update latency per node of a re-predicted workflow"),
    Metric("prefetch_decision_s", "latency", "seconds", "Prefetch decision latency per round"),
    Metric("predictor_call_s", "latency", "seconds", "Predictor call latency"),
    Metric("guard_decision_s", "latency", "seconds", "Robustness guard work per admission (ghost LRU, window, re-filing)"),
)

REQUEST_METRICS = (
    Metric("ttft_s", "latency", "seconds",
           "Time to first token: arrival to first output token (queueing + host loads + prefill)"),
    Metric("workflow_latency_s", "latency", "seconds", "Workflow latency: first submission to end"),
)
