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
4. replay under each policy (:data:`POLICIES`, plus what the user's engine ships:
   :func:`pbkv_server.sim.shipped.shipped_policies`) and the offline reference ``opt``; a policy's
   speedup is ``L_lru / L_policy`` (mean workflow latency; above 1 is faster), ``opt``'s is the
   reference's (MIN on both tiers: it bounds device hits without prefetch, not latency;
   ``docs/design/offline-reference.md``);
5. verdict (:func:`verdict_of`): PBKV against LRU and against the best alternative the user's
   engine ships (SGLang's session cache, ...). Deploy PBKV when it is :data:`MIN_SPEEDUP` faster
   than LRU and faster than that alternative by more than the no-difference rule
   (:data:`pbkv_server.sim.measures.MIN_DIFFERENCE`); a gap under that rule "ties": no reason to
   switch. A trace recorded against pbkv-server's simulator (its ``served_by``) is named as such:
   its reply lengths are made up.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

from pbkv_contract.trace import SERVED_BY_SIM, InvocationRecord, TraceRecord
from pbkv_server.engine import HardwareProfile
from pbkv_server.engine.policies import BASELINE_POLICY, DEFAULT_POLICY, HEADLINE_POLICIES, REFERENCE_POLICY
from pbkv_server.sim.capacity import WorkingSet, largest_request, working_set
from pbkv_server.sim.measures import MIN_DIFFERENCE
from pbkv_server.sim.serving_metrics import SERVING_KEYS, Slo
from pbkv_server.sim.simulator import MAX_ORDER_RUNS
from pbkv_server.sim.shipped import DEFAULT_ENGINE, ENGINES, alternative_label, best_shipped, shipped_policies
from pbkv_server.hardware.profiles import GPU_SPECS, MODEL_SPECS, GpuSpec, ModelSpec, derive_profile, host_tokens_for
from pbkv_server.predictors.factory import DEFAULT_ONLINE_PREDICTOR

if TYPE_CHECKING:
    from pbkv_server.sim.progress import ReplayBar

__all__ = ["POLICIES", "MIN_SPEEDUP", "ADVISE_ORDER_RUNS", "DEFAULT_HOST_RATIO", "MODELS", "GPUS", "MAX_GPU_MEMORY_GIB",
           "MAX_TP", "Advice",
           "custom_profile", "advise", "advice_lines", "plot_advice", "regime_of", "verdict_of", "trace_origin",
           "advised_policies"]

#: Policies advise replays whatever the engine, in report order; the offline reference
#: (REFERENCE_POLICY) gives the scale. :func:`advised_policies` adds what the user's engine ships.
POLICIES = HEADLINE_POLICIES
#: Speedup over LRU below which a policy is "no gain": 3 % of mean latency is within what a
#: change of concurrency or arrival order moves (a replay is one sample of the workload's order).
MIN_SPEEDUP = 1.03
#: Order runs of the offline reference in advise (``--order-runs``; the studies and published tables
#: run :data:`~pbkv_server.sim.simulator.MAX_ORDER_RUNS`). Each run is a whole replay: on a day of
#: coding-agent traffic, eight made ``opt`` most of advise's time (issue 33 asks for at most 5x
#: lru's CPU). Run 1 ranks uses by the timing-only order and is the weak one with a host tier;
#: from run 2 on the bound moves up and down from run to run rather than climbing
#: (docs/replay-cost.md tables it run by run), so three runs are the reference refined twice.
ADVISE_ORDER_RUNS = 3
#: Host tier / device of advise: the PBKV paper's setup (SGLang HiCache with HICACHE_RATIO=1).
DEFAULT_HOST_RATIO = 1.0
#: Models ``--model`` knows (short names and Hugging Face ids): their config.json facts are in profiles.py.
MODELS: dict[str, ModelSpec] = {}
for _short, _m in MODEL_SPECS.items():
    MODELS[_short] = MODELS[_m.name.lower()] = _m
#: GPUs whose speeds (FLOPS, HBM and PCIe bandwidth) a ``--gpu-memory`` setup runs at.
GPUS: dict[str, GpuSpec] = dict(GPU_SPECS)
MIB = 2**20
#: Largest ``--gpu-memory`` per GPU, GiB: 4x the largest GPU memory sold today (288 GB HBM3e on
#: B300 and MI355X), room for the next generations; beyond it a value (1e30) is a typo, not hardware.
MAX_GPU_MEMORY_GIB = 1024.0
#: Most GPUs serving one model (``--tp``): the largest NVLink domain sold today (GB200 NVL72) has 72.
MAX_TP = 72


def custom_profile(gpu_memory_gib: float, model: str, tp: int = 1, gpu: str = "h100") -> HardwareProfile:
    """The profile of ``tp`` GPUs of ``gpu_memory_gib`` GiB each serving ``model``, by the rule of
    :mod:`pbkv_server.hardware.profiles` (speeds of the ``gpu`` datasheet).

    Raises:
        ValueError: unknown model or GPU, memory not in (0, :data:`MAX_GPU_MEMORY_GIB`], ``tp`` not
            in 1..:data:`MAX_TP`, or the weights do not fit.
    """
    spec = MODELS.get(model.lower())
    if spec is None:
        raise ValueError(f"unknown model {model!r}; known: {', '.join(sorted(k for k in MODELS if '/' not in k))}")
    if gpu not in GPUS:
        raise ValueError(f"unknown GPU {gpu!r}; known: {', '.join(GPUS)}")
    if not (math.isfinite(gpu_memory_gib) and 0 < gpu_memory_gib <= MAX_GPU_MEMORY_GIB):
        raise ValueError(f"GPU memory must be a positive number of GiB up to {MAX_GPU_MEMORY_GIB:g} (the largest "
                         f"GPU today has 288 GB), got {gpu_memory_gib:g}")
    if not 1 <= tp <= MAX_TP:
        raise ValueError(f"tp must be in 1..{MAX_TP} GPUs (GB200 NVL72, the largest NVLink domain), got {tp}")
    base = GPUS[gpu]
    card = GpuSpec(f"{base.name} with {gpu_memory_gib:g} GiB", gpu_memory_gib * 1024 * MIB, base.bf16_flops,
                   base.hbm_bytes_per_s, base.pcie_bytes_per_s, base.source)
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
        engine: the user's inference engine (:data:`pbkv_server.sim.shipped.ENGINES`).
        alternative: the fastest policy that engine ships (the baseline when none beats LRU).
        trace_origin: ``"simulator"`` when every request was answered by pbkv-server's simulator
            (trace field ``served_by``), ``"partly simulator"`` when some were, ``None`` when the
            trace does not say (a real server, or a trace written before the field).
        trace: the trace's name (for the figure), predictor: the predictor spec of he/pbkv.
        hit_rate_ceiling: the trace's infinite-cache hit rate (:mod:`pbkv_server.sim.ceiling`).
        serving: per policy, its ``bench_serving`` figures (:mod:`pbkv_server.sim.serving_metrics`;
            goodput when SLOs were given).
        order_runs: the most order runs the offline reference was allowed (``--order-runs``).
        reference_runs: the order runs it took (fewer when its order was stable early); ``None``
            when it was not replayed.
        reference_stable: whether its last run's order was that of the run before (the fixed
            point MIN is defined at); ``None`` when it was not replayed.
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
    engine: str = DEFAULT_ENGINE
    alternative: str = BASELINE_POLICY
    trace_origin: str | None = None
    trace: str = ""
    predictor: str = DEFAULT_ONLINE_PREDICTOR
    hit_rate_ceiling: float | None = None
    serving: dict[str, dict[str, float]] = field(default_factory=dict)
    order_runs: int = ADVISE_ORDER_RUNS
    reference_runs: int | None = None
    reference_stable: bool | None = None

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


