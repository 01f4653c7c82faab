"""Prometheus metrics of one server (``GET /metrics``).

Names and definitions come from the metrics vocabulary (:mod:`pbkv_server.engine.metric_names`), shared with
the simulator's summaries. Each server owns a private :class:`prometheus_client.CollectorRegistry`,
so several servers in one process (tests, examples) never share or clash over metric names. Engine figures (hit rates,
evictions, prefetches, workflows, queue depth, tier usage, decision latencies) are read from
``Engine.stats`` at scrape time by a custom collector; per-request figures (TTFT, latency,
malformed hints, KV-hint actions) are observed as requests finish.
"""

from __future__ import annotations

import itertools
import statistics
from typing import Any, Callable, Iterable

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    Info,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from pbkv_server.engine.metric_names import ENGINE_METRICS, LATENCY_METRICS, REQUEST_METRICS, prometheus_name

__all__ = ["ServerMetrics", "CONTENT_TYPE", "route_label"]

#: Content type of :meth:`ServerMetrics.render` output.
CONTENT_TYPE = CONTENT_TYPE_LATEST

# TTFT buckets (seconds): simulated prefill of a few tokens up to multi-second queues.
_TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

# Latency samples per scrape used for the quantile gauges (newest first).
_SCRAPE_SAMPLES = 10_000

class ServerMetrics:
    """The metrics of one server.

    Args:
        stats: callable returning the engine's current ``EngineStats`` (or ``None`` before start).
        info: constant labels of ``pbkv_server_info`` (policy, profile, engine, predictor).
    """

    def __init__(self, stats: Callable[[], Any], info: dict[str, str]):
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "pbkv_requests", "HTTP requests by route and status", ["route", "status"], registry=self.registry
        )
        ttft = REQUEST_METRICS[0]
        self.ttft = Histogram(prometheus_name(ttft), ttft.help + " (simulated engine seconds)",
                              buckets=_TTFT_BUCKETS, registry=self.registry)
        self.latency = Histogram(
            "pbkv_request_latency_seconds", "Wall time from request arrival to last byte", registry=self.registry
        )
        self.malformed_hints = Counter(
            "pbkv_malformed_hints", "Malformed PBKV hints ignored, one count each (the request is still served)",
            registry=self.registry,
        )
        self.kv_hint_actions = Counter(
            "pbkv_kv_hint_actions",
            "KV-hint envelope actions (kv_hints) by kind (retain, demote, evict, fetch; unknown: a type or version "
            "not understood) and outcome (applied; no_effect: understood, nothing to act on here; ignored)",
            ["action", "outcome"], registry=self.registry,
        )
        self.rejected = Counter(
            "pbkv_rejected_requests",
            "Requests refused by the HTTP layer before routing, by reason (header_too_large, too_many_headers, "
            "uri_too_long, control_char_in_hint_header, invalid_header, invalid_http)",
            ["reason"], registry=self.registry,
        )
        self.workflow_ends = Counter(
            "pbkv_workflow_ends", "Workflow end signals and retirements by status and source",
            ["status", "source"], registry=self.registry,
        )
        self.cached_tokens = Counter(
            "pbkv_served_cached_tokens", "Prompt tokens reported as cached in responses", registry=self.registry
        )
        Info("pbkv_server", "Server configuration", registry=self.registry).info(info)
        self.registry.register(_EngineCollector(stats))
        # process_resident_memory_bytes, process_open_fds, ...: what a soak run watches.
        ProcessCollector(registry=self.registry)
        self._watched = _WatchedGauges()
        self.registry.register(self._watched)

    def watch(self, name: str, doc: str, read: Callable[[], float | None]) -> None:
        """Export gauge ``name`` read by ``read()`` at scrape time (skipped while it returns ``None``
        or raises, e.g. before the engine exists)."""
        self._watched.gauges.append((name, doc, read))

    def count_rejected(self, status: int, reason: str, path: str) -> None:
        """Count a request the HTTP layer refused: by reason, and by route and status like any answer."""
        self.rejected.labels(reason).inc()
        self.requests.labels(route_label(path), str(status)).inc()

    def render(self) -> bytes:
        """The text exposition of every metric (``CONTENT_TYPE``)."""
        return generate_latest(self.registry)


class _WatchedGauges(Collector):
    """Gauges read from live objects at scrape time (tree size, workflow-table sizes)."""

    def __init__(self) -> None:
        self.gauges: list[tuple[str, str, Callable[[], float | None]]] = []

    def describe(self) -> Iterable[Any]:
        return []

    def collect(self) -> Iterable[Any]:
        for name, doc, read in self.gauges:
            try:
                value = read()
            except Exception:  # a scrape must not fail because one object is not there yet
                continue
            if value is not None:
                yield GaugeMetricFamily(name, doc, value=float(value))


def route_label(path: str) -> str:
    """The ``route`` label of a request path: a fixed set, whatever paths clients send."""
    # Fixed labels keep the metric's cardinality bounded.
    if path == "/v1/chat/completions":
        return "chat"
    if path == "/v1/completions":
        return "completions"
    if path.startswith("/pbkv/v1/workflows/"):
        return "workflow_end"
    if path.startswith("/pbkv/v1/apps/"):
        return "app_graph"
    if path == "/close_session":
        return "close_session"
    if path in ("/health", "/metrics", "/v1/models"):
        return path.strip("/").replace("/", "_")
    return "other"


class _EngineCollector(Collector):
    """Reads ``Engine.stats`` at scrape time: figures are exact at every scrape, no polling."""

    def __init__(self, stats: Callable[[], Any]):
        self._stats = stats

    def describe(self) -> Iterable[Any]:
        return []  # dynamic: the families are known only once the engine exists

    def collect(self) -> Iterable[Any]:
        stats = self._stats()
        if stats is None:
            return
        for metric in ENGINE_METRICS:
            value = getattr(stats, metric.key, None)
            if value is None:
                continue
            family = CounterMetricFamily if metric.kind == "counter" else GaugeMetricFamily
            yield family(prometheus_name(metric), metric.help, value=float(value))
        for metric in LATENCY_METRICS:
            samples = getattr(stats, metric.key, None)
            if samples:
                # The newest samples only: sorting the engine's whole window on every scrape is too slow.
                yield _summary(prometheus_name(metric), metric.help,
                               list(itertools.islice(reversed(samples), _SCRAPE_SAMPLES)))


def _summary(name: str, doc: str, samples: list[float]) -> GaugeMetricFamily:
    # Quantiles over the samples the engine keeps (its own bounded window), plus their mean.
    ordered = sorted(samples)
    fam = GaugeMetricFamily(name, doc + " (over the engine's recent samples)", labels=["stat"])
    for q in (0.5, 0.99):
        fam.add_metric([f"p{int(q * 100)}"], ordered[min(len(ordered) - 1, int(q * len(ordered)))])
    fam.add_metric(["mean"], statistics.fmean(ordered))
    return fam
