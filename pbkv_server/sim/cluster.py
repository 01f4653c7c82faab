"""Several replicas behind a router: trace replay for planning past one machine
(``docs/architecture.md``, "Simulator").

Each replica is its own :class:`~pbkv_server.engine.Engine` (its own device and host tiers,
workflow table and predictor). At each request's submission a router model picks the replica,
as the real routers do:

* ``affinity``: consistent hashing of the workflow id, the key the SDK puts in
  ``X-SMG-Routing-Key``. A ring with :data:`VIRTUAL_NODES` points per replica; a key goes to the
  first point clockwise from its hash (SMG ``consistent_hashing``: lightseekorg/smg
  ``model_gateway/src/worker/hash_ring.rs``, 150 virtual nodes per worker; blake2b here, blake3
  there, so the replica a given id lands on differs from SMG's, the spread does not);
* ``round-robin``: the next replica for every request (SMG ``round_robin``);
* ``cache-aware``: SMG's HTTP ``cache_aware`` policy as SMG 1.13 runs it (smg-project/smg
  ``model_gateway/src/policies/cache_aware.rs``: ``select_worker``, ``select_worker_with_text``,
  ``select_matched_candidate``, ``gate_selected_candidate``; the margin cap from ``smg launch
  --help`` 1.13). The router mirrors, per replica, the prefixes it has sent there (block keys here;
  SMG keeps a radix tree of request text, evicted only past ``--max-tree-size``, so it
  over-estimates a replica's cache once the replica evicts). If the longest mirrored prefix covers
  more than ``cache_threshold`` of the prompt's tokens, the request goes to the least loaded of the
  replicas holding it (``load`` = requests in flight; SMG breaks ties at random, lowest index
  here), unless that replica is over the spill gate: ``load > balance_rel_threshold * mean`` and
  ``load > mean + margin``, ``margin = min(balance_abs_threshold, max(4, 2 * sqrt(mean)))`` (two
  standard deviations of a Poisson in-flight count: our reading of "the in-flight count's natural
  swing"); then, and on a miss, to the least loaded replica (ties: fewer requests routed, then
  lower index). The spill target becomes a holder of the prefix, so hot prefixes replicate.
  Thin replicas are warmed as ``--worker-warmup-divert-every`` says: one cache hit in
  ``divert_every`` goes to a thin replica with nothing in flight (the smallest mirror first; thin:
  a mirror under ``thin_ratio`` x the median mirror, until it has grown by ``warmup_blocks``
  blocks). Without it a replica that missed the first requests never holds a shared prefix and
  idles. SMG's age-based warm-up slice (misses offered to workers during their first 60 s) is not
  modelled: misses already go to the least loaded replica. Defaults are SMG's: 0.3, 64, 1.5, 8,
  0.5, 1024. (SMG's ``docs/configuration/routing.md`` still describes the older rule: a global
  max-min imbalance check, and the smallest tree on a miss.)

End signals go to every replica that served the workflow (what the SDK does with SMG's served-by
answer header, ``pbkv_sdk.routing``). Engine clocks advance together: the driver always steps the
busy replica with the earliest clock and hands an outside event (a submission, an end) over only
once every busy replica has reached its time, so one replica's clock runs ahead of another's by
at most one iteration, as a single engine's clock runs ahead of its next submission. With one
replica the replay equals :func:`~pbkv_server.sim.simulator.simulate`'s (a test checks it).
"""

from __future__ import annotations

import bisect
import hashlib
import heapq
import math
import statistics
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from pbkv_contract.prediction import Predictor
from pbkv_server.engine import Engine, EngineConfig, EngineRequest, FirstToken, HardwareProfile
from pbkv_server.engine.policies import policy_info
from pbkv_server.sim.metrics import MetricsCollector
from pbkv_server.sim.simulator import SimulationError, Workload, _Driver, static_graphs

__all__ = [
    "ROUTERS", "VIRTUAL_NODES", "CacheAwareSettings", "Router", "AffinityRouter", "RoundRobinRouter",
    "CacheAwareRouter", "make_router", "ClusterResult", "simulate_cluster", "cluster_line",
]

