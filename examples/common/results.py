"""Per-policy replay results of an example, the Table-1-style comparison, and its JSON form.

Metric definitions follow ``docs/architecture.md``, "Metrics" (the simulator computes them; this module only
arranges and compares them): workflow latency (submission to end, seconds), per-agent TTFT
(mean over that agent's invocations, seconds), token-level device hit rate (prompt tokens served
from device cache / all prompt tokens), host hit rate.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from pbkv_server.engine.policies import BASELINE_POLICY, REFERENCE_POLICY
from pbkv_server.sim.measures import latency_capture, prefill_saved

__all__ = ["PolicyResult", "Comparison", "compare", "to_json"]


@dataclass
class PolicyResult:
    """One policy's replay of the test traces.

    Attributes:
        policy: policy name.
        mean_latency_s: mean workflow latency, seconds.
        p99_latency_s: 99th-percentile workflow latency, seconds.
        mean_ttft_s: mean TTFT over all invocations, seconds.
        ttft_by_agent: agent -> mean TTFT, seconds.
        hit_rate: token-level device hit rate in [0, 1].
        host_hit_rate: token-level host-tier hit rate in [0, 1].
        makespan_s: simulated time to finish all workflows, seconds.
        timeline: ``(time_s, hit_rate)`` samples of the device hit rate over the run (per window).
        extra: any further figures the simulator reports (evictions, prefetched tokens, ...).
    """

    policy: str
    mean_latency_s: float
    p99_latency_s: float
    mean_ttft_s: float
    ttft_by_agent: dict[str, float]
    hit_rate: float
    host_hit_rate: float
    makespan_s: float
    timeline: list[tuple[float, float]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Comparison:
    """A policy's figures relative to the baseline (LRU) and to the offline reference (Belady).

    Attributes:
        policy: policy name.
        latency_speedup: baseline mean latency / this policy's mean latency (> 1 = faster).
        ttft_speedup: baseline mean TTFT / this policy's mean TTFT.
        hit_rate_ratio: this policy's hit rate / baseline hit rate (inf when the baseline has 0).
        hit_rate_gap_to_ref: reference hit rate - this policy's hit rate (points in [0, 1]);
            ``None`` without a reference.
        latency_vs_ref: this policy's mean latency / reference mean latency; ``None`` without one.
        latency_capture: ``(L_base - L) / (L_base - L_ref)`` (:func:`pbkv_server.sim.measures.latency_capture`);
            ``None`` without a reference or when it is not at least 0.5 % faster than the baseline.
        prefill_saved: share of prompt tokens whose prefill was saved, device hits + host hits x
            host value (:func:`pbkv_server.sim.measures.prefill_saved`); ``None`` without a host value.
    """

    policy: str
    latency_speedup: float
    ttft_speedup: float
    hit_rate_ratio: float
    hit_rate_gap_to_ref: float | None
    latency_vs_ref: float | None
    latency_capture: float | None = None
    prefill_saved: float | None = None


def _ratio(num: float, den: float) -> float:
    return num / den if den > 0 else (float("inf") if num > 0 else 1.0)


def compare(results: Sequence[PolicyResult], baseline: str = BASELINE_POLICY,
            reference: str | None = REFERENCE_POLICY, host_value: float | None = None) -> list[Comparison]:
    """Compare every result with the ``baseline`` policy and the ``reference`` policy.

    ``host_value``: share of a token's prefill a host hit saves under the replay's hardware
    profile (:func:`pbkv_server.engine.guard.host_value`), for ``prefill_saved``.

    Raises:
        KeyError: ``baseline`` is not among the results.
    """
    by_name = {r.policy: r for r in results}
    if baseline not in by_name:
        raise KeyError(f"baseline policy {baseline!r} not among the results ({', '.join(by_name)})")
    base = by_name[baseline]
    ref = by_name.get(reference) if reference else None
    out = []
    for r in results:
        out.append(Comparison(
            policy=r.policy,
            latency_speedup=_ratio(base.mean_latency_s, r.mean_latency_s),
            ttft_speedup=_ratio(base.mean_ttft_s, r.mean_ttft_s),
            hit_rate_ratio=_ratio(r.hit_rate, base.hit_rate),
            hit_rate_gap_to_ref=(ref.hit_rate - r.hit_rate) if ref else None,
            latency_vs_ref=_ratio(r.mean_latency_s, ref.mean_latency_s) if ref else None,
            latency_capture=latency_capture(r.mean_latency_s, base.mean_latency_s, ref.mean_latency_s) if ref else None,
            prefill_saved=None if host_value is None else prefill_saved(r.hit_rate, r.host_hit_rate, host_value),
        ))
    return out


def to_json(results: Sequence[PolicyResult], comparisons: Sequence[Comparison]) -> dict[str, Any]:
    """JSON-ready dict: ``{"policies": {name: result}, "comparison": {name: comparison}}``."""
    return {
        "policies": {r.policy: asdict(r) for r in results},
        "comparison": {c.policy: asdict(c) for c in comparisons},
    }
