"""Discrete-event replay of traces through the engine core (``docs/architecture.md``, "Simulator").

The engine (:class:`pbkv_server.engine.Engine`) owns the virtual clock, continuous batching, the
radix cache and the eviction policy; this module only drives it:

* closed loop: at most ``concurrency`` replay units in flight (a unit is a workflow, or a
  session of workflows such as a chat conversation whose turns are each a workflow); the next
  unit of the trace (in trace order) starts when one ends;
* inside a workflow, invocation j+1 is sent when invocation j finished plus the recorded tool gap
  (``t_start[j+1] - t_end[j]``), and ``end_workflow`` is sent after the recorded trailing gap;
* offline policies (``belady``) get a :class:`~pbkv_server.sim.future.TraceFuture` built from the trace;
* the driver plays the client of the cache managers users run today: each request carries its
  session (the trace's ``session_id``, else its workflow), priority, cache TTL and last-step flag
  (:func:`load_workload`), a unit's session is closed when the unit ends (SGLang
  ``/close_session``), and for a policy that declares ``speculative_prefill`` each request carries
  its next-turn prefix (Dynamo's speculative prefill);
* several replicas behind a router (``simulate(..., replicas=N, router=...)``): each replica is
  its own engine, the router (:mod:`pbkv_server.sim.cluster`) picks each request's; the same loop
  (:class:`~pbkv_server.sim.driver.ReplayDriver`) drives one engine or several;
* metrics follow :mod:`pbkv_server.sim.metrics`.
"""

from __future__ import annotations

import logging
from bisect import bisect_right
from dataclasses import dataclass, field
from itertools import accumulate
from types import SimpleNamespace
from typing import Any, Callable, ContextManager, Iterable, Sequence

from pbkv_contract.collector import BULK_GC_YOUNG, quiet_collector
from pbkv_contract.hints import Hints
from pbkv_contract.trace import InvocationRecord, TraceFormatError, TraceRecord, WorkflowEndRecord
from pbkv_contract.prediction import Predictor

from pbkv_server.engine import Engine, EngineConfig, EngineRequest, HardwareProfile
from pbkv_server.engine.pages import to_units
from pbkv_server.engine.policies import policy_info
from pbkv_server.engine.types import DEFAULT_ENGINE_MODEL, DEFAULT_PREFILL_COST
from pbkv_server.sim.cluster import Router, make_router
from pbkv_server.sim.driver import ReplayDriver, SimulationError
from pbkv_server.sim.future import TraceFuture, UseIndex, reference_order
from pbkv_server.sim.metrics import MetricsCollector, guard_summary
from pbkv_server.sim.ceiling import workload_ceiling
from pbkv_server.sim.serving_metrics import Slo

log = logging.getLogger(__name__)

__all__ = ["MAX_CONCURRENCY", "MAX_ORDER_RUNS", "ORDER_RUNS_LIMIT", "Workload", "ReplayUnit", "ReplayConfig",
           "ReplayOptions", "SimResult", "SimulationError", "load_workload", "simulate"]

#: Most replay units in flight (``--concurrency``). A closed loop never has more in flight than the
#: trace has units, so any larger value replays alike; the bound only turns a typo (1e23) into one
#: line. A million is 100x the most running requests an engine is configured for in the sources we
#: model (SGLang sizes ``max_running_requests`` from the KV pool, thousands on one H200).
MAX_CONCURRENCY = 1_000_000


#: Most replays of an order-iterating offline policy (``opt``) before its order must be stable, by
#: default (``ReplayOptions.order_runs``): the reference of every study and published table.
#: ``pbkv-bench advise`` runs fewer by default (``ADVISE_ORDER_RUNS``, docs/replay-cost.md says why).
MAX_ORDER_RUNS = 8
#: Most order runs a caller may ask for: each is a whole replay, and a trace whose order never
#: settles runs all of them (the bound moves up and down run to run, not steadily).
ORDER_RUNS_LIMIT = 64
#: Priority of an agent app's requests when the trace records none: the example value of Dynamo's
#: "SGLang for Agentic Workloads" guide (``nvext.agent_hints.priority: 10``); other traffic keeps
#: SGLang's default 0. An agent app is one whose workflows make two or more LLM calls.
REPLAY_AGENT_PRIORITY = 10
#: Cache TTL of every request when the trace records none, seconds: ``cache_control`` "5m"
#: (Anthropic's default ephemeral TTL, Dynamo's lower clamp, SGLang PR #18941's demonstration).
REPLAY_CACHE_TTL_S = 300.0