#: Router models, by their ``pbkv-bench replay --router`` name.
ROUTERS = ("affinity", "round-robin", "cache-aware")
#: Ring points per replica of the affinity router (SMG's VIRTUAL_NODES_PER_WORKER).
VIRTUAL_NODES = 150


@dataclass(frozen=True, slots=True)
class CacheAwareSettings:
    """SMG's cache-aware thresholds (``--cache-threshold``, ``--balance-abs-threshold``,
    ``--balance-rel-threshold``; SMG's defaults).

    Attributes:
        cache_threshold: matched share of the prompt (0-1) above which a holder of the match is chosen.
        balance_abs_threshold: spill gate, requests in flight above the mean (capped, see the module docstring).
        balance_rel_threshold: spill gate, multiple of the mean load.
        divert_every: one cache hit in this many goes to a thin replica (0: never).
        thin_ratio: a mirror under this share of the median mirror (blocks) is thin.
        warmup_blocks: a thin replica is warm once its mirror grew by this many blocks.
    """

    cache_threshold: float = 0.3
    balance_abs_threshold: int = 64
    balance_rel_threshold: float = 1.5
    divert_every: int = 8
    thin_ratio: float = 0.5
    warmup_blocks: int = 1024


class Router(ABC):
    """Picks the replica of each request at its submission time."""

    @abstractmethod
    def route(self, req: EngineRequest, workflow_id: str, engines: Sequence[Engine]) -> int:
        """Index of the replica in ``engines`` that serves ``req`` (of workflow ``workflow_id``)."""


class AffinityRouter(Router):
    """Consistent hashing of the workflow id on a ring of :data:`VIRTUAL_NODES` points per replica.

    Args:
        replicas: number of replicas (>= 1).
    """

    def __init__(self, replicas: int):
        ring = sorted((_hash64(f"replica-{r}#{v}"), r) for r in range(replicas) for v in range(VIRTUAL_NODES))
        self._points = [p for p, _ in ring]
        self._owners = [r for _, r in ring]
        self._memo: dict[str, int] = {}

    def route(self, req: EngineRequest, workflow_id: str, engines: Sequence[Engine]) -> int:
        r = self._memo.get(workflow_id)
        if r is None:
            i = bisect.bisect_left(self._points, _hash64(workflow_id))
            r = self._memo[workflow_id] = self._owners[i % len(self._points)]
        return r


class RoundRobinRouter(Router):
    """Replica ``k mod N`` for the k-th request."""

    def __init__(self, replicas: int):
        self._n = replicas
        self._next = 0

    def route(self, req: EngineRequest, workflow_id: str, engines: Sequence[Engine]) -> int:
        r = self._next
        self._next = (r + 1) % self._n
        return r


