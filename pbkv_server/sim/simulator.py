"""Discrete-event replay of traces through the engine core (DESIGN.md section 5).

The engine (:class:`pbkv_server.engine.Engine`) owns the virtual clock, continuous batching, the
radix cache and the eviction policy; this module only drives it:

* closed loop: at most ``concurrency`` workflows in flight; the next workflow of the trace (in
  trace order) starts when one ends;
* inside a workflow, invocation j+1 is sent when invocation j finished plus the recorded tool gap
  (``t_start[j+1] - t_end[j]``), and ``end_workflow`` is sent after the recorded trailing gap;
* ``belady`` gets a :class:`~pbkv_server.sim.future.TraceFuture` built from the trace;
* metrics follow :mod:`pbkv_server.sim.metrics`.
"""

from __future__ import annotations

import heapq
import itertools
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from pbkv_contract.hints import Hints
from pbkv_contract.trace import InvocationRecord, TraceFormatError, TraceRecord, WorkflowEndRecord
from pbkv_contract.prediction import Predictor

from pbkv_server.engine import Engine, EngineConfig, EngineRequest, Finished, FirstToken, HardwareProfile
from pbkv_server.sim.future import TraceFuture, reference_order
from pbkv_server.sim.metrics import MetricsCollector

log = logging.getLogger(__name__)

__all__ = ["Workload", "WorkflowReplay", "SimResult", "SimulationError", "load_workload", "simulate"]


class SimulationError(RuntimeError):
    """The replay cannot make progress (e.g. a prompt larger than the whole device cache)."""


@dataclass(slots=True)
class WorkflowReplay:
    """One workflow of a trace, ready to replay.

    Attributes:
        workflow_id: the id.
        app: its app.
        requests: one engine request per invocation, in step order (ids ``"<workflow>#<step>"``;
            a repeated step number gets ``"~<position>"`` appended).
        agents: agent of each request.
        gaps_s: tool gap after each invocation, seconds (the last: before the workflow end).
        durations_s: recorded duration of each invocation, seconds (for belady's reference order).
        status: end status (``"completed"`` if the trace has no end record).
    """

    workflow_id: str
    app: str | None
    requests: list[EngineRequest]
    agents: list[str]
    gaps_s: list[float]
    durations_s: list[float]
    status: str = "completed"


@dataclass(slots=True)
class Workload:
    """The workflows of a trace, in trace order (order of first appearance)."""

    workflows: list[WorkflowReplay]

    @property
    def invocations(self) -> int:
        """Total number of requests."""
        return sum(len(w.requests) for w in self.workflows)


@dataclass(slots=True)
class SimResult:
    """Outcome of one replay: the metrics summary (:meth:`MetricsCollector.summary`), the collector
    (raw per-request and per-workflow times) and the engine (counters, final cache state)."""

    policy: str
    summary: dict[str, Any]
    engine: Engine = field(repr=False)
    metrics: MetricsCollector = field(repr=False)


def load_workload(records: Iterable[TraceRecord]) -> Workload:
    """Group trace records into replayable workflows.

    Invocations are grouped by workflow id and sorted by step; each becomes an
    :class:`EngineRequest` with the trace's prefix hashes as block keys and its per-block tokens
    (:meth:`InvocationRecord.tokens_per_block`). Gaps are clamped at 0.

    Raises:
        TraceFormatError: the records hold no invocation.
    """
    invs: dict[str, list[InvocationRecord]] = {}
    ends: dict[str, WorkflowEndRecord] = {}
    for rec in records:
        if isinstance(rec, InvocationRecord):
            invs.setdefault(rec.workflow_id, []).append(rec)
        elif isinstance(rec, WorkflowEndRecord):
            ends[rec.workflow_id] = rec
    if not invs:
        raise TraceFormatError("trace holds no invocation records")
    workflows = []
    for wid, recs in invs.items():
        recs.sort(key=lambda r: (r.step, r.t_start))
        requests, gaps, ids, warned = [], [], set(), False
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
            requests.append(
                EngineRequest(
                    request_id=rid,
                    blocks=list(r.prefix_hashes),
                    block_tokens=r.tokens_per_block(),
                    output_tokens=max(1, r.completion_tokens),
                    hints=Hints(workflow_id=wid, agent=r.agent, step=r.step, app=r.app),
                    features=tuple(r.features),
                )
            )
            if j + 1 < len(recs):
                gaps.append(max(0.0, recs[j + 1].t_start - r.t_end))
            else:
                end = ends.get(wid)
                gaps.append(max(0.0, end.t - r.t_end) if end is not None else 0.0)
        end = ends.get(wid)
        workflows.append(
            WorkflowReplay(
                workflow_id=wid,
                app=recs[0].app,
                requests=requests,
                agents=[r.agent for r in recs],
                gaps_s=gaps,
                durations_s=[max(0.0, r.t_end - r.t_start) for r in recs],
                status=end.status if end is not None else "completed",
            )
        )
    return Workload(workflows)


