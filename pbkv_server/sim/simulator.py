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
* metrics follow :mod:`pbkv_server.sim.metrics`.
"""

from __future__ import annotations

import heapq
import itertools
import logging
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Sequence

from pbkv_contract.hints import Hints
from pbkv_contract.trace import InvocationRecord, TraceFormatError, TraceRecord, WorkflowEndRecord
from pbkv_contract.prediction import Predictor

from pbkv_server.engine import Engine, EngineConfig, EngineRequest, Finished, FirstToken, HardwareProfile
from pbkv_server.engine.pages import to_units
from pbkv_server.engine.policies import policy_info
from pbkv_server.sim.future import TraceFuture, reference_order
from pbkv_server.sim.metrics import MetricsCollector, guard_summary

log = logging.getLogger(__name__)

__all__ = ["Workload", "ReplayUnit", "SimResult", "SimulationError", "load_workload", "simulate"]


#: Most replays of an order-iterating offline policy (``opt``) before its order must be stable.
MAX_ORDER_RUNS = 8
#: Priority of an agent app's requests when the trace records none: the example value of Dynamo's
#: "SGLang for Agentic Workloads" guide (``nvext.agent_hints.priority: 10``); other traffic keeps
#: SGLang's default 0. An agent app is one whose workflows make two or more LLM calls.
REPLAY_AGENT_PRIORITY = 10
#: Cache TTL of every request when the trace records none, seconds: ``cache_control`` "5m"
#: (Anthropic's default ephemeral TTL, Dynamo's lower clamp, SGLang PR #18941's demonstration).
REPLAY_CACHE_TTL_S = 300.0


class SimulationError(RuntimeError):
    """The replay cannot make progress (e.g. a prompt larger than the whole device cache)."""


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
    """

    units: list[ReplayUnit]
    hash_collisions: int = 0

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
    """Outcome of one replay: the metrics summary (:meth:`MetricsCollector.summary`, plus
    ``hash_collisions`` of the workload), the collector
    (raw per-request and per-workflow times) and the engine (counters, final cache state)."""

    policy: str
    summary: dict[str, Any]
    engine: Engine = field(repr=False)
    metrics: MetricsCollector = field(repr=False)


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
    return Workload(units, keys.collisions)


class _PathKeys:
    """Replay keys of block hashes: the hash itself, or ``HASH~n`` for its n-th different parent."""

    def __init__(self) -> None:
        self._key: dict[tuple[str | None, str], str] = {}  # (parent's key, hash) -> key
        self._parents: dict[str, int] = {}  # hash -> parents it was met under
        self.collisions = 0

    def keys(self, hashes: Sequence[str]) -> list[str]:
        out: list[str] = []
        parent: str | None = None
        key_of, parents = self._key, self._parents
        for h in hashes:
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
        return out


def _next_prefix(req: EngineRequest, following: EngineRequest | None) -> tuple[list, list]:
    """Blocks and tokens of ``req``'s prompt plus its reply, as the next turn will start (see
    :func:`load_workload`); ``following`` is the unit's next request, if any."""
    blocks, toks = list(req.blocks), list(req.block_tokens)
    reply = req.output_tokens
    if following is not None and blocks:
        nxt = following.blocks
        shared = 0  # blocks in common (chained keys: the common blocks are a prefix)
        while shared < min(len(blocks), len(nxt)) and nxt[shared] == blocks[shared]:
            shared += 1
        # it extends the prompt when it shares every block but perhaps the last, partial one
        if shared >= max(1, len(blocks) - 1):
            limit, acc, n = sum(toks) + reply, 0, 0
            for t in following.block_tokens:
                if acc + t > limit:
                    break
                acc += t
                n += 1
            if n >= len(blocks) - 1:
                return list(nxt[:n]), list(following.block_tokens[:n])
    return blocks + [f"{req.request_id}~reply"], toks + [reply]


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


def build_future(workload: Workload, concurrency: int, page_size: int | None = None,
                 order: Sequence[str] | None = None) -> TraceFuture:
    """The future for offline policies, keyed by the engine's cache units (``page_size``).

    Args:
        workload: the replayed workload.
        concurrency: C of the replay (for the timing-only reference order).
        page_size: the replay's page size (``None``: block granularity).
        order: request ids in submission order of a previous run of the same replay: requests are
            ranked by it. ``None``: ranked by submission time in a timing-only replay (recorded
            durations and gaps, no cache effects; ``belady``'s reference order, and ``opt``'s
            first guess).
    """
    if order is None:
        times = reference_order([u.durations_s for u in workload.units], [u.gaps_s for u in workload.units],
                                concurrency)
        position = {req.request_id: times[w][j] for w, unit in enumerate(workload.units)
                    for j, req in enumerate(unit.requests)}
    else:
        position = {rid: float(i) for i, rid in enumerate(order)}
    return TraceFuture({
        req.request_id: (position[req.request_id], to_units(req.blocks, req.block_tokens, page_size).keys)
        for unit in workload.units for req in unit.requests
    })