@dataclass(slots=True)
class ReplayUnit:
    """What the closed loop admits as one: a workflow, or a session of several workflows.

    A session (``session_id`` of the trace's invocations: a chat conversation whose turns are
    each their own workflow) runs its workflows one after the other, as its user would; a
    workflow without a session is a unit of its own.

    Attributes:
        unit_id: the session id, or the workflow id.
        requests: one engine request per invocation, in order (ids ``"<workflow>#<step>"``; a
            repeated step number gets ``"~<position>"`` appended).
        workflow_ids: workflow of each request.
        apps: app of each request.
        agents: agent of each request.
        gaps_s: tool gap after each request before the unit's next request, seconds (the last:
            before the last workflow's end).
        durations_s: recorded duration of each request, seconds (for the offline reference order).
        ends: after request j, ``(workflow id, seconds until its end signal, status)`` if j is its
            workflow's last request, else ``None``.
        next_prefix: for request j, the blocks and block tokens of its next-turn prefix (its
            prompt plus its reply) that a speculative prefill would send; see :func:`load_workload`.
    """

    unit_id: str
    requests: list[EngineRequest]
    workflow_ids: list[str]
    apps: list[str | None]
    agents: list[str]
    gaps_s: list[float]
    durations_s: list[float]
    ends: list[tuple[str, float, str] | None]
    next_prefix: list[tuple[list, list]] = field(default_factory=list)


@dataclass(slots=True)
class Workload:
    """The replay units of a trace, in trace order (order of first appearance).

    Attributes:
        units: the replay units (workflows, or sessions of workflows).
        hash_collisions: block hashes met under two or more different parents (the block before
            differs): collisions, or hashes that are not chained (see :func:`load_workload`).
        path_keys: every block key fixes the keys before it in its prompt (:func:`load_workload`
            keys blocks by path), so the blocks some earlier prompt held are a prefix of each
            prompt; the hit-rate ceiling uses it (:func:`~pbkv_server.sim.ceiling.workload_ceiling`).
            A caller that builds units with other keys leaves it ``False``.
    """

    units: list[ReplayUnit]
    hash_collisions: int = 0
    path_keys: bool = False

    @property
    def invocations(self) -> int:
        """Total number of requests."""
        return sum(len(u.requests) for u in self.units)

    @property
    def workflow_count(self) -> int:
        """Number of workflows (a session holds several)."""
        return sum(sum(e is not None for e in u.ends) for u in self.units)


@dataclass(slots=True)
class SimResult:
    """Outcome of one replay.

    Attributes:
        policy: the replicas' cache policy.
        summary: the metrics summary (:meth:`MetricsCollector.summary`, plus ``hash_collisions``
            of the workload; a cluster's, see :func:`simulate`).
        engines: the replicas' engines (counters, final cache state); one without a router.
        metrics: the collector (raw per-request and per-workflow times).
    """

    policy: str
    summary: dict[str, Any]
    engines: list[Engine] = field(repr=False)
    metrics: MetricsCollector = field(repr=False)

    @property
    def engine(self) -> Engine:
        """The first replica's engine (all replicas have the same capacities)."""
        return self.engines[0]


