"""Per-request serving metrics of a replay, with the definitions of the metrics vocabulary
(:mod:`pbkv_server.engine.metric_names`, which the server's Prometheus metrics use too).

* workflow latency: from the workflow's first submission to its end (seconds);
* TTFT of a request: from its arrival to its first output token (queueing + host loads + prefill);
  per-agent TTFT is the mean over that agent's requests;
* device hit rate (token level): prompt tokens served from device cache / all prompt tokens;
* host hit rate: prompt tokens loaded from the host tier / all prompt tokens;
* hit rate over time: the same ratios over the requests whose first token falls in each time bin;
* latency breakdown (:meth:`MetricsCollector.latency_breakdown`): a workflow's latency split
  into admission wait, host-to-device load, prefill, decode and tool gaps, which add up to it;
* decision latencies: mean and p99 of the engine's eviction-decision, score-update,
  prefetch-decision and predictor-call samples (wall-clock, milliseconds in the summary);
* serving metrics in ``bench_serving``'s names (:meth:`MetricsCollector.serving`,
  :mod:`pbkv_server.sim.serving_metrics`): TTFT, TPOT, ITL, end-to-end, workflow and session
  latency at mean, median, p90 and p99, throughput, and goodput under SLOs.

Times are in the caller's clock (engine seconds in a replay).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Any, Iterable

from pbkv_server.engine.metric_names import LATENCY_METRICS
from pbkv_server.sim.serving_metrics import RequestTiming, Slo, serving_metrics

__all__ = ["MetricsCollector", "percentile", "latency_summary", "guard_summary", "BREAKDOWN_PARTS"]

#: Parts of a workflow's latency, in the order they happen to each request (seconds):
#: ``queue_s`` waiting to be admitted (for KV memory or a batch slot, and for the iteration in
#: progress when the request arrived), ``load_s`` host-to-device copies and ``prefill_s``
#: prefill of its admission iteration, ``decode_s`` the rest until its last token (the
#: admission iteration's decode step for the running batch, then one iteration per output
#: token), ``tool_s`` the gaps between a request's last token and the workflow's next request
#: or end (tools, framework, handoffs).
BREAKDOWN_PARTS = ("queue_s", "load_s", "prefill_s", "decode_s", "tool_s")


def guard_summary(stats: Any) -> dict[str, Any]:
    """The robustness guard's figures of a run (:mod:`pbkv_server.engine.guard`), for replay JSON.

    Keys: ``switches`` (mode changes, both directions), ``fallback_evictions`` (device evictions
    made in LRU order), ``fallback_eviction_share`` (of all device evictions; 0 without any),
    ``ghost_hit_rate`` and ``ghost_host_hit_rate`` (device and host hit rates the ghost LRU had
    on the same admissions).
    """
    ev, prompt = stats.evictions, stats.prompt_tokens
    return {
        "switches": stats.guard_switches,
        "fallback_evictions": stats.guard_fallback_evictions,
        "fallback_eviction_share": stats.guard_fallback_evictions / ev if ev else 0.0,
        "ghost_hit_rate": stats.guard_ghost_hit_tokens / prompt if prompt else 0.0,
        "ghost_host_hit_rate": stats.guard_ghost_host_hit_tokens / prompt if prompt else 0.0,
    }


def percentile(values: Iterable[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by linear interpolation between closest ranks (numpy's default
    method, which ``bench_serving`` uses): rank ``(n - 1) q / 100`` of the n sorted values; NaN if empty."""
    data = sorted(values)
    if not data:
        return math.nan
    pos = (len(data) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def latency_summary(samples_s: Iterable[float]) -> dict[str, float]:
    """``{"n", "mean_ms", "p99_ms"}`` of wall-clock samples given in seconds."""
    data = list(samples_s)
    if not data:
        return {"n": 0, "mean_ms": math.nan, "p99_ms": math.nan}
    return {"n": len(data), "mean_ms": 1e3 * sum(data) / len(data), "p99_ms": 1e3 * percentile(data, 99)}


@dataclass(slots=True)
class _Request:
    arrival: float
    agent: str | None
    app: str | None = None
    workflow_id: str | None = None
    first_token: float = math.nan
    prompt_tokens: int = 0
    device_cached: int = 0
    host_cached: int = 0
    finish: float = math.nan
    output_tokens: int = 0
    admitted: float = math.nan
    load_s: float = 0.0
    prefill_s: float = 0.0
    source: Any = None  # the engine that served it (replica index on a cluster)

    def admission(self) -> float:
        """Start of its admission iteration (its first-token time when the producer did not say)."""
        return self.first_token if math.isnan(self.admitted) else self.admitted


class MetricsCollector:
    """Collects request and workflow events and summarises them.

    Feed it :meth:`request_arrived`, :meth:`first_token` (an engine ``FirstToken`` or the same
    fields), :meth:`finished`, :meth:`workflow_started` and :meth:`workflow_ended`; events for
    unknown request ids are ignored (a server may start collecting mid-stream).

    Args:
        timeline_bins: number of equal time bins of the hit-rate timeline (>= 1).

    Raises:
        ValueError: ``timeline_bins`` < 1.
    """

    def __init__(self, timeline_bins: int = 40):
        if timeline_bins < 1:
            raise ValueError("timeline_bins must be >= 1")
        self.timeline_bins = timeline_bins
        self._requests: dict[str, _Request] = {}
        self._wf_start: dict[str, float] = {}
        self._wf_end: dict[str, float] = {}
        self._wf_session: dict[str, str] = {}  # workflow -> its session, where the producer said
        # admission iterations per engine: source -> start -> (end, load seconds, prefill seconds)
        self._iterations: dict[Any, dict[float, tuple[float, float, float]]] = {}

    # ------------------------------------------------------------------ events

    def request_arrived(self, request_id: str, time: float, agent: str | None = None, app: str | None = None,
                        workflow_id: str | None = None) -> None:
        """A request of ``workflow_id`` was sent at ``time`` by ``agent`` of ``app`` (``None`` for
        anonymous requests; requests without a workflow stay out of the latency breakdown)."""
        self._requests[request_id] = _Request(arrival=time, agent=agent, app=app, workflow_id=workflow_id)

    def first_token(self, event: Any, source: Any = None) -> None:
        """Record a ``FirstToken``-like event (request_id, time, prompt_tokens, device/host cached
        tokens, and when present ``admitted_at``, ``load_s``, ``prefill_s``) of the engine named
        ``source`` (a replica index on a cluster; iterations of one engine never stall another's
        requests)."""
        req = self._requests.get(event.request_id)
        if req is None:
            return
        req.first_token = event.time
        req.prompt_tokens = event.prompt_tokens
        req.device_cached = event.device_cached_tokens
        req.host_cached = event.host_cached_tokens
        admitted = getattr(event, "admitted_at", None)
        if admitted is not None:
            req.admitted = admitted
            req.load_s = getattr(event, "load_s", 0.0)
            req.prefill_s = getattr(event, "prefill_s", 0.0)
            # one entry per admission iteration (every request it admitted reports the same)
            req.source = source
            self._iterations.setdefault(source, {})[admitted] = (event.time, req.load_s, req.prefill_s)

    def finished(self, request_id: str, time: float, output_tokens: int | None = None) -> None:
        """The request's last token (of ``output_tokens``; unknown: TPOT and ITL leave it out) was
        produced at ``time``."""
        req = self._requests.get(request_id)
        if req is not None:
            req.finish = time
            if output_tokens is not None:
                req.output_tokens = output_tokens

    def workflow_started(self, workflow_id: str, time: float, session_id: str | None = None) -> None:
        """The workflow's first request was sent at ``time`` (later calls for the same id are
        ignored); ``session_id``: the session it belongs to (session latency)."""
        self._wf_start.setdefault(workflow_id, time)
        if session_id is not None:
            self._wf_session.setdefault(workflow_id, session_id)

    def workflow_ended(self, workflow_id: str, time: float) -> None:
        """The workflow ended at ``time``; its latency is recorded once (unknown ids are ignored)."""
        if workflow_id in self._wf_start:
            self._wf_end.setdefault(workflow_id, time)

    # ------------------------------------------------------------------ raw views

    def workflow_spans(self) -> dict[str, tuple[float, float]]:
        """``workflow_id -> (start, end)`` of every ended workflow."""
        return {w: (self._wf_start[w], end) for w, end in self._wf_end.items()}

    def request_times(self) -> dict[str, tuple[float, float, float]]:
        """``request_id -> (arrival, first token, finish)``; NaN for what has not happened yet."""
        return {rid: (r.arrival, r.first_token, r.finish) for rid, r in self._requests.items()}

    # ------------------------------------------------------------------ summaries

    def hit_rates(self) -> tuple[float, float]:
        """(device hit rate, host hit rate) over all requests that got their first token."""
        prompt = device = host = 0
        for req in self._requests.values():
            if not math.isnan(req.first_token):
                prompt += req.prompt_tokens
                device += req.device_cached
                host += req.host_cached
        return (device / prompt, host / prompt) if prompt else (0.0, 0.0)

    def timeline(self) -> list[dict[str, float]]:
        """Hit rate over time: one entry per bin, ``{"t_start", "t_end", "hit_rate", "host_hit_rate",
        "requests", "prompt_tokens"}``; bins split [first arrival, last first token] evenly.

        A bin without requests reports NaN rates (plotted as gaps).
        """
        served = [r for r in self._requests.values() if not math.isnan(r.first_token)]
        if not served:
            return []
        t0 = min(r.arrival for r in served)
        t1 = max(r.first_token for r in served)
        width = (t1 - t0) / self.timeline_bins or 1.0
        bins = [[0, 0, 0, 0] for _ in range(self.timeline_bins)]  # requests, prompt, device, host
        for r in served:
            b = bins[min(int((r.first_token - t0) / width), self.timeline_bins - 1)]
            b[0] += 1
            b[1] += r.prompt_tokens
            b[2] += r.device_cached
            b[3] += r.host_cached
        return [
            {
                "t_start": t0 + i * width,
                "t_end": t0 + (i + 1) * width,
                "hit_rate": b[2] / b[1] if b[1] else math.nan,
                "host_hit_rate": b[3] / b[1] if b[1] else math.nan,
                "requests": b[0],
                "prompt_tokens": b[1],
            }
            for i, b in enumerate(bins)
        ]

    def per_app(self) -> dict[str, dict[str, float]]:
        """Figures per app (traffic class), over requests that got their first token:
        ``{app: {"requests", "prompt_tokens", "hit_rate", "host_hit_rate", "mean_ttft_s"}}``;
        requests without an app are listed under ``""``."""
        acc: dict[str, list[float]] = {}
        for r in self._requests.values():
            if not math.isnan(r.first_token):
                a = acc.setdefault(r.app or "", [0, 0, 0, 0, 0.0])
                a[0] += 1
                a[1] += r.prompt_tokens
                a[2] += r.device_cached
                a[3] += r.host_cached
                a[4] += r.first_token - r.arrival
        return {app: {"requests": n, "prompt_tokens": p, "hit_rate": d / p if p else 0.0,
                      "host_hit_rate": h / p if p else 0.0, "mean_ttft_s": t / n}
                for app, (n, p, d, h, t) in sorted(acc.items())}

    def latency_breakdown(self) -> dict[str, float]:
        """Mean workflow latency split into :data:`BREAKDOWN_PARTS` (seconds), over ended workflows.

        A request's time in the engine (arrival to last token) is its admission wait, then
        iterations: its own admission iteration (load and prefill of the requests it admitted,
        the decode step of the running batch) and one iteration per further output token. Any
        of those later iterations that admitted other requests also spent time loading and
        prefilling them, during which this request waited (prefill is not chunked into decode
        iterations), so ``load_s`` and ``prefill_s`` count the load and prefill seconds of every
        iteration from its admission to its last token, and ``decode_s`` the rest. Per workflow
        the parts of its finished requests are summed and ``tool_s`` = latency minus their
        time in the engine. A workflow's requests run one after another, so the parts add up to
        its latency and their means to the mean latency. A producer without admission times
        counts each TTFT as admission wait. All parts are NaN when no workflow ended.
        """
        per_source = self._per_source()
        empty = ([], [], [0.0], [0.0])
        sums = {w: [0.0] * 5 for w in self._wf_end}
        for r in self._requests.values():
            acc = sums.get(r.workflow_id) if r.workflow_id is not None else None
            if acc is None or math.isnan(r.finish):
                continue
            admitted = r.admission()
            starts, ends, cum_load, cum_prefill = per_source.get(r.source, empty)
            # iterations of its engine while it ran: started at or after its first token, ended by its last
            lo, hi = bisect.bisect_left(starts, r.first_token), bisect.bisect_right(ends, r.finish)
            load = r.load_s + (cum_load[hi] - cum_load[lo] if hi > lo else 0.0)
            prefill = r.prefill_s + (cum_prefill[hi] - cum_prefill[lo] if hi > lo else 0.0)
            acc[0] += admitted - r.arrival
            acc[1] += load
            acc[2] += prefill
            acc[3] += r.finish - admitted - load - prefill
            acc[4] += r.finish - r.arrival
        if not sums:
            return {k: math.nan for k in BREAKDOWN_PARTS}
        n = len(sums)
        means = [sum(acc[i] for acc in sums.values()) / n for i in range(4)]
        latency = sum(end - self._wf_start[w] for w, end in self._wf_end.items()) / n
        in_engine = sum(acc[4] for acc in sums.values()) / n
        return dict(zip(BREAKDOWN_PARTS, [*means, latency - in_engine]))

    def _per_source(self) -> dict[Any, tuple[list[float], list[float], list[float], list[float]]]:
        """Per engine, its admission iterations sorted by start: ``(starts, ends, cumulative load
        seconds, cumulative prefill seconds)`` (the cumulative lists start with 0)."""
        per_source = {}
        for source, iterations in self._iterations.items():
            starts = sorted(iterations)
            cum_load, cum_prefill = [0.0], [0.0]
            for t in starts:
                _, load, prefill = iterations[t]
                cum_load.append(cum_load[-1] + load)
                cum_prefill.append(cum_prefill[-1] + prefill)
            per_source[source] = (starts, [iterations[t][0] for t in starts], cum_load, cum_prefill)
        return per_source

    def request_timings(self) -> list[RequestTiming]:
        """Every finished request as a :class:`~pbkv_server.sim.serving_metrics.RequestTiming`, with
        its inter-token gaps rebuilt from the iterations of its engine.

        The engine reports admission iterations one by one (each :class:`FirstToken`) but runs
        decode-only stretches in one go, so a request's ``output_tokens - 1`` gaps are rebuilt:
        each admission iteration of its engine that started at or after its first token and ended
        by its last is one gap of that iteration's length (it decoded one token for the request
        while it loaded and prefilled others: the long gaps of the tail), and the remaining gaps
        share the rest of its decode time evenly (decode steps between two admissions differ only
        by the growth of the batch's context). An iteration that admitted only the engine's own
        internal requests (speculative prefill) reports nothing and falls among the even gaps.
        A request whose output length is unknown gets no gaps.
        """
        per_source = self._per_source()
        empty: tuple[list[float], list[float], list, list] = ([], [], [0.0], [0.0])
        out = []
        for r in self._requests.values():
            if math.isnan(r.finish) or math.isnan(r.first_token):
                continue
            gaps: list[tuple[float, int]] = []
            n_gaps = r.output_tokens - 1
            if n_gaps > 0:
                starts, ends, _, _ = per_source.get(r.source, empty)
                lo, hi = bisect.bisect_left(starts, r.first_token), bisect.bisect_right(ends, r.finish)
                interrupts = [ends[i] - starts[i] for i in range(lo, min(hi, lo + n_gaps))]  # the first n_gaps
                gaps = [(g, 1) for g in interrupts]
                rest = n_gaps - len(interrupts)
                if rest:
                    gaps.append((max(0.0, r.finish - r.first_token - sum(interrupts)) / rest, rest))
            out.append(RequestTiming(r.arrival, r.first_token, r.finish, r.prompt_tokens, r.output_tokens, gaps))
        return out

    def serving(self, slo: Slo | None = None) -> dict[str, float]:
        """The ``bench_serving`` figures (:func:`pbkv_server.sim.serving_metrics.serving_metrics`):
        request latencies from :meth:`request_timings`, workflow latencies of the ended workflows,
        and session latencies (a session's first submission to its last workflow's end) when some
        session holds two or more ended workflows; goodput with ``slo``."""
        spans: dict[str, list[float]] = {}
        for w, end in self._wf_end.items():
            session = self._wf_session.get(w)
            if session is not None:
                span = spans.setdefault(session, [self._wf_start[w], end, 0])
                span[0], span[1], span[2] = min(span[0], self._wf_start[w]), max(span[1], end), span[2] + 1
        sessions = {s: end - start for s, (start, end, _) in spans.items()}
        if not any(n >= 2 for _, _, n in spans.values()):
            sessions = {}  # every session is one workflow: the workflow figures say it all
        return serving_metrics(self.request_timings(), slo,
                               [end - self._wf_start[w] for w, end in self._wf_end.items()], sessions)

    def ttft_breakdown(self) -> dict[str, float]:
        """Mean TTFT split into ``queue_s``, ``load_s``, ``prefill_s`` and ``decode_s`` (the
        admission iteration's decode step for the running batch), over requests that got their
        first token; NaN when none did."""
        served = [r for r in self._requests.values() if not math.isnan(r.first_token)]
        if not served:
            return {k: math.nan for k in BREAKDOWN_PARTS[:4]}
        sums = [0.0] * 4
        for r in served:
            admitted = r.admission()
            for i, part in enumerate((admitted - r.arrival, r.load_s, r.prefill_s,
                                      r.first_token - admitted - r.load_s - r.prefill_s)):
                sums[i] += part
        return {k: v / len(served) for k, v in zip(BREAKDOWN_PARTS[:4], sums)}

    def mean_queue_length(self) -> float:
        """Mean number of requests waiting for admission over the replay, by Little's law: the
        total admission wait of the served requests over the span from the first arrival to the
        last first token (0 when nothing was served). At 1 or more, the device on average no
        longer admits every request when it arrives."""
        served = [r for r in self._requests.values() if not math.isnan(r.first_token)]
        if not served:
            return 0.0
        span = max(r.first_token for r in served) - min(r.arrival for r in served)
        wait = sum(r.admission() - r.arrival for r in served)
        return wait / span if span > 0 else 0.0

    def per_agent_ttft(self) -> dict[str, float]:
        """Mean TTFT (seconds) per agent name, over requests that got their first token."""
        sums: dict[str, list[float]] = {}
        for r in self._requests.values():
            if r.agent is not None and not math.isnan(r.first_token):
                sums.setdefault(r.agent, []).append(r.first_token - r.arrival)
        return {a: sum(v) / len(v) for a, v in sorted(sums.items())}

    def mean_latency_s(self) -> float:
        """Mean workflow latency, seconds (the summary's ``mean_latency_s``; NaN for none): what an
        offline reference's earlier order runs report, without a whole summary each."""
        lat = self._latencies()
        return sum(lat) / len(lat) if lat else math.nan

    def _latencies(self) -> list[float]:
        """Each finished workflow's latency, seconds, in the order workflows finished."""
        return [end - self._wf_start[w] for w, end in self._wf_end.items()]

    def summary(self, engine_stats: Any = None, slo: Slo | None = None) -> dict[str, Any]:
        """All metrics as a JSON-ready dict.

        Keys: ``hit_rate``, ``host_hit_rate``, ``mean_latency_s``, ``p50_latency_s``,
        ``p99_latency_s``, ``mean_ttft_s``, ``p99_ttft_s``, ``per_agent_ttft_s``, ``per_app``, ``workflows``,
        ``requests``, ``timeline``, ``latency_breakdown_s`` (:meth:`latency_breakdown`),
        ``ttft_breakdown_s`` (:meth:`ttft_breakdown`), ``mean_queue_length``
        (:meth:`mean_queue_length`), the ``bench_serving`` keys of :meth:`serving` (goodput with
        ``slo``); with ``engine_stats`` (an ``EngineStats``)
        also ``evictions``, ``evicted_tokens``, ``prefetched_tokens``, ``speculative_prefill_tokens``,
        ``mean_decode_step_s`` (mean duration of the decode part of an iteration, NaN without any) and ``latency_ms``
        (per kind: n, mean_ms, p99_ms).
        """
        ttfts = [r.first_token - r.arrival for r in self._requests.values() if not math.isnan(r.first_token)]
        lat = self._latencies()
        hit, host = self.hit_rates()
        out: dict[str, Any] = {
            "hit_rate": hit,
            "host_hit_rate": host,
            "mean_latency_s": sum(lat) / len(lat) if lat else math.nan,  # as mean_latency_s()
            "p50_latency_s": percentile(lat, 50),
            "p99_latency_s": percentile(lat, 99),
            "mean_ttft_s": sum(ttfts) / len(ttfts) if ttfts else math.nan,
            "p99_ttft_s": percentile(ttfts, 99),
            "per_agent_ttft_s": self.per_agent_ttft(),
            "per_app": self.per_app(),
            "workflows": len(lat),
            "requests": len(ttfts),
            "timeline": self.timeline(),
            "latency_breakdown_s": self.latency_breakdown(),
            "ttft_breakdown_s": self.ttft_breakdown(),
            "mean_queue_length": self.mean_queue_length(),
        }
        out.update(self.serving(slo))
        if engine_stats is not None:
            n_decode = getattr(engine_stats, "decode_iterations", 0)
            out["mean_decode_step_s"] = engine_stats.decode_s / n_decode if n_decode else math.nan
            out["evictions"] = engine_stats.evictions
            out["evicted_tokens"] = engine_stats.evicted_tokens
            out["prefetched_tokens"] = engine_stats.prefetched_tokens
            out["speculative_prefill_tokens"] = engine_stats.speculative_prefill_tokens
            # engine model sglang (docs/cost-model.md): requests retracted when KV ran out, and
            # decode steps where the real engine would have aborted one for lack of memory
            out["retractions"] = getattr(engine_stats, "retractions", 0)
            out["retracted_tokens"] = getattr(engine_stats, "retracted_tokens", 0)
            out["oom_events"] = getattr(engine_stats, "oom_events", 0)
            out["latency_ms"] = {
                name.removesuffix("_s"): latency_summary(getattr(engine_stats, name, ()))
                for name in (m.key for m in LATENCY_METRICS)
            }
        return out