def simulate(
    workload: Workload,
    policy: str,
    profile: HardwareProfile,
    *,
    concurrency: int = 32,
    predictor: Predictor | None = None,
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
    cache_outputs: bool = False,
    lru_guard: bool = True,
) -> SimResult:
    """Replay ``workload`` under ``policy`` and return its metrics.

    Args:
        workload: from :func:`load_workload`.
        policy: engine policy name.
        profile: hardware cost model.
        concurrency: C, most workflows in flight (>= 1).
        predictor: next-agent predictor given to the engine (a fresh one per run: online
            predictors learn from the stream).
        device_tokens / host_tokens: capacity overrides in tokens (``None``: the profile's, each on
            its own: ``pbkv-bench replay`` sizes the host tier from the device size with
            :func:`pbkv_server.hardware.profiles.host_tokens_for` and passes both).
        horizon, gamma, rho, max_batch: engine settings (PBKV Eq. 2 K and gamma; aggressive rho).
        page_size: KV page size in tokens (``None``: the trace's blocks are the cache units).
        batch_predictions: one predictor call per scheduling step (see ``EngineConfig``).
        timeline_bins: bins of the hit-rate timeline.
        app_graphs: static agent graph per app for ``kvflow`` (default: learned from the workload,
            see :func:`static_graphs`).
        on_workflow_end: called with the number of finished replay units after each one (progress bars).
        cache_outputs: keep finished outputs in the cache as SGLang does (``EngineConfig.cache_outputs``).
        lru_guard: run the robustness guard of the predictive policies (``EngineConfig.lru_guard``).

    Raises:
        ValueError: ``concurrency`` < 1 or an unknown policy (from the engine).
        SimulationError: the engine stops making progress.
    """
    if concurrency < 1:
        raise ValueError("concurrency must be >= 1")
    info = policy_info(policy)
    graphs = app_graphs if app_graphs is not None else static_graphs(workload)

    def run(future: TraceFuture | None) -> tuple[SimResult, list[str]]:
        engine = Engine(EngineConfig(
            profile=profile, policy=policy, device_tokens=device_tokens, host_tokens=host_tokens,
            horizon=horizon, gamma=gamma, rho=rho, predictor=predictor, max_batch=max_batch, future=future,
            page_size=page_size, batch_predictions=batch_predictions, cache_outputs=cache_outputs,
            lru_guard=lru_guard,
        ))
        for app, edges in graphs.items():
            engine.set_app_graph(app, edges)
        metrics = MetricsCollector(timeline_bins)
        driver = _Driver(engine, workload, concurrency, future, on_workflow_end, metrics, info.speculative_prefill)
        driver.run()
        summary = metrics.summary(engine.stats)
        if engine.cache.guard is not None:
            summary["guard"] = guard_summary(engine.stats)
        summary["hash_collisions"] = workload.hash_collisions
        return SimResult(policy, summary, engine, metrics), driver.submitted_ids

    if not info.offline:
        return run(None)[0]
    result, order = run(build_future(workload, concurrency, page_size))
    runs = 1
    if info.iterates_order:
        # MIN over the replay's own order: replay with the future of the previous run until the
        # submission order stops changing (a fixed point: the policy knew its own future)
        previous: list[str] | None = None
        while order != previous and runs < MAX_ORDER_RUNS:
            previous = order
            result, order = run(build_future(workload, concurrency, page_size, order=previous))
            runs += 1
        result.summary["order_runs"] = runs
        result.summary["order_stable"] = order == previous
    return result


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