def advised_policies(engine: str = DEFAULT_ENGINE) -> list[str]:
    """What advise replays for a user of ``engine``: :data:`POLICIES`, with the policies ``engine``
    ships inserted before the offline reference (registry order)."""
    online = [p for p in POLICIES if p != REFERENCE_POLICY]
    extra = [p for p in shipped_policies(engine) if p not in online]
    return online + extra + ([REFERENCE_POLICY] if REFERENCE_POLICY in POLICIES else [])


def trace_origin(records: Sequence[TraceRecord]) -> str | None:
    """``"simulator"`` when every invocation says pbkv-server's simulator answered it
    (``served_by``), ``"partly simulator"`` when some do, else ``None`` (unknown)."""
    calls = [r for r in records if isinstance(r, InvocationRecord)]
    simulated = sum(r.served_by == SERVED_BY_SIM for r in calls)
    if not simulated:
        return None
    return "simulator" if simulated == len(calls) else "partly simulator"


def advise(records: Sequence[TraceRecord], profile: HardwareProfile, *, concurrency: int = 32,
           host_ratio: float = DEFAULT_HOST_RATIO, policies: Sequence[str] | None = None,
           predictor: str = DEFAULT_ONLINE_PREDICTOR, horizon: int = 3, progress: Callable[[str], None] | None = None,
           engine: str = DEFAULT_ENGINE, trace: str = "", slo: Slo | None = None,
           order_runs: int = ADVISE_ORDER_RUNS, bar: Callable[[str, int, int], ReplayBar] | None = None) -> Advice:
    """Demand, capacity, regime, every policy's speedup over LRU and the verdict for ``records``.

    Args:
        policies: what to replay (default :func:`advised_policies` of ``engine``).
        engine: the user's inference engine (:data:`pbkv_server.sim.shipped.ENGINES`): the
            verdict compares PBKV with the best policy it ships.
        trace: the trace's name, for the figure.
        slo: goodput's service-level objectives (:class:`~pbkv_server.sim.serving_metrics.Slo`).
        order_runs: most order runs of the offline reference (:data:`ADVISE_ORDER_RUNS`).
        progress: called with each policy's name before its replay.
        bar: makes each replay's progress bar from (policy, replay units, order runs), a
            :class:`~pbkv_server.sim.progress.ReplayBar` (finished after the replay).

    Raises:
        ValueError: no invocation, ``concurrency`` < 1, ``order_runs`` outside
            1..:data:`~pbkv_server.sim.simulator.ORDER_RUNS_LIMIT`, an unknown engine, a host ratio outside
            0..``MAX_HOST_RATIO`` (:func:`pbkv_server.hardware.profiles.host_tokens_for`), or a bad
            predictor spec (all checked before the first replay).
    """
    from pbkv_server.predictors import make_predictor
    from pbkv_server.sim.simulator import ORDER_RUNS_LIMIT, ReplayConfig, ReplayOptions, load_workload, simulate
    from pbkv_server.sim.report import jsonable

    if concurrency < 1:
        raise ValueError("concurrency must be >= 1")
    if not 1 <= order_runs <= ORDER_RUNS_LIMIT:
        raise ValueError(f"order runs must be in 1..{ORDER_RUNS_LIMIT}, got {order_runs}")
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; known: {', '.join(ENGINES)}")
    device = profile.device_kv_tokens
    host = host_tokens_for(profile, None, None, host_ratio)  # one rule with replay: 0..MAX_HOST_RATIO
    apps = {r.app for r in records if isinstance(r, InvocationRecord)}
    app = next(iter(apps)) if len(apps) == 1 else None
    make_predictor(predictor, horizon, records, app=app)  # a bad spec fails now, not after the first replays
    ws = working_set(records, by_session=True)  # the replay admits sessions as units
    live, flight = ws.live_tokens(concurrency), ws.in_flight_tokens(concurrency)
    # prompt + output: what the engine must hold for a request (a prompt alone may fit and its reply not)
    largest, need = largest_request(records)
    advice = Advice(profile.name, concurrency, ws, live, flight, device, host,
                    regime_of(live + flight, need, device, host), engine=engine,
                    trace_origin=trace_origin(records), trace=trace, predictor=predictor, order_runs=order_runs)
    if advice.regime == "request too large":
        advice.verdict = (f"no: the largest request ({largest}: {need:,} tokens of prompt + output) does not fit in "
                          f"the device KV pool ({device:,} tokens); no cache policy can serve it: add GPU memory "
                          f"(more GPUs, tensor parallelism) first")
        return advice
    workload = load_workload(records)
    for name in advised_policies(engine) if policies is None else policies:
        if progress is not None:
            progress(name)
        config = ReplayConfig(name, profile, device_tokens=device, host_tokens=host, horizon=horizon)
        on_end = bar(name, len(workload.units), order_runs) if bar is not None else None
        result = simulate(workload, config,
                          ReplayOptions(concurrency=concurrency, slo=slo, order_runs=order_runs, on_workflow_end=on_end,
                                        predictor=make_predictor(predictor, horizon, records, app=app)))
        if on_end is not None:
            on_end.finish()
        if name == REFERENCE_POLICY:
            advice.reference_runs = result.summary.get("order_runs", 1)
            advice.reference_stable = result.summary.get("order_stable", True)
        advice.latency_s[name] = result.summary["mean_latency_s"]
        advice.hit_rate[name] = result.summary["hit_rate"] + result.summary["host_hit_rate"]
        advice.hit_rate_ceiling = result.summary["hit_rate_ceiling"]
        # NaN (no sample, e.g. no TPOT when every reply is one token) as None: --json stays strict JSON
        advice.serving[name] = jsonable({k: result.summary[k] for k in SERVING_KEYS if k in result.summary})
    base = advice.latency_s.get(BASELINE_POLICY)
    if base:
        advice.speedup = {p: base / lat if lat > 0 else math.nan for p, lat in advice.latency_s.items()}
    advice.alternative = best_shipped(advice.speedup, engine)
    advice.verdict = verdict_of(advice)
    return advice