def load_workload(records: Iterable[TraceRecord]) -> Workload:
    """Group trace records into replay units (sessions, or single workflows).

    Invocations are grouped by workflow id and sorted by step; each becomes an
    :class:`EngineRequest` with the trace's prefix hashes as block keys and its per-block tokens
    (:meth:`InvocationRecord.tokens_per_block`). The workflows of one session run in the order of
    their first invocation. Gaps are clamped at 0.

    Block identity is the path, not the hash alone: a chained hash (``pbkv_contract.blocks``)
    fixes the block before it, so one hash met after two different blocks is a collision (or the
    writer did not chain its hashes). Such a hash gets a key of its own per parent (``HASH~n``),
    so that nothing keyed by block alone (the offline policies' future) mixes the two; the count
    is logged as one warning and kept in :attr:`Workload.hash_collisions`. A collision under the
    same parent cannot be told from real sharing: full-width hashes make it negligible.

    Each request also carries what a client of today's cache managers would send: its session
    (the record's ``session_id``, else its workflow id), its priority (the record's, else
    :data:`REPLAY_AGENT_PRIORITY` for an agent app and none otherwise), its cache TTL (the record's,
    else :data:`REPLAY_CACHE_TTL_S`) and whether it is its workflow's last request. Its next-turn
    prefix (:attr:`ReplayUnit.next_prefix`) is what Dynamo's frontend would prefill after it: the
    prompt plus the reply. When the unit's next request extends the prompt (it shares every full
    block; the last, partial one may differ), that request's blocks covering prompt + reply tokens;
    otherwise the prompt's blocks plus one block of the reply's tokens that no request shares.

    Raises:
        TraceFormatError: the records hold no invocation.
    """
    with quiet_collector(BULK_GC_YOUNG):  # millions of keys and lists, none in a cycle
        return _load_workload(records)


def _load_workload(records: Iterable[TraceRecord]) -> Workload:
    invs: dict[str, list[InvocationRecord]] = {}
    ends: dict[str, WorkflowEndRecord] = {}
    sessions: dict[str, list[str]] = {}  # unit id -> its workflow ids in first-appearance order
    for rec in records:
        if isinstance(rec, InvocationRecord):
            if rec.workflow_id not in invs:
                sessions.setdefault(rec.session_id or rec.workflow_id, []).append(rec.workflow_id)
            invs.setdefault(rec.workflow_id, []).append(rec)
        elif isinstance(rec, WorkflowEndRecord):
            ends[rec.workflow_id] = rec
    if not invs:
        raise TraceFormatError("trace holds no invocation records")
    agent_apps = {recs[0].app for recs in invs.values() if len(recs) >= 2}
    units = []
    keys = _PathKeys()
    for unit_id, wids in sessions.items():
        for recs in (invs[w] for w in wids):
            recs.sort(key=lambda r: (r.step, r.t_start))
        wids = sorted(wids, key=lambda w: invs[w][0].t_start)  # stable: ties keep first appearance
        unit = ReplayUnit(unit_id, [], [], [], [], [], [], [])
        for k, wid in enumerate(wids):
            recs = invs[wid]
            _add_workflow(unit, wid, recs, ends.get(wid), invs[wids[k + 1]][0] if k + 1 < len(wids) else None,
                          keys, unit_id, agent_apps)
        unit.next_prefix = [_next_prefix(req, unit.requests[j + 1] if j + 1 < len(unit.requests) else None)
                            for j, req in enumerate(unit.requests)]
        units.append(unit)
    if keys.collisions:
        log.warning("%d block hash(es) of the trace follow two or more different blocks (hash collisions, or hashes "
                    "that are not chained); each (previous block, hash) pair is replayed as a block of its own",
                    keys.collisions)
    return Workload(units, keys.collisions, path_keys=True)  # _PathKeys: a key is its (parent key, hash)


class _PathKeys:
    """Replay keys of block hashes: the hash itself, or ``HASH~n`` for its n-th different parent."""

    def __init__(self) -> None:
        self._key: dict[tuple[str | None, str], str] = {}  # (parent's key, hash) -> key
        self._parents: dict[str, int] = {}  # hash -> parents it was met under
        self._last: tuple[list, list] = ([], [])  # the last prompt's hashes and keys
        self.collisions = 0

    def keys(self, hashes: Sequence[str]) -> list[str]:
        """The replay keys of one prompt's ``hashes`` (shallowest first).

        A key depends only on the hashes up to it (a pair once keyed keeps its key), so the
        prefix a prompt shares with the last one keyed has the last one's keys: load order puts a
        conversation's turns one after the other, and a turn repeats the last one's ~1,000 hashes,
        each looked up by its pair here before. That prefix is found by comparing lists in C
        (:func:`_common_prefix`); the hashes after it are keyed one by one."""
        if type(hashes) is not list:
            hashes = list(hashes)
        last_hashes, last_keys = self._last
        m = _common_prefix(hashes, last_hashes)
        out: list[str] = last_keys[:m]
        parent: str | None = out[-1] if m else None
        key_of, parents = self._key, self._parents
        for h in hashes[m:] if m else hashes:
            key = key_of.get((parent, h))
            if key is None:
                n = parents.get(h, 0)
                parents[h] = n + 1
                key = h
                if n:
                    self.collisions += n == 1  # count each colliding hash once
                    key = f"{h}~{n}"  # "~" is not a hex digit: no real hash looks like this
                key_of[(parent, h)] = key
            out.append(key)
            parent = key
        self._last = (hashes, out)
        return out