class _Driver:
    """The event loop of one replay (kept out of :func:`simulate` so its state is explicit)."""

    _SUBMIT, _END = 0, 1
    #: Engine steps in a row without any event or clock progress before we give up.
    STALL_LIMIT = 10_000

    def __init__(self, engine, workload, concurrency, future, on_unit_end, metrics, speculative=False):
        self.engine = engine
        self.speculative = speculative  # attach each request's next-turn prefix (speculative prefill)
        self.units = workload.units
        self.concurrency = concurrency
        self.future = future
        self.on_unit_end = on_unit_end
        self.metrics = metrics
        self.events: list[tuple[float, int, int, int, int]] = []  # (time, seq, kind, unit, request index)
        self.seq = itertools.count()
        self.where: dict[str, tuple[int, int]] = {
            req.request_id: (w, j) for w, unit in enumerate(self.units) for j, req in enumerate(unit.requests)
        }
        self.next_unit = 0
        self.done = 0
        self.submitted_ids: list[str] = []  # request ids in submission order

    def run(self) -> None:
        for _ in range(min(self.concurrency, len(self.units))):
            self._start_next(0.0)
        engine, events = self.engine, self.events
        stalled = 0
        while True:
            while events and events[0][0] <= engine.clock:
                self._handle(heapq.heappop(events))
            if engine.busy:
                before = engine.clock
                # Stop a decode-only stretch at our next submission, so it arrives on time.
                out = engine.step(until=events[0][0] if events else None)
                for ev in out:
                    self._engine_event(ev)
                stalled = 0 if (out or engine.clock > before) else stalled + 1
                if stalled > self.STALL_LIMIT:
                    raise SimulationError(
                        f"engine made no progress in {self.STALL_LIMIT} steps at t={engine.clock:.3f}s "
                        f"(queue {engine.stats.queue_depth}); is a prompt larger than the device cache?"
                    )
            elif events:
                engine.advance_to(events[0][0])
            else:
                break

    def _start_next(self, time: float) -> None:
        if self.next_unit < len(self.units):
            w = self.next_unit
            self.next_unit += 1
            heapq.heappush(self.events, (time, next(self.seq), self._SUBMIT, w, 0))

    def _handle(self, event: tuple[float, int, int, int, int]) -> None:
        time, _, kind, w, j = event
        unit = self.units[w]
        if kind == self._SUBMIT:
            req = unit.requests[j]
            self.metrics.workflow_started(unit.workflow_ids[j], time)  # its first request counts
            self.metrics.request_arrived(req.request_id, time, unit.agents[j], unit.apps[j], unit.workflow_ids[j])
            if self.future is not None:
                self.future.bind(self.engine.submitted, req.request_id)
            self.submitted_ids.append(req.request_id)
            if self.speculative and unit.next_prefix:
                req = replace(req, speculative_next=unit.next_prefix[j])
            try:
                self._submit(req, unit.workflow_ids[j], time)
            except ValueError as exc:  # e.g. a prompt larger than the device cache
                raise SimulationError(f"cannot replay {req.request_id}: {exc}") from None
            return
        wid, _, status = unit.ends[j]
        self._end(wid, status, time)
        self.metrics.workflow_ended(wid, time)
        if j + 1 == len(unit.requests):  # the unit's last workflow ended: its slot goes to the next unit
            self._close_session(unit)  # the app closes its session (SGLang /close_session)
            self.done += 1
            if self.on_unit_end is not None:
                self.on_unit_end(self.done)
            self._start_next(time)

    def _submit(self, req: EngineRequest, workflow_id: str, time: float) -> None:
        """Hand ``req`` (of ``workflow_id``, due at ``time``) to the engine (a cluster routes it)."""
        self.engine.submit(req)

    def _end(self, workflow_id: str, status: str, time: float) -> None:
        """Send the workflow's end signal (a cluster sends it to the replicas that served it)."""
        self.engine.end_workflow(workflow_id, status)

    def _close_session(self, unit: ReplayUnit) -> None:
        """Close the unit's session (a cluster closes it on the replicas that served it)."""
        self.engine.close_session(unit.unit_id)

    def _source(self, request_id: str) -> object:
        """The engine that served ``request_id``, for the latency breakdown (one engine here)."""
        return None

    def _engine_event(self, ev: FirstToken | Finished) -> None:
        if isinstance(ev, FirstToken):
            self.metrics.first_token(ev, self._source(ev.request_id))
            if self.future is not None:
                self.future.consume(ev.request_id)
            return
        self.metrics.finished(ev.request_id, ev.time)
        w, j = self.where[ev.request_id]
        unit = self.units[w]
        end = unit.ends[j]
        last = j + 1 == len(unit.requests)
        if end is not None:  # its workflow ends after the recorded trailing gap
            heapq.heappush(self.events, (ev.time + (unit.gaps_s[j] if last else end[1]), next(self.seq),
                                         self._END, w, j))
        if not last:
            heapq.heappush(self.events, (ev.time + unit.gaps_s[j], next(self.seq), self._SUBMIT, w, j + 1))