def verdict_of(a: Advice) -> str:
    """The one-line recommendation for what ``a`` replayed (needs ``a.speedup`` of lru and pbkv).

    In order: no gap to close (even the offline reference is under :data:`MIN_SPEEDUP` x LRU):
    keep LRU; PBKV at least :data:`MIN_SPEEDUP` x LRU: deploy it, unless the best alternative
    the engine ships (``a.alternative``) is as fast (within :data:`MIN_DIFFERENCE`: "ties ...: no
    reason to switch") or faster ("keep ..."); else PBKV gains nothing here, and the line names
    what does.
    """
    s = a.speedup
    bound, pbkv = s.get(REFERENCE_POLICY), s.get(DEFAULT_POLICY)
    if pbkv is None or BASELINE_POLICY not in s:
        return f"undecided: replay {BASELINE_POLICY} and {DEFAULT_POLICY} to decide"
    ref = "not replayed" if bound is None else f"{bound:.2f}x"
    if bound is not None and bound < MIN_SPEEDUP:
        why = ("the reusable working set fits in the device, so LRU never evicts anything reused"
               if a.regime == "fits in device" else "LRU already gets what the offline reference gets")
        return f"no gain: deploy plain LRU; even the offline reference is only {bound:.2f}x LRU ({why})"
    alt = a.alternative if a.alternative in s else BASELINE_POLICY
    label, alt_speedup = alternative_label(alt, a.engine), s[alt]
    engine = ENGINES.get(a.engine, a.engine)
    if pbkv >= MIN_SPEEDUP:
        if alt == BASELINE_POLICY:
            return (f"deploy PBKV: {pbkv:.2f}x faster than LRU, the best of what {engine} ships here (regime "
                    f"{a.regime}; offline reference {ref})")
        over_alt = pbkv / alt_speedup  # L_alt / L_pbkv
        if abs(over_alt - 1) < MIN_DIFFERENCE:
            return (f"ties {label}: no reason to switch (both {pbkv:.2f}x faster than LRU; they differ by "
                    f"{100 * abs(over_alt - 1):.2f}%, under the {100 * MIN_DIFFERENCE:g}% no-difference rule); "
                    f"switch on {label} if you have not")
        if over_alt < 1:
            return (f"keep {label}: {alt_speedup:.2f}x faster than LRU, PBKV {pbkv:.2f}x ({1 / over_alt:.2f}x "
                    f"slower than it)")
        return (f"deploy PBKV: {pbkv:.2f}x faster than LRU and {over_alt:.2f}x faster than {label} (regime "
                f"{a.regime}; offline reference {ref})")
    if alt != BASELINE_POLICY and alt_speedup >= MIN_SPEEDUP:
        return f"no gain from PBKV: {pbkv:.2f}x LRU; keep {label} ({alt_speedup:.2f}x faster than LRU)"
    online = [p for p in s if p not in (REFERENCE_POLICY, BASELINE_POLICY)]
    best = max(online, key=lambda p: s[p], default=DEFAULT_POLICY)
    reference = f"although the offline reference is {ref}" if bound is not None else "(offline reference not replayed)"
    return f"no gain from PBKV: {pbkv:.2f}x LRU {reference}; best online policy {best} {s[best]:.2f}x"