def _next_prefix(req: EngineRequest, following: EngineRequest | None) -> tuple[list, list]:
    """Blocks and tokens of ``req``'s prompt plus its reply, as the next turn will start (see
    :func:`load_workload`); ``following`` is the unit's next request, if any."""
    blocks, toks = list(req.blocks), list(req.block_tokens)
    reply = req.output_tokens
    if following is not None and blocks:
        nxt = following.blocks
        shared = _common_prefix(blocks, nxt)  # blocks in common (chained keys: the common blocks are a prefix)
        # it extends the prompt when it shares every block but perhaps the last, partial one
        if shared >= max(1, len(blocks) - 1):
            # its leading blocks that fit in prompt + reply (block tokens are >= 0: sums only grow)
            n = bisect_right(list(accumulate(following.block_tokens)), sum(toks) + reply)
            if n >= len(blocks) - 1:
                return list(nxt[:n]), list(following.block_tokens[:n])
    return blocks + [f"{req.request_id}~reply"], toks + [reply]


def _common_prefix(a: list, b: list) -> int:
    """Length of the longest common prefix of ``a`` and ``b``, by bisection over slice equality
    (compared in C; thousands of blocks per prompt)."""
    lo, hi = 0, min(len(a), len(b))
    if a[:hi] == b[:hi]:
        return hi
    if hi > 1 and a[:hi - 1] == b[:hi - 1]:  # the usual other case: only a last, partial block differs
        return hi - 1
    while lo < hi - 1:  # a[:lo] == b[:lo] and a[:hi] != b[:hi]
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def _add_workflow(unit: ReplayUnit, wid: str, recs: list[InvocationRecord], end: WorkflowEndRecord | None,
                  next_first: InvocationRecord | None, keys: "_PathKeys", session: str, agent_apps: set) -> None:
    """Append one workflow's requests to ``unit``; ``next_first`` is the unit's next request;
    ``keys`` turns block hashes into replay keys (one per path), ``session`` is the unit's session
    id, ``agent_apps`` the apps with multi-call workflows."""
    ids, warned = set(), False
    for j, r in enumerate(recs):
        # Ids must be unique: the driver and the metrics key on them. A step number that
        # repeats (a client that restarts its count) gets its position appended.
        rid = f"{wid}#{r.step}"
        if rid in ids:
            if not warned:
                log.warning("workflow %s repeats step %d; replaying its invocations in (step, t_start) order",
                            wid, r.step)
                warned = True
            rid = f"{wid}#{r.step}~{j}"
        ids.add(rid)
        unit.requests.append(EngineRequest(
            request_id=rid,
            blocks=keys.keys(r.prefix_hashes),
            block_tokens=r.tokens_per_block(),
            output_tokens=max(1, r.completion_tokens),
            hints=Hints(workflow_id=wid, agent=r.agent, step=r.step, app=r.app),
            features=tuple(r.features),
            session_id=session,
            priority=r.priority if r.priority is not None else (
                REPLAY_AGENT_PRIORITY if r.app in agent_apps else None),
            cache_ttl_s=r.cache_ttl_s if r.cache_ttl_s is not None else REPLAY_CACHE_TTL_S,
            last_step=j + 1 == len(recs),
        ))
        unit.workflow_ids.append(wid)
        unit.apps.append(r.app)
        unit.agents.append(r.agent)
        unit.durations_s.append(max(0.0, r.t_end - r.t_start))
        last = j + 1 == len(recs)
        end_gap = max(0.0, end.t - r.t_end) if end is not None else 0.0
        if not last:
            unit.gaps_s.append(max(0.0, recs[j + 1].t_start - r.t_end))
        elif next_first is not None:  # the session's next workflow starts after its own gap
            unit.gaps_s.append(max(0.0, next_first.t_start - r.t_end))
        else:
            unit.gaps_s.append(end_gap)
        unit.ends.append((wid, end_gap, end.status if end is not None else "completed") if last else None)