def build_future(workload: Workload, concurrency: int) -> TraceFuture:
    """Belady's oracle: every request ranked by its submission time in a timing-only replay."""
    times = reference_order(
        [w.durations_s for w in workload.workflows], [w.gaps_s for w in workload.workflows], concurrency
    )
    return TraceFuture(
        {
            req.request_id: (times[w][j], req.blocks)
            for w, wf in enumerate(workload.workflows)
            for j, req in enumerate(wf.requests)
        }
    )


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
    timeline_bins: int = 40,
    app_graphs: dict[str, dict[str, Sequence[str]]] | None = None,
    on_workflow_end: Callable[[int], None] | None = None,
    cache_outputs: bool = False,
) -> SimResult:
    """Replay ``workload`` under ``policy`` and return its metrics.

    Args:
        workload: from :func:`load_workload`.
        policy: engine policy name.
        profile: hardware cost model.
        concurrency: C, most workflows in flight (>= 1).
        predictor: next-agent predictor given to the engine (a fresh one per run: online
            predictors learn from the stream).
        device_tokens / host_tokens: capacity overrides in tokens (``None``: the profile's).
        horizon, gamma, rho, max_batch: engine settings (PBKV Eq. 2 K and gamma; aggressive rho).
        timeline_bins: bins of the hit-rate timeline.
        app_graphs: static agent graph per app for ``kvflow`` (default: learned from the workload,
            see :func:`static_graphs`).
        on_workflow_end: called with the number of finished workflows after each one (progress bars).
        cache_outputs: keep finished outputs in the cache as SGLang does (``EngineConfig.cache_outputs``).

    Raises:
        ValueError: ``concurrency`` < 1 or an unknown policy (from the engine).
        SimulationError: the engine stops making progress.
    """
    if concurrency < 1:
        raise ValueError("concurrency must be >= 1")
    future = build_future(workload, concurrency) if policy == "belady" else None
    engine = Engine(
        EngineConfig(
            profile=profile, policy=policy, device_tokens=device_tokens, host_tokens=host_tokens,
            horizon=horizon, gamma=gamma, rho=rho, predictor=predictor, max_batch=max_batch, future=future,
            cache_outputs=cache_outputs,
        )
    )
    for app, edges in (app_graphs if app_graphs is not None else static_graphs(workload)).items():
        engine.set_app_graph(app, edges)
    metrics = MetricsCollector(timeline_bins)
    _Driver(engine, workload, concurrency, future, on_workflow_end, metrics).run()
    return SimResult(policy, metrics.summary(engine.stats), engine, metrics)


def static_graphs(workload: Workload) -> dict[str, dict[str, list[str]]]:
    """Each app's static agent graph (agent -> successors seen in the workload), for ``kvflow``.

    KVFlow assumes the developer declares the graph; replaying a trace, the union of observed
    transitions stands in for that declaration.
    """
    graphs: dict[str, dict[str, dict[str, None]]] = {}
    for wf in workload.workflows:
        edges = graphs.setdefault(wf.app or "", {})
        for a, b in zip(wf.agents, wf.agents[1:]):
            edges.setdefault(a, {})[b] = None
        edges.setdefault(wf.agents[-1], {})
    return {app: {a: list(bs) for a, bs in edges.items()} for app, edges in graphs.items()}


class _Driver:
    """The event loop of one replay (kept out of :func:`simulate` so its state is explicit)."""

    _SUBMIT, _END = 0, 1
    #: Engine steps in a row without any event or clock progress before we give up.
    STALL_LIMIT = 10_000

    def __init__(self, engine, workload, concurrency, future, on_workflow_end, metrics):
        self.engine = engine
        self.workflows = workload.workflows
        self.concurrency = concurrency
        self.future = future
        self.on_workflow_end = on_workflow_end
        self.metrics = metrics
        self.events: list[tuple[float, int, int, int, int]] = []  # (time, seq, kind, workflow, step)
        self.seq = itertools.count()
        self.where: dict[str, tuple[int, int]] = {
            req.request_id: (w, j) for w, wf in enumerate(self.workflows) for j, req in enumerate(wf.requests)
        }
        self.next_workflow = 0
        self.done = 0

    def run(self) -> None:
        for _ in range(min(self.concurrency, len(self.workflows))):
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
        if self.next_workflow < len(self.workflows):
            w = self.next_workflow
            self.next_workflow += 1
            self.metrics.workflow_started(self.workflows[w].workflow_id, time)
            heapq.heappush(self.events, (time, next(self.seq), self._SUBMIT, w, 0))

    def _handle(self, event: tuple[float, int, int, int, int]) -> None:
        time, _, kind, w, j = event
        wf = self.workflows[w]
        if kind == self._SUBMIT:
            req = wf.requests[j]
            self.metrics.request_arrived(req.request_id, time, wf.agents[j])
            if self.future is not None:
                self.future.bind(self.engine.submitted, req.request_id)
            try:
                self.engine.submit(req)
            except ValueError as exc:  # e.g. a prompt larger than the device cache
                raise SimulationError(f"cannot replay {req.request_id}: {exc}") from None
        else:
            self.engine.end_workflow(wf.workflow_id, wf.status)
            self.metrics.workflow_ended(wf.workflow_id, time)
            self.done += 1
            if self.on_workflow_end is not None:
                self.on_workflow_end(self.done)
            self._start_next(time)

    def _engine_event(self, ev: FirstToken | Finished) -> None:
        if isinstance(ev, FirstToken):
            self.metrics.first_token(ev)
            if self.future is not None:
                self.future.consume(ev.request_id)
            return
        self.metrics.finished(ev.request_id, ev.time)
        w, j = self.where[ev.request_id]
        wf = self.workflows[w]
        kind = self._SUBMIT if j + 1 < len(wf.requests) else self._END
        heapq.heappush(self.events, (ev.time + wf.gaps_s[j], next(self.seq), kind, w, j + 1))