#: What :func:`advice_lines` says about a trace recorded against the simulator.
ORIGIN_NOTE = {
    "simulator": "trace: recorded against pbkv-server's simulator, whose reply lengths a scenario made up; record "
                 "your app against your real server (SGLang, vLLM or your API) before deciding",
    "partly simulator": "trace: partly recorded against pbkv-server's simulator (made-up reply lengths in those "
                        "requests); record your app against your real server before deciding",
}


def advice_lines(a: Advice) -> list[str]:
    """The report, one line each (the CLI prints them)."""
    from pbkv_server.sim.serving_report import serving_line

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
    if a.trace_origin in ORIGIN_NOTE:
        out.append(ORIGIN_NOTE[a.trace_origin])
    if a.latency_s:
        out.append("policy            mean lat s   dev+host hit   speedup vs lru")
        for p, lat in a.latency_s.items():
            out.append(f"{p:16s}  {lat:10.2f}   {a.hit_rate[p]:12.3f}   {a.speedup.get(p, math.nan):8.2f}x")
        if REFERENCE_POLICY in a.speedup:
            runs = a.reference_runs or a.order_runs
            note = ("its order was stable" if a.reference_stable else "its order was not yet stable"
                    + (f"; the studies run --order-runs {MAX_ORDER_RUNS}" if a.order_runs < MAX_ORDER_RUNS else ""))
            out.append(f"offline reference (MIN on both tiers, not a latency bound): "
                       f"{a.speedup[REFERENCE_POLICY]:.2f}x LRU ({runs} order run{'s' if runs > 1 else ''}; {note})")
        if a.hit_rate_ceiling is not None:
            out.append(f"hit-rate ceiling (an infinite cache on this trace): {a.hit_rate_ceiling:.3f}")
        out += [serving_line(p, a.serving[p]) for p in (BASELINE_POLICY, DEFAULT_POLICY) if p in a.serving]
    out.append(f"verdict{f' ({a.trace_origin} trace)' if a.trace_origin else ''}: {a.verdict}")
    return out


def plot_advice(path: str, a: Advice) -> None:
    """The advice figure (:func:`pbkv_server.sim.advise_plot.plot_advice`)."""
    from pbkv_server.sim.advise_plot import plot_advice as plot

    plot(path, a)