def use_index(workload: Workload, page_size: int | None = None) -> UseIndex:
    """Which requests of ``workload`` hold each cache unit (``page_size``), for :func:`build_future`."""
    return UseIndex({req.request_id: to_units(req.blocks, req.block_tokens, page_size).keys
                     for unit in workload.units for req in unit.requests})


def build_future(workload: Workload, concurrency: int, page_size: int | None = None,
                 order: Sequence[str] | None = None, index: UseIndex | None = None) -> TraceFuture:
    """The future for offline policies, keyed by the engine's cache units (``page_size``).

    Args:
        workload: the replayed workload.
        concurrency: C of the replay (for the timing-only reference order).
        page_size: the replay's page size (``None``: block granularity).
        order: request ids in submission order of a previous run of the same replay: requests are
            ranked by it. ``None``: ranked by submission time in a timing-only replay (recorded
            durations and gaps, no cache effects; ``belady``'s reference order, and ``opt``'s
            first guess).
        index: :func:`use_index` of the same workload and page size, built once for the futures
            of several orders (``None``: built here).
    """
    if order is None:
        times = reference_order([u.durations_s for u in workload.units], [u.gaps_s for u in workload.units],
                                concurrency)
        position = {req.request_id: times[w][j] for w, unit in enumerate(workload.units)
                    for j, req in enumerate(unit.requests)}
    else:
        position = {rid: float(i) for i, rid in enumerate(order)}
    return TraceFuture.ranked(index if index is not None else use_index(workload, page_size), position, owners={
        # a request's workflow and its session (the unit): the owners next_call answers for
        req.request_id: (unit.workflow_ids[j], unit.unit_id)
        for unit in workload.units for j, req in enumerate(unit.requests)
    })


@dataclass(frozen=True, slots=True)
class ReplayConfig:
    """What every replica's engine is: the policy, the hardware and the engine settings a replay
    chooses (the rest of :class:`~pbkv_server.engine.EngineConfig` keeps its defaults).

    Attributes:
        policy: engine policy name.
        profile: hardware cost model.
        device_tokens / host_tokens: capacity overrides in tokens (``None``: the profile's, each on
            its own: ``pbkv-bench replay`` sizes the host tier from the device size with
            :func:`pbkv_server.hardware.profiles.host_tokens_for` and passes both).
        horizon, gamma, rho, max_batch: engine settings (PBKV Eq. 2 K and gamma; aggressive rho).
        page_size: KV page size in tokens (``None``: the trace's blocks are the cache units).
        batch_predictions: one predictor call per scheduling step (``EngineConfig.batch_predictions``).
        cache_outputs: keep finished outputs in the cache as SGLang does (``EngineConfig.cache_outputs``).
        lru_guard: run the robustness guard of the predictive policies (``EngineConfig.lru_guard``).
        prefill_cost, engine_model, chunked_prefill_size: the cost and engine model
            (``EngineConfig``; ``docs/cost-model.md``).
    """

    policy: str
    profile: HardwareProfile
    device_tokens: int | None = None
    host_tokens: int | None = None
    horizon: int = 3
    gamma: float = 0.7
    rho: float = 0.1
    max_batch: int = 256
    page_size: int | None = None
    batch_predictions: bool = True
    cache_outputs: bool = False
    lru_guard: bool = True
    prefill_cost: str = DEFAULT_PREFILL_COST
    engine_model: str = DEFAULT_ENGINE_MODEL
    chunked_prefill_size: int | None = None

    def engine_config(self, predictor: Predictor | None = None, future: TraceFuture | None = None,
                      path_keys: bool = False) -> EngineConfig:
        """The :class:`EngineConfig` of one replica (raises ``ValueError`` on a bad setting);
        ``path_keys``: the workload's (``Workload.path_keys``)."""
        return EngineConfig(
            profile=self.profile, policy=self.policy, device_tokens=self.device_tokens, host_tokens=self.host_tokens,
            horizon=self.horizon, gamma=self.gamma, rho=self.rho, predictor=predictor, max_batch=self.max_batch,
            future=future, page_size=self.page_size, batch_predictions=self.batch_predictions,
            cache_outputs=self.cache_outputs, lru_guard=self.lru_guard, prefill_cost=self.prefill_cost,
            engine_model=self.engine_model, chunked_prefill_size=self.chunked_prefill_size, path_keys=path_keys,
        )


