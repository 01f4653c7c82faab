"""The serving metrics engineers read, named as SGLang's ``bench_serving`` names them.

From per-request times (:class:`RequestTiming`) and workflow / session spans, :func:`serving_metrics`
computes, in ``bench_serving``'s vocabulary (``python/sglang/bench_serving.py``,
``calculate_metrics``; vLLM's ``benchmark_serving`` uses the same names):

* ``completed``, ``total_input``, ``total_output``, ``duration_s`` (first arrival to last token);
* ``request_throughput`` (req/s), ``input_throughput``, ``output_throughput`` and
  ``total_throughput`` (tok/s) over ``duration_s``;
* TTFT (arrival to first token), TPOT (``(e2e - ttft) / (output_tokens - 1)`` of each request
  with two or more output tokens), ITL (every gap between two consecutive output tokens, over all
  requests: token-weighted) and end-to-end latency (arrival to last token), each as
  ``mean_X_ms``, ``median_X_ms``, ``p90_X_ms`` and ``p99_X_ms`` with X in ``ttft``, ``tpot``,
  ``itl``, ``e2e_latency``;
* with service-level objectives (:class:`Slo`, ``--slo-ttft`` / ``--slo-tpot`` in ms, as
  ``bench_serving --goodput ttft:X tpot:Y``): ``request_goodput`` (requests meeting every given
  SLO per second) and ``slo_attainment`` (their share of the completed requests). A request
  with one output token has TPOT 0 here, as in vLLM's goodput;
* workflow latency (a workflow's first submission to its end) and, when the trace has sessions
  of several workflows, session latency (the session's first submission to its last workflow's
  end), with the same statistics (``mean_workflow_latency_ms`` ...,
  ``mean_session_latency_ms`` ...).

Percentiles are numpy's default (``np.percentile(..., method="linear")``, which ``bench_serving``
calls): the q-th percentile of n sorted values is the value at rank ``(n - 1) * q / 100``,
linearly interpolated between the two closest ranks; ``median`` is p50. ITL samples come as
``(gap seconds, count)`` pairs (:func:`weighted_percentile` gives the percentile of the list with
each gap repeated ``count`` times, without building it). Empty samples give NaN (``null`` in JSON).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

__all__ = ["Slo", "RequestTiming", "STATS", "LATENCY_METRICS", "serving_metrics", "distribution",
           "weighted_percentile", "SERVING_KEYS"]

#: Statistics of every latency distribution, in report order: key prefix -> percentile (None: mean).
STATS: dict[str, float | None] = {"mean": None, "median": 50.0, "p90": 90.0, "p99": 99.0}
#: The per-request latency distributions, in ``bench_serving``'s order.
LATENCY_METRICS = ("ttft", "tpot", "itl", "e2e_latency")
#: Every key :func:`serving_metrics` can write, and the trace's ``hit_rate_ceiling`` that
#: :func:`~pbkv_server.sim.simulator.simulate` adds (advise and the examples' JSON copy these from a summary).
SERVING_KEYS = (
    ("completed", "total_input", "total_output", "duration_s", "request_throughput", "input_throughput",
     "output_throughput", "total_throughput", "slo_ttft_ms", "slo_tpot_ms", "request_goodput", "slo_attainment",
     "hit_rate_ceiling")
    + tuple(f"{stat}_{m}_ms" for m in (*LATENCY_METRICS, "workflow_latency", "session_latency") for stat in STATS)
)


@dataclass(frozen=True, slots=True)
class Slo:
    """Service-level objectives of goodput, milliseconds (``None``: not checked).

    Attributes:
        ttft_ms: a good request's first token comes at most this long after its arrival.
        tpot_ms: a good request's mean time per output token after the first is at most this.

    Raises:
        ValueError: a bound that is not a positive finite number.
    """

    ttft_ms: float | None = None
    tpot_ms: float | None = None

    def __post_init__(self) -> None:
        # named as the command lines' flags, which are every user of this check
        for name, value in (("--slo-ttft", self.ttft_ms), ("--slo-tpot", self.tpot_ms)):
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive number of milliseconds, got {value}")

    @property
    def given(self) -> bool:
        """Whether any objective is set (goodput is reported only then, as in ``bench_serving``)."""
        return self.ttft_ms is not None or self.tpot_ms is not None


@dataclass(slots=True)
class RequestTiming:
    """One finished request, times in seconds of one clock.

    Attributes:
        arrival / first_token / finish: sent, first output token, last output token.
        prompt_tokens / output_tokens: its input and output lengths.
        itl: its inter-token gaps as ``(seconds, count)`` pairs (``output_tokens - 1`` gaps in all);
            empty when unknown (then ITL is left out for it, TPOT is not).
    """

    arrival: float
    first_token: float
    finish: float
    prompt_tokens: int
    output_tokens: int
    itl: list[tuple[float, int]] = field(default_factory=list)

    @property
    def ttft(self) -> float:
        return self.first_token - self.arrival

    @property
    def e2e(self) -> float:
        return self.finish - self.arrival

    @property
    def tpot(self) -> float | None:
        """Mean time per output token after the first (``bench_serving``); ``None`` with one token."""
        return (self.finish - self.first_token) / (self.output_tokens - 1) if self.output_tokens > 1 else None


def weighted_percentile(pairs: Iterable[tuple[float, int]], q: float) -> float:
    """The ``q``-th percentile (0-100) of the values repeated by their counts, by numpy's linear
    interpolation (rank ``(n - 1) q / 100`` of the n values); NaN when the counts sum to 0."""
    data = sorted((v, c) for v, c in pairs if c > 0)
    n = sum(c for _, c in data)
    if not n:
        return math.nan
    pos = (n - 1) * q / 100.0
    lo = math.floor(pos)
    frac = pos - lo
    low = high = None
    seen = 0  # values of ranks below the current pair
    for v, c in data:
        if low is None and lo < seen + c:
            low = v
        if lo + 1 < seen + c:
            high = v
            break
        seen += c
    if high is None:  # lo is the last rank
        high = low
    return low + (high - low) * frac


def distribution(name: str, values_s: Sequence[float] | None = None,
                 pairs: Iterable[tuple[float, int]] | None = None) -> dict[str, float]:
    """``{"mean_<name>_ms", "median_<name>_ms", "p90_<name>_ms", "p99_<name>_ms"}`` of samples in
    seconds, given as ``values_s`` or as ``(value, count)`` ``pairs``; NaN for no samples."""
    data = list(pairs) if pairs is not None else [(v, 1) for v in values_s or ()]
    n = sum(c for _, c in data)
    out = {}
    for stat, q in STATS.items():
        if not n:
            value = math.nan
        elif q is None:
            value = sum(v * c for v, c in data) / n
        else:
            value = weighted_percentile(data, q)
        out[f"{stat}_{name}_ms"] = 1e3 * value
    return out


def serving_metrics(requests: Sequence[RequestTiming], slo: Slo | None = None,
                    workflow_latencies_s: Sequence[float] = (),
                    session_latencies_s: Mapping[str, float] | None = None) -> dict[str, float]:
    """The ``bench_serving`` figures of finished ``requests`` (module docstring for each key).

    Args:
        slo: goodput's objectives; ``request_goodput``, ``slo_attainment`` and the bounds
            (``slo_ttft_ms``, ``slo_tpot_ms``) are written only when one is given.
        workflow_latencies_s: latency of every ended workflow.
        session_latencies_s: latency of every session (id -> seconds); the session keys are
            written only when given and not empty.
    """
    done = [r for r in requests if math.isfinite(r.finish)]
    total_in = sum(r.prompt_tokens for r in done)
    total_out = sum(r.output_tokens for r in done)
    duration = (max(r.finish for r in done) - min(r.arrival for r in done)) if done else 0.0
    per_s = (lambda x: x / duration) if duration > 0 else (lambda x: math.nan)
    out: dict[str, float] = {
        "completed": len(done), "total_input": total_in, "total_output": total_out, "duration_s": duration,
        "request_throughput": per_s(len(done)), "input_throughput": per_s(total_in),
        "output_throughput": per_s(total_out), "total_throughput": per_s(total_in + total_out),
    }
    out.update(distribution("ttft", [r.ttft for r in done]))
    out.update(distribution("tpot", [t for r in done if (t := r.tpot) is not None]))
    out.update(distribution("itl", pairs=[p for r in done for p in r.itl]))
    out.update(distribution("e2e_latency", [r.e2e for r in done]))
    if slo is not None and slo.given:
        good = sum(_meets(r, slo) for r in done)
        out.update(slo_ttft_ms=slo.ttft_ms, slo_tpot_ms=slo.tpot_ms, request_goodput=per_s(good),
                   slo_attainment=good / len(done) if done else math.nan)
    out.update(distribution("workflow_latency", list(workflow_latencies_s)))
    if session_latencies_s:
        out.update(distribution("session_latency", list(session_latencies_s.values())))
    return out


def _meets(r: RequestTiming, slo: Slo) -> bool:
    """Whether ``r`` meets every given objective (TPOT 0 for a one-token reply, as vLLM's goodput)."""
    if slo.ttft_ms is not None and 1e3 * r.ttft > slo.ttft_ms:
        return False
    return slo.tpot_ms is None or 1e3 * (r.tpot or 0.0) <= slo.tpot_ms