class CacheAwareRouter(Router):
    """SMG's HTTP cache-aware policy over a per-replica mirror of the prefixes routed there (module docstring).

    Args:
        replicas: number of replicas (>= 1).
        settings: the thresholds.
    """

    def __init__(self, replicas: int, settings: CacheAwareSettings = CacheAwareSettings()):
        self._n = replicas
        self.settings = settings
        # Block keys are chained (a key fixes its whole prefix), so a key stands for its
        # radix-tree path; the value has one bit per replica that holds the path.
        self._holders: dict[Any, int] = {}
        self._routed = [0] * replicas
        self._blocks = [0] * replicas  # blocks in each replica's mirror
        self._thin_from: list[int | None] = [None] * replicas  # mirror size when it became thin
        self._hits = 0

    def route(self, req: EngineRequest, workflow_id: str, engines: Sequence[Engine]) -> int:
        s = self.settings
        loads = [_load(e) for e in engines]
        least = min(range(self._n), key=lambda r: (loads[r], self._routed[r], r))
        choice = least
        tokens, holders = self._longest_match(req)
        prompt = sum(req.block_tokens)
        if holders and prompt and tokens / prompt > s.cache_threshold:
            self._hits += 1
            thin = self._thin_idle(loads) if s.divert_every and self._hits % s.divert_every == 0 else None
            if thin is not None:
                choice = thin
            else:
                choice = min(_bits(holders), key=lambda r: (loads[r], r))
                mean = sum(loads) / self._n
                margin = min(s.balance_abs_threshold, max(4.0, 2.0 * math.sqrt(mean)))
                if loads[choice] > s.balance_rel_threshold * mean and loads[choice] > mean + margin:
                    choice = least  # spill: the least loaded replica becomes a holder too
        self._insert(req, choice)
        return choice

    def _thin_idle(self, loads: list[int]) -> int | None:
        """The thin replica with nothing in flight and the smallest mirror, or ``None``."""
        s, sizes = self.settings, self._blocks
        median = statistics.median(sizes)
        for r in range(self._n):
            start = self._thin_from[r]
            if start is None and (sizes[r] == 0 or sizes[r] < s.thin_ratio * median):
                self._thin_from[r] = sizes[r]
            elif start is not None and sizes[r] - start >= s.warmup_blocks:
                self._thin_from[r] = None
        idle = [r for r in range(self._n) if self._thin_from[r] is not None and loads[r] == 0]
        return min(idle, key=lambda r: (sizes[r], r)) if idle else None

    def _longest_match(self, req: EngineRequest) -> tuple[int, int]:
        """(tokens, holder bits) of the longest prefix of ``req`` any replica's mirror holds; (0, 0) if none."""
        tokens, holders = 0, 0
        mirror = self._holders
        for key, tok in zip(req.blocks, req.block_tokens):
            bits = mirror.get(key, 0)
            if not bits:
                break
            tokens += tok
            holders = bits
        return tokens, holders

    def _insert(self, req: EngineRequest, r: int) -> None:
        bit, mirror = 1 << r, self._holders
        for key in req.blocks:
            held = mirror.get(key, 0)
            if not held & bit:
                mirror[key] = held | bit
                self._blocks[r] += 1
        self._routed[r] += 1


def make_router(name: str, replicas: int, cache_aware: CacheAwareSettings = CacheAwareSettings()) -> Router:
    """The router model ``name`` (one of :data:`ROUTERS`) for ``replicas`` replicas.

    Raises:
        ValueError: unknown name, or ``replicas`` < 1.
    """
    if replicas < 1:
        raise ValueError("replicas must be >= 1")
    if name == "affinity":
        return AffinityRouter(replicas)
    if name == "round-robin":
        return RoundRobinRouter(replicas)
    if name == "cache-aware":
        return CacheAwareRouter(replicas, cache_aware)
    raise ValueError(f"unknown router {name!r}; known: {', '.join(ROUTERS)}")


@dataclass(slots=True)
class ClusterResult:
    """Outcome of one cluster replay.

    Attributes:
        policy: the replicas' cache policy.
        summary: :meth:`MetricsCollector.summary` over all requests of the cluster, plus
            ``replicas``, ``router``, ``single_replica_share`` (share of workflows whose requests
            all went to one replica), ``end_deliveries`` (end signals sent, one per replica that
            served a workflow), ``per_replica`` (per replica: ``requests``, ``hit_rate``,
            ``host_hit_rate``), ``load_spread`` (most requests on one replica / the mean),
            ``evictions``, ``evicted_tokens``, ``prefetched_tokens`` (sums) and ``hash_collisions``.
        engines: the replicas' engines.
        metrics: the collector.
    """

    policy: str
    summary: dict[str, Any]
    engines: list[Engine] = field(repr=False)
    metrics: MetricsCollector = field(repr=False)

    @property
    def engine(self) -> Engine:
        """The first replica's engine (all replicas have the same capacities)."""
        return self.engines[0]