@dataclass(frozen=True, slots=True)
class ReplayOptions:
    """How a replay is driven and reported (the same for one engine and for a cluster).

    Attributes:
        concurrency: C, most replay units in flight over the whole replay (>= 1; same per-replica
            load at N replicas means N times the single-replica C).
        predictor: the next-agent predictor of a one-replica replay (a fresh one per replay:
            online predictors learn from the stream).
        predictor_factory: makes each replica's predictor (called once per replica: online
            predictors learn from their own replica's stream); give this or ``predictor``.
        timeline_bins: bins of the hit-rate timeline.
        app_graphs: static agent graph per app for ``kvflow`` (default: learned from the workload,
            see :func:`static_graphs`).
        on_workflow_end: called with the number of finished replay units after each one (progress bars).
        slo: goodput's service-level objectives (``request_goodput`` and ``slo_attainment`` in the
            summary; :mod:`pbkv_server.sim.serving_metrics`); ``None``: no goodput.
        speculative_prefill: attach each request's next-turn prefix for a policy that declares
            ``speculative_prefill`` (Dynamo's speculative prefill). ``None`` (default): on for one
            engine, off behind a router (cluster replays were recorded without it; the prefix goes
            to the replica serving the current turn); ``True`` / ``False``: on / off in both.
        order_runs: most replays of an order-iterating offline policy (``opt``), 1..
            :data:`ORDER_RUNS_LIMIT`; it stops earlier once its order is stable. Default
            :data:`MAX_ORDER_RUNS`, the published reference's; 1 is MIN on the timing-only order.
    """

    concurrency: int = 32
    predictor: Predictor | None = None
    predictor_factory: Callable[[], Predictor | None] | None = None
    timeline_bins: int = 40
    app_graphs: dict[str, dict[str, Sequence[str]]] | None = None
    on_workflow_end: Callable[[int], None] | None = None
    speculative_prefill: bool | None = None
    slo: Slo | None = None
    order_runs: int = MAX_ORDER_RUNS


