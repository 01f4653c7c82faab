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
* ``cache-aware``: SMG's HTTP ``cache_aware`` policy (``model_gateway/src/policies/cache_aware.rs``
  and ``docs/configuration/routing.md``). The router mirrors, per replica, the prefixes it has
  sent there (block keys; SMG keeps a radix tree of request text, evicted only past
  ``--max-tree-size``, so it over-estimates a replica's cache once the replica evicts). With
  ``load`` = requests in flight on a replica, the system is imbalanced when
  ``max - min > balance_abs_threshold`` and ``max > balance_rel_threshold * min``: the request
  goes to the least loaded replica. Otherwise to the replica with the longest matched prefix if
  matched tokens / prompt tokens > ``cache_threshold`` (ties: lower load, then lower index), else
  to the replica whose mirror holds the fewest tokens ("most cache capacity"). Defaults are
  SMG's: 0.3, 64, 1.5.

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
    ``--balance-rel-threshold``; defaults as documented in SMG's ``docs/configuration/routing.md``).

    Attributes:
        cache_threshold: matched share of the prompt (0-1) above which the best match wins.
        balance_abs_threshold: requests in flight, max minus min, over which the cluster may be imbalanced.
        balance_rel_threshold: ratio max / min over which the cluster may be imbalanced.
    """

    cache_threshold: float = 0.3
    balance_abs_threshold: int = 64
    balance_rel_threshold: float = 1.5


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
        # Block keys are chained (a key fixes its whole prefix), so "key routed to replica r"
        # stands for the radix-tree path; one bit per replica.
        self._owners: dict[Any, int] = {}
        self._tree_tokens = [0] * replicas

    def route(self, req: EngineRequest, workflow_id: str, engines: Sequence[Engine]) -> int:
        s = self.settings
        loads = [_load(e) for e in engines]
        hi, lo = max(loads), min(loads)
        if hi - lo > s.balance_abs_threshold and hi > s.balance_rel_threshold * lo:
            choice = loads.index(lo)
        else:
            matched = self._matched(req)
            best = min(range(self._n), key=lambda r: (-matched[r], loads[r], r))
            prompt = sum(req.block_tokens)
            if prompt and matched[best] / prompt > s.cache_threshold:
                choice = best
            else:
                choice = min(range(self._n), key=lambda r: (self._tree_tokens[r], r))
        self._insert(req, choice)
        return choice

    def _matched(self, req: EngineRequest) -> list[int]:
        """Tokens of the longest prefix of ``req`` each replica's mirror holds."""
        matched = [0] * self._n
        alive, tokens = (1 << self._n) - 1, 0
        owners = self._owners
        for key, tok in zip(req.blocks, req.block_tokens):
            still = owners.get(key, 0) & alive
            for r in _bits(alive & ~still):
                matched[r] = tokens
            alive = still
            if not alive:
                return matched
            tokens += tok
        for r in _bits(alive):
            matched[r] = tokens
        return matched

    def _insert(self, req: EngineRequest, r: int) -> None:
        bit, owners = 1 << r, self._owners
        for key, tok in zip(req.blocks, req.block_tokens):
            held = owners.get(key, 0)
            if not held & bit:
                owners[key] = held | bit
                self._tree_tokens[r] += tok


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
            page_size=page_size, batch_predictions=batch_predictions,
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
        self.index = {id(e): r for r, e in enumerate(engines)}
        self.busy: list[tuple[float, int]] = []  # (clock, replica) of every busy engine, once each
        self.served: dict[str, dict[int, None]] = {}  # workflow -> replicas in first-service order
        self.tokens = [[0, 0, 0, 0] for _ in engines]  # per replica: requests, prompt, device, host

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

    def _submit(self, req: EngineRequest, workflow_id: str, time: float) -> None:
        r = self.router.route(req, workflow_id, self.engines)
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