def simulate_cluster(
    workload: Workload,
    policy: str,
    profile: HardwareProfile,
    *,
    replicas: int,
    router: str | Router = "affinity",
    concurrency: int = 32,
    predictor_factory: Callable[[], Predictor | None] | None = None,
    device_tokens: int | None = None,
    host_tokens: int | None = None,
    horizon: int = 3,
    gamma: float = 0.7,
    rho: float = 0.1,
    max_batch: int = 256,
    page_size: int | None = None,
    batch_predictions: bool = True,
    timeline_bins: int = 40,
    app_graphs: dict[str, dict[str, Sequence[str]]] | None = None,
    on_workflow_end: Callable[[int], None] | None = None,
    cache_aware: CacheAwareSettings = CacheAwareSettings(),
    lru_guard: bool = True,
) -> ClusterResult:
    """Replay ``workload`` on ``replicas`` replicas of ``policy`` behind ``router``.

    Args:
        workload: from :func:`~pbkv_server.sim.simulator.load_workload`.
        policy: every replica's cache policy (an online one).
        profile: every replica's hardware cost model.
        replicas: N >= 1.
        router: a name of :data:`ROUTERS`, or a :class:`Router`.
        concurrency: workflows in flight in the whole cluster (closed loop; same per-replica
            load at N replicas means N times the single-replica C).
        predictor_factory: makes each replica's predictor (called once per replica: online
            predictors learn from their own replica's stream); ``None``: no predictor.
        device_tokens / host_tokens: each replica's capacities in tokens (``None``: the profile's).
        horizon, gamma, rho, max_batch, page_size, batch_predictions, timeline_bins, app_graphs,
        on_workflow_end: as for :func:`~pbkv_server.sim.simulator.simulate`.
        cache_aware: thresholds of the ``cache-aware`` router.
        lru_guard: each replica runs the robustness guard of the predictive policies
            (``EngineConfig.lru_guard``).

    Raises:
        ValueError: ``replicas`` or ``concurrency`` < 1, an unknown router or policy, or an
            offline policy (its future is the whole trace's order on one engine).
        SimulationError: a replica stops making progress.
    """
    if concurrency < 1:
        raise ValueError("concurrency must be >= 1")
    if policy_info(policy).offline:
        raise ValueError(f"{policy} is an offline reference (one engine's future); replay it without replicas")
    chooser = make_router(router, replicas, cache_aware) if isinstance(router, str) else router
    if replicas < 1:
        raise ValueError("replicas must be >= 1")
    graphs = app_graphs if app_graphs is not None else static_graphs(workload)
    engines = []
    for _ in range(replicas):
        engine = Engine(EngineConfig(
            profile=profile, policy=policy, device_tokens=device_tokens, host_tokens=host_tokens, horizon=horizon,
            gamma=gamma, rho=rho, predictor=predictor_factory() if predictor_factory else None, max_batch=max_batch,
            page_size=page_size, batch_predictions=batch_predictions, lru_guard=lru_guard,
        ))
        for app, edges in graphs.items():
            engine.set_app_graph(app, edges)
        engines.append(engine)
    metrics = MetricsCollector(timeline_bins)
    driver = _ClusterDriver(engines, chooser, workload, concurrency, on_workflow_end, metrics)
    driver.run()
    summary = metrics.summary()
    summary.update(driver.cluster_summary())
    summary["router"] = router if isinstance(router, str) else type(router).__name__
    summary["hash_collisions"] = workload.hash_collisions
    for key in ("evictions", "evicted_tokens", "prefetched_tokens"):
        summary[key] = sum(getattr(e.stats, key) for e in engines)
    return ClusterResult(policy, summary, engines, metrics)


def cluster_line(policy: str, summary: dict[str, Any]) -> str:
    """One line of a cluster replay's routing figures (for ``pbkv-bench replay --replicas``)."""
    rates = [r["hit_rate"] for r in summary["per_replica"] if r["requests"]]
    spread = f"{min(rates):.3f}-{max(rates):.3f}" if rates else "-"
    return (f"{policy}: {summary['replicas']} replicas, router {summary['router']}: workflows on one replica "
            f"{100 * summary['single_replica_share']:.1f}%, requests on the busiest replica "
            f"{summary['load_spread']:.2f}x the mean, device hit rate per replica {spread}, "
            f"end signals {summary['end_deliveries']}")