def simulate(workload: Workload, config: ReplayConfig, options: ReplayOptions = ReplayOptions(),
             replicas: int = 1, router: str | Router | None = None) -> SimResult:
    """Replay ``workload`` on ``replicas`` engines of ``config`` and return its metrics.

    One engine without a router is the single-server replay; with ``replicas`` > 1 or a
    ``router``, each replica is its own engine (own device and host tiers, workflow table and
    predictor) and ``router`` picks the replica of each request (:mod:`pbkv_server.sim.cluster`).

    Args:
        workload: from :func:`load_workload`.
        config: every replica's policy, hardware and engine settings.
        options: concurrency, predictors, reporting (:class:`ReplayOptions`).
        replicas: N >= 1 engines.
        router: a name of :data:`~pbkv_server.sim.cluster.ROUTERS` or a
            :class:`~pbkv_server.sim.cluster.Router`; ``None``: ``affinity`` when ``replicas`` > 1.

    Returns:
        The :class:`SimResult`; its summary holds ``hit_rate_ceiling``, the trace's infinite-cache
        hit rate (:mod:`pbkv_server.sim.ceiling`). Behind a router its summary also holds the routing figures
        (:meth:`~pbkv_server.sim.driver.ReplayDriver.cluster_summary`), ``router``, and the
        replicas' summed ``evictions``, ``evicted_tokens``, ``prefetched_tokens``,
        ``speculative_prefill_tokens`` (and ``guard`` over their summed counters).

    Raises:
        ValueError: ``concurrency`` outside 1.. :data:`MAX_CONCURRENCY`, ``order_runs`` outside
            1.. :data:`ORDER_RUNS_LIMIT` or ``replicas`` < 1, an unknown policy or router, an offline
            policy behind a router (its future is the whole trace's order on one engine), or a
            single ``predictor`` for several replicas.
        SimulationError: an engine stops making progress.
    """
    if not 1 <= options.concurrency <= MAX_CONCURRENCY:
        raise ValueError(f"concurrency must be in 1..{MAX_CONCURRENCY:,}, got {options.concurrency:,}")
    if not 1 <= options.order_runs <= ORDER_RUNS_LIMIT:
        raise ValueError(f"order runs must be in 1..{ORDER_RUNS_LIMIT}, got {options.order_runs:,}")
    info = policy_info(config.policy)
    clustered = replicas > 1 or router is not None
    if clustered and info.offline:
        raise ValueError(f"{config.policy} is an offline reference (one engine's future); replay it without replicas")
    if replicas < 1:
        raise ValueError("replicas must be >= 1")
    if options.predictor is not None and (options.predictor_factory is not None or replicas > 1):
        raise ValueError("one predictor cannot serve several replicas (online predictors learn from their "
                         "replica's stream): give predictor_factory")
    if clustered:
        router = "affinity" if router is None else router
        chooser = make_router(router, replicas) if isinstance(router, str) else router
    else:
        chooser = None
    # Each replica's predictor is made once: an offline policy's repeated runs reuse it, as before.
    predictors = [options.predictor_factory() if options.predictor_factory else options.predictor
                  for _ in range(replicas)]
    graphs = options.app_graphs if options.app_graphs is not None else static_graphs(workload)
    speculative = info.speculative_prefill and (
        not clustered if options.speculative_prefill is None else options.speculative_prefill)

    # the workload (every request's block keys) outlives the replay: out of the collector's sight
    # while it runs, so full collections walk only what the replay makes (10-17% of a replay of
    # the Claude Code traces went to collections that walked the workload again and again)
    with _heap_frozen():
        ceiling = workload_ceiling(workload)  # the trace's, whatever the policy (pbkv_server.sim.ceiling)

        def run(future: TraceFuture | None) -> tuple[list[Engine], MetricsCollector, ReplayDriver]:
            engines = []
            for predictor in predictors:
                engine = Engine(config.engine_config(predictor, future, workload.path_keys))
                for app, edges in graphs.items():
                    engine.set_app_graph(app, edges)
                engines.append(engine)
            metrics = MetricsCollector(options.timeline_bins)
            driver = ReplayDriver(engines, workload, options.concurrency, metrics, router=chooser, future=future,
                                  on_unit_end=options.on_workflow_end, speculative=speculative)
            driver.run()
            return engines, metrics, driver

        def result_of(engines: list[Engine], metrics: MetricsCollector, driver: ReplayDriver) -> SimResult:
            if clustered:
                summary = _cluster_summary(metrics, driver, engines, router, workload.hash_collisions, options.slo)
            else:
                summary = metrics.summary(engines[0].stats, options.slo)
                if engines[0].cache.guard is not None:
                    summary["guard"] = guard_summary(engines[0].stats)
                summary["hash_collisions"] = workload.hash_collisions
            summary["hit_rate_ceiling"] = ceiling
            return SimResult(config.policy, summary, engines, metrics)

        if not info.offline:
            return result_of(*run(None))
        page_size = config.page_size
        index = use_index(workload, page_size)  # the same for every order
        replay = run(build_future(workload, options.concurrency, page_size, index=index))
        order = replay[2].submitted_ids
        runs = 1
        if info.iterates_order:
            # MIN over the replay's own order: replay with the future of the previous run until the
            # submission order stops changing (a fixed point: the policy knew its own future). Only
            # the last run is summarized: an earlier one gives its order and its mean latency
            previous: list[str] | None = None
            latencies = [replay[1].mean_latency_s()]
            while order != previous and runs < options.order_runs:
                previous = order
                replay = run(build_future(workload, options.concurrency, page_size, order=previous, index=index))
                order = replay[2].submitted_ids
                latencies.append(replay[1].mean_latency_s())
                runs += 1
            result = result_of(*replay)
            result.summary["order_runs"] = runs
            result.summary["order_stable"] = order == previous
            # how the bound moved run by run (each run knows the previous run's order better): what
            # fewer runs would have reported (docs/replay-cost.md)
            result.summary["order_run_mean_latency_s"] = latencies
            return result
        return result_of(*replay)


