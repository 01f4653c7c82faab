"""``pbkv-bench advise``: should this workload run with PBKV on this hardware?

From a recorded trace and a hardware setup:

1. demand: the reusable working set ``W`` and the in-flight demand ``A`` at the replay concurrency
   (:mod:`pbkv_server.sim.capacity`), and the largest prompt;
2. capacity: device KV tokens of the profile (or of ``--gpu-memory``/``--model`` by the profile
   rule, :func:`pbkv_server.hardware.profiles.derive_profile`) and a host tier of ``host_ratio`` x device
   (default 1, the PBKV paper's HiCache baseline);
3. regime: ``fits in device`` (``A + W`` <= device: nothing reusable is ever evicted, so no eviction
   policy can gain), ``fits with host`` (``A + W`` <= device + host), ``short`` (more than both), or
   ``request too large`` (the largest request, prompt + output, exceeds the device: no policy can
   serve it);
4. replay under each policy (:data:`POLICIES`) and the offline reference ``opt``; a policy's speedup
   is ``L_lru / L_policy`` (mean workflow latency; above 1 is faster), ``opt``'s is the reference's
   (MIN on both tiers: it bounds device hits without prefetch, not latency;
   ``docs/design/offline-reference.md``);
5. verdict: deploy PBKV when its speedup reaches :data:`MIN_SPEEDUP`, else say why not (no gap to
   close, or PBKV does not close it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from pbkv_contract.trace import InvocationRecord, TraceRecord
from pbkv_server.engine import HardwareProfile
from pbkv_server.engine.policies import BASELINE_POLICY, DEFAULT_POLICY, HEADLINE_POLICIES, REFERENCE_POLICY
from pbkv_server.sim.capacity import WorkingSet, largest_request, working_set
from pbkv_server.hardware.profiles import H100_SXM, QWEN25_32B, QWEN3_14B, QWEN3_32B, RTX_A6000, GpuSpec, ModelSpec, \
    derive_profile

__all__ = ["POLICIES", "MIN_SPEEDUP", "DEFAULT_HOST_RATIO", "MODELS", "GPUS", "Advice", "custom_profile", "advise",
           "advice_lines", "plot_advice", "regime_of", "verdict_of"]

#: Policies advise replays, in report order; the offline reference (REFERENCE_POLICY) gives the scale.
POLICIES = HEADLINE_POLICIES
#: Speedup over LRU below which a policy is "no gain": 3 % of mean latency is within what a
#: change of concurrency or arrival order moves (a replay is one sample of the workload's order).
MIN_SPEEDUP = 1.03
#: Host tier / device of advise: the PBKV paper's setup (SGLang HiCache with HICACHE_RATIO=1).
DEFAULT_HOST_RATIO = 1.0
#: Models ``--model`` knows (short names and Hugging Face ids): their config.json facts are in profiles.py.
MODELS: dict[str, ModelSpec] = {}
for _m, _short in ((QWEN3_14B, "qwen3-14b"), (QWEN3_32B, "qwen3-32b"), (QWEN25_32B, "qwen2.5-32b")):
    MODELS[_short] = MODELS[_m.name.lower()] = _m
#: GPUs whose speeds (FLOPS, HBM and PCIe bandwidth) a ``--gpu-memory`` setup runs at.
GPUS: dict[str, GpuSpec] = {"h100": H100_SXM, "a6000": RTX_A6000}
MIB = 2**20


def custom_profile(gpu_memory_gib: float, model: str, tp: int = 1, gpu: str = "h100") -> HardwareProfile:
    """The profile of ``tp`` GPUs of ``gpu_memory_gib`` GiB each serving ``model``, by the rule of
    :mod:`pbkv_server.hardware.profiles` (speeds of the ``gpu`` datasheet).

    Raises:
        ValueError: unknown model or GPU, memory <= 0, or the weights do not fit.
    """
    spec = MODELS.get(model.lower())
    if spec is None:
        raise ValueError(f"unknown model {model!r}; known: {', '.join(sorted(k for k in MODELS if '/' not in k))}")
    if gpu not in GPUS:
        raise ValueError(f"unknown GPU {gpu!r}; known: {', '.join(GPUS)}")
    if not (math.isfinite(gpu_memory_gib) and gpu_memory_gib > 0):
        raise ValueError(f"GPU memory must be a positive number of GiB, got {gpu_memory_gib}")
    base = GPUS[gpu]
    card = GpuSpec(f"{base.name} with {gpu_memory_gib:g} GiB", gpu_memory_gib * 1024 * MIB, base.bf16_flops,
                   base.hbm_bytes_per_s, base.pcie_bytes_per_s)
    name = f"{gpu}x{tp}-{gpu_memory_gib:g}gib-{model.lower().split('/')[-1]}"
    return derive_profile(name, spec, card, tp, source=f"pbkv-bench advise --gpu-memory {gpu_memory_gib:g} "
                                                        f"--model {model} --tp {tp} (profile rule of profiles.py)")


@dataclass
class Advice:
    """What :func:`advise` found.

    Attributes:
        profile: the hardware profile's name.
        concurrency: replay concurrency C.
        ws: the trace's working set.
        live_tokens / in_flight_tokens: ``W`` and ``A`` at C.
        device_tokens / host_tokens: capacities.
        regime: one of ``fits in device``, ``fits with host``, ``short``, ``request too large``.
        latency_s: mean workflow latency per replayed policy (empty when nothing could replay).
        speedup: ``L_lru / L_policy`` per policy.
        verdict: the one-line recommendation.
    """

    profile: str
    concurrency: int
    ws: WorkingSet
    live_tokens: float
    in_flight_tokens: float
    device_tokens: int
    host_tokens: int
    regime: str
    latency_s: dict[str, float] = field(default_factory=dict)
    hit_rate: dict[str, float] = field(default_factory=dict)
    speedup: dict[str, float] = field(default_factory=dict)
    verdict: str = ""

    def to_json(self) -> dict[str, Any]:
        from dataclasses import asdict
        return asdict(self)


def regime_of(demand: float, largest: int, device: int, host: int) -> str:
    """The regime of a demand ``A + W`` (tokens) and the largest prompt on ``device`` + ``host`` tokens."""
    if largest > device:
        return "request too large"
    if demand <= device:
        return "fits in device"
    if demand <= device + host:
        return "fits with host"
    return "short"


def advise(records: Sequence[TraceRecord], profile: HardwareProfile, *, concurrency: int = 32,
           host_ratio: float = DEFAULT_HOST_RATIO, policies: Sequence[str] = POLICIES, predictor: str = "markov",
           horizon: int = 3, progress: Callable[[str], None] | None = None) -> Advice:
    """Demand, capacity, regime, every policy's speedup over LRU and the verdict for ``records``.

    Raises:
        ValueError: no invocation, ``concurrency`` < 1, a negative ``host_ratio``, or a bad predictor spec.
    """
    from pbkv_server.predictors import make_predictor
    from pbkv_server.sim.simulator import ReplayConfig, ReplayOptions, load_workload, simulate

    if concurrency < 1:
        raise ValueError("concurrency must be >= 1")
    if not (math.isfinite(host_ratio) and host_ratio >= 0):
        raise ValueError(f"host ratio must be >= 0, got {host_ratio}")
    ws = working_set(records, by_session=True)  # the replay admits sessions as units
    device = profile.device_kv_tokens
    host = round(host_ratio * device)
    live, flight = ws.live_tokens(concurrency), ws.in_flight_tokens(concurrency)
    # prompt + output: what the engine must hold for a request (a prompt alone may fit and its reply not)
    largest, need = largest_request(records)
    advice = Advice(profile.name, concurrency, ws, live, flight, device, host,
                    regime_of(live + flight, need, device, host))
    if advice.regime == "request too large":
        advice.verdict = (f"no: the largest request ({largest}: {need:,} tokens of prompt + output) does not fit in "
                          f"the device KV pool ({device:,} tokens); no cache policy can serve it: add GPU memory "
                          f"(more GPUs, tensor parallelism) first")
        return advice
    apps = {r.app for r in records if isinstance(r, InvocationRecord)}
    app = next(iter(apps)) if len(apps) == 1 else None
    workload = load_workload(records)
    for name in policies:
        if progress is not None:
            progress(name)
        config = ReplayConfig(name, profile, device_tokens=device, host_tokens=host, horizon=horizon)
        result = simulate(workload, config,
                          ReplayOptions(concurrency=concurrency,
                                        predictor=make_predictor(predictor, horizon, records, app=app)))
        advice.latency_s[name] = result.summary["mean_latency_s"]
        advice.hit_rate[name] = result.summary["hit_rate"] + result.summary["host_hit_rate"]
    base = advice.latency_s.get(BASELINE_POLICY)
    if base:
        advice.speedup = {p: base / lat if lat > 0 else math.nan for p, lat in advice.latency_s.items()}
    advice.verdict = verdict_of(advice)
    return advice


def verdict_of(a: Advice) -> str:
    """The one-line recommendation for what ``a`` replayed (needs ``a.speedup`` of lru and pbkv)."""
    s = a.speedup
    bound, pbkv = s.get(REFERENCE_POLICY), s.get(DEFAULT_POLICY)
    if pbkv is None or BASELINE_POLICY not in s:
        return f"undecided: replay {BASELINE_POLICY} and {DEFAULT_POLICY} to decide"
    best = max((p for p in s if p not in (REFERENCE_POLICY, BASELINE_POLICY)), key=lambda p: s[p],
               default=DEFAULT_POLICY)
    if bound is not None and bound < MIN_SPEEDUP:
        why = ("the reusable working set fits in the device, so LRU never evicts anything reused"
               if a.regime == "fits in device" else "LRU already gets what the offline reference gets")
        return f"no gain: deploy plain LRU; even the offline reference is only {bound:.2f}x LRU ({why})"
    if pbkv >= MIN_SPEEDUP:
        extra = f", {best} {s[best]:.2f}x" if best != DEFAULT_POLICY else ""
        return (f"deploy PBKV: {pbkv:.2f}x faster than LRU (regime {a.regime}; offline reference "
                f"{'-' if bound is None else f'{bound:.2f}'}x{extra})")
    return (f"no gain from PBKV: {pbkv:.2f}x LRU although the offline reference is "
            f"{'-' if bound is None else f'{bound:.2f}'}x; best online policy {best} {s[best]:.2f}x")


def advice_lines(a: Advice) -> list[str]:
    """The report, one line each (the CLI prints them)."""
    ws = a.ws
    out = [
        f"workload: {ws.workflows} replay units (sessions or workflows), {ws.requests} requests, largest prompt {ws.max_prompt_tokens:,} tok",
        f"demand at concurrency {a.concurrency}: reusable working set W = {a.live_tokens:,.0f} tok "
        f"(shared {ws.shared_tokens:,} + {min(a.concurrency, ws.workflows)} x {ws.mean_private_tokens:,.0f} private), "
        f"in flight A = {a.in_flight_tokens:,.0f} tok, A + W = {a.live_tokens + a.in_flight_tokens:,.0f} tok",
        f"capacity on {a.profile}: device {a.device_tokens:,} tok, host {a.host_tokens:,} tok "
        f"({a.host_tokens / a.device_tokens:.3g}x device)",
        f"regime: {a.regime}",
    ]
    if a.latency_s:
        out.append("policy            mean lat s   dev+host hit   speedup vs lru")
        for p, lat in a.latency_s.items():
            out.append(f"{p:16s}  {lat:10.2f}   {a.hit_rate[p]:12.3f}   {a.speedup.get(p, math.nan):8.2f}x")
        if REFERENCE_POLICY in a.speedup:
            out.append(f"offline reference (MIN on both tiers, not a latency bound): "
                       f"{a.speedup[REFERENCE_POLICY]:.2f}x LRU")
    out.append(f"verdict: {a.verdict}")
    return out


def plot_advice(path: str, a: Advice) -> None:
    """Two panels: demand (A, W) against capacity (device, device + host); speedup per policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.bar(["demand"], [a.in_flight_tokens], label="in flight A", color="#8888cc")
    left.bar(["demand"], [a.live_tokens], bottom=[a.in_flight_tokens], label="reusable W", color="#4444aa")
    left.bar(["capacity"], [a.device_tokens], label="device", color="#cc8844")
    left.bar(["capacity"], [a.host_tokens], bottom=[a.device_tokens], label="host", color="#eebb88")
    left.set_ylabel("KV tokens")
    left.set_title(f"{a.profile}: {a.regime}")
    left.legend(fontsize=8)
    if a.speedup:
        names = list(a.speedup)
        right.bar(names, [a.speedup[n] for n in names], color=["#999999" if n in (BASELINE_POLICY, REFERENCE_POLICY) else "#4477aa"
                                                                for n in names])
        right.axhline(1.0, color="black", linewidth=0.8)
        right.set_ylabel("speedup vs LRU (L_lru / L_policy)")
        right.tick_params(axis="x", rotation=30)
    else:
        right.text(0.5, 0.5, "not replayed", ha="center", va="center")
    right.set_title(a.verdict[:60] + ("..." if len(a.verdict) > 60 else ""), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