# --------------------------------------------------------------------------- the driver


class _ClusterDriver(_Driver):
    """The simulator's closed loop, with submissions routed to one of several engines."""

    def __init__(self, engines: list[Engine], router: Router, workload: Workload, concurrency: int,
                 on_unit_end: Callable[[int], None] | None, metrics: MetricsCollector):
        super().__init__(engines[0], workload, concurrency, None, on_unit_end, metrics)
        self.engines = engines
        self.router = router
        self.busy: list[tuple[float, int]] = []  # (clock, replica) of every busy engine, once each
        self.served: dict[str, dict[int, None]] = {}  # workflow -> replicas in first-service order
        self.tokens = [[0, 0, 0, 0] for _ in engines]  # per replica: requests, prompt, device, host
        self.replica_of: dict[str, int] = {}  # request id -> replica, until its first token

    def run(self) -> None:
        for _ in range(min(self.concurrency, len(self.units))):
            self._start_next(0.0)
        engines, events, busy = self.engines, self.events, self.busy
        stalled = 0
        while True:
            t_next = events[0][0] if events else math.inf
            if busy and busy[0][0] < t_next:
                _, r = heapq.heappop(busy)
                engine = engines[r]
                before = engine.clock
                out = engine.step(until=events[0][0] if events else None)
                if engine.busy:
                    heapq.heappush(busy, (engine.clock, r))
                for ev in out:
                    if isinstance(ev, FirstToken):
                        acc = self.tokens[r]
                        acc[0] += 1
                        acc[1] += ev.prompt_tokens
                        acc[2] += ev.device_cached_tokens
                        acc[3] += ev.host_cached_tokens
                    self._engine_event(ev)
                stalled = 0 if (out or engine.clock > before) else stalled + 1
                if stalled > self.STALL_LIMIT:
                    raise SimulationError(f"replica {r} made no progress in {self.STALL_LIMIT} steps at "
                                          f"t={engine.clock:.3f}s; is a prompt larger than the device cache?")
            elif events:
                self._handle(heapq.heappop(events))
            else:
                break

    def _source(self, request_id: str) -> object:
        return self.replica_of.pop(request_id, None)

    def _submit(self, req: EngineRequest, workflow_id: str, time: float) -> None:
        r = self.router.route(req, workflow_id, self.engines)
        self.replica_of[req.request_id] = r  # its iterations are that replica's (latency breakdown)
        engine = self.engines[r]
        idle = not engine.busy
        if idle:
            engine.advance_to(time)
        engine.submit(req)
        if idle:
            heapq.heappush(self.busy, (engine.clock, r))
        self.served.setdefault(workflow_id, {})[r] = None

    def _end(self, workflow_id: str, status: str, time: float) -> None:
        for r in self.served.get(workflow_id, ()):
            engine = self.engines[r]
            if not engine.busy:
                engine.advance_to(time)
            engine.end_workflow(workflow_id, status)

    def _close_session(self, unit) -> None:
        # every replica that served one of the unit's workflows holds its history
        replicas = {r: None for wid in dict.fromkeys(unit.workflow_ids) for r in self.served.get(wid, ())}
        for r in replicas:
            self.engines[r].close_session(unit.unit_id)

    def cluster_summary(self) -> dict[str, Any]:
        counts = [acc[0] for acc in self.tokens]
        mean = sum(counts) / len(counts)
        return {
            "replicas": len(self.engines),
            "single_replica_share": (sum(len(s) == 1 for s in self.served.values()) / len(self.served)
                                     if self.served else math.nan),
            "end_deliveries": sum(len(s) for s in self.served.values()),
            "load_spread": max(counts) / mean if mean else math.nan,
            "per_replica": [{"requests": n, "hit_rate": d / p if p else 0.0, "host_hit_rate": h / p if p else 0.0}
                            for n, p, d, h in self.tokens],
        }


def _load(engine: Engine) -> int:
    stats = engine.stats
    return stats.queue_depth + stats.running


def _bits(mask: int):
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


def _hash64(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big")