#: The collector's young-generation threshold while a replay runs (:mod:`pbkv_contract.collector`
#: says why: at CPython's 700, a replay of the Claude Code traces spent ~10% of ``pbkv``'s CPU with
#: a host tier in ~1,000 young collections over its prompts' unit lists). At loading's 100,000 a
#: ``pbkv`` replay of cc120 still ran ~40 young passes of ~20 ms, each walking the heap entries,
#: units and score records the replay keeps; at 1,000,000 it runs a few, for ~12% less CPU (paired
#: runs) and ~100 MB more peak memory (1,445 -> 1,553 MB). Repeated replays in one process grow no
#: faster than at 100,000: the collector still runs, only less often.
REPLAY_GC_YOUNG = 1_000_000


def _heap_frozen() -> ContextManager[None]:
    """The replay's collector settings: :func:`~pbkv_contract.collector.quiet_collector` at
    :data:`REPLAY_GC_YOUNG` (what the collector tracks now is out of its passes until the block
    ends; a larger young generation inside). Neither changes a result."""
    return quiet_collector(REPLAY_GC_YOUNG)


#: Counters a cluster summary sums over its replicas.
SUMMED_COUNTERS = ("evictions", "evicted_tokens", "prefetched_tokens", "speculative_prefill_tokens")
#: Counters of :func:`~pbkv_server.sim.metrics.guard_summary`, summed over the replicas for a cluster's.
_GUARD_COUNTERS = ("evictions", "prompt_tokens", "guard_switches", "guard_fallback_evictions",
                   "guard_ghost_hit_tokens", "guard_ghost_host_hit_tokens")


def _cluster_summary(metrics: MetricsCollector, driver: ReplayDriver, engines: list[Engine],
                     router: str | Router, hash_collisions: int, slo: Slo | None = None) -> dict[str, Any]:
    """A cluster replay's summary: the metrics over all requests (goodput with ``slo``), the
    routing figures and the replicas' summed counters (per-engine figures such as decode step
    times are left out)."""
    summary = metrics.summary(slo=slo)
    summary.update(driver.cluster_summary())
    summary["router"] = router if isinstance(router, str) else type(router).__name__
    summary["hash_collisions"] = hash_collisions
    for key in SUMMED_COUNTERS:
        summary[key] = sum(getattr(e.stats, key) for e in engines)
    if engines[0].cache.guard is not None:
        summed = SimpleNamespace(**{key: sum(getattr(e.stats, key) for e in engines) for key in _GUARD_COUNTERS})
        summary["guard"] = guard_summary(summed)
    return summary


def static_graphs(workload: Workload) -> dict[str, dict[str, list[str]]]:
    """Each app's static agent graph (agent -> successors seen in the workload), for ``kvflow``.

    KVFlow assumes the developer declares the graph; replaying a trace, the union of observed
    transitions stands in for that declaration.
    """
    graphs: dict[str, dict[str, dict[str, None]]] = {}
    for unit in workload.units:
        sequences: dict[str, list[int]] = {}
        for j, wid in enumerate(unit.workflow_ids):
            sequences.setdefault(wid, []).append(j)
        for idx in sequences.values():
            edges = graphs.setdefault(unit.apps[idx[0]] or "", {})
            agents = [unit.agents[j] for j in idx]
            for a, b in zip(agents, agents[1:]):
                edges.setdefault(a, {})[b] = None
            edges.setdefault(agents[-1], {})
    return {app: {a: list(bs) for a, bs in edges.items()} for app, edges in graphs.items()}
