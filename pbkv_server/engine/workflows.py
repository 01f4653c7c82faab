"""The workflow lifecycle table of the engine core: active workflows, predictions, ends, retirement.

One :class:`WorkflowTable` serves the :class:`~pbkv_server.engine.Engine` (simulator and the live
sim server) and every engine backend's per-process book (the SGLang plugin), so all of them run
the same invocation order and the same lifecycle rules (``docs/architecture.md``, "Workflow
lifecycle"):

- an invocation makes its workflow active (a new one, or a new incarnation of an id that already
  ended), the predictor observes it and predicts the next K agents (PBKV Eq. 1-2 weights via
  :meth:`ScoreBoard.set_prediction`), then the agent joins the workflow's history;
- a workflow ends by the client's end signal, by idleness (no activity for ``idle_s`` seconds
  since the end of its last request; clients crash) or by the table bound (the least recently
  active goes first). A workflow with a request in flight is never retired: idleness and the
  bound pass it over, and an end signal that races a running request is applied when the
  workflow's last request in flight finishes (``inflight`` is kept by the owner);
- an ended workflow leaves the score board (its nodes retire when it was their last workflow) and
  its id is remembered (bounded) so that repeated end signals stay idempotent and a reused id is
  detected;
- a workflow that is one turn of a session (a ``session`` other than its own id: a chat
  conversation or a coding-agent session whose user turns are each a workflow) leaves its nodes
  held by the session when it ends, not retired: the session's next turn resends and extends that
  history. The hold goes when the session closes (:meth:`WorkflowTable.close_session`, SGLang's
  ``/close_session``; the simulator closes a replay unit's session when its last workflow ends),
  when the session has no workflow active and no activity for ``idle_s`` seconds (the same idle
  timeout as workflows, :meth:`WorkflowTable.retire_idle`), or by the table bound.

Times are the owner's clock (engine seconds in the simulator, ``time.monotonic()`` seconds in a
live server). A predictor failure is counted and logged once, and never reaches the request.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable

from pbkv_contract.hints import Hints
from pbkv_contract.prediction import PredictionQuery, Predictor

from .scoring import NodeScore, ScoreBoard

log = logging.getLogger(__name__)

__all__ = ["Workflow", "WorkflowTable", "END_CLIENT", "END_IDLE", "END_TABLE_FULL",
           "RETIRED_STATUS", "SESSION_AGENT", "Session"]

#: Why a workflow ended: the client's end signal, idleness, or the table bound.
END_CLIENT, END_IDLE, END_TABLE_FULL = "client", "idle", "table_full"
#: End status recorded when the server retires a workflow (idle or table bound).
RETIRED_STATUS = "cancelled"
#: Agent of a request whose only identity is an SGLang ``session_id`` (a chat session has one speaker).
SESSION_AGENT = "assistant"


@dataclass(slots=True)
class Workflow:
    """State of one active workflow.

    Attributes:
        workflow_id: the id from the hints.
        app: application name (``None`` if the client sent none).
        history: agents of its invocations so far, oldest first.
        last_activity: time of its latest invocation or request completion, seconds on the
            owner's clock.
        inflight: its requests waiting or running, kept by the owner (the Engine counts them; a
            backend that cannot see completions leaves 0). Retirement by idleness or by the table
            bound spares a workflow with ``inflight > 0``.
        last_step: step of its latest invocation (-1 before any).
        incarnation: 1 for the first use of the id, n for its n-th use after ending n - 1 times.
        pending_end: ``(status, reason)`` of an end signal received while requests were in
            flight, applied when the last of them finishes; ``None`` otherwise.
        session: the open session this workflow is a turn of, or ``None`` (no session, the
            workflow is its own session, or the session closed while it was active).
    """

    workflow_id: str
    app: str | None
    history: list[str] = field(default_factory=list)
    last_activity: float = 0.0
    inflight: int = 0
    last_step: int = -1
    incarnation: int = 1
    pending_end: tuple[str, str] | None = None
    session: str | None = None

    @property
    def agent(self) -> str | None:
        """Agent of the latest invocation."""
        return self.history[-1] if self.history else None


@dataclass(slots=True)
class Session:
    """An open session of the table: workflows (turns) that share one session id.

    Attributes:
        live: ids of its active workflows (insertion-ordered).
        last_activity: time of its latest invocation or request completion, seconds on the
            owner's clock; idleness of the session counts from here once ``live`` is empty.
    """

    live: dict[str, None] = field(default_factory=dict)
    last_activity: float = 0.0


class WorkflowTable:
    """Active workflows (least recently active first), their predictions and their retirement.

    Args:
        board: the :class:`~pbkv_server.engine.scoring.ScoreBoard` holding A_w(c) and Score(c).
        predictor: a :class:`~pbkv_contract.prediction.Predictor`, or ``None`` (no predictions;
            scores stay 0).
        predict: ask for a prediction at each invocation (``False``: the predictor only observes,
            for policies that do not use scores).
        follow_app: a later invocation that names an app replaces the workflow's app (backends
            that see one request at a time); ``False`` keeps the app of the first invocation.
        stats: an object with ``predictor_call_s``, ``score_update_s`` (deques),
            ``score_update_total_s`` and ``score_update_nodes`` (an ``EngineStats``) that receives
            prediction latencies; ``None`` records none.
        latency_clock: clock of those samples, seconds.
        on_end: ``on_end(workflow, changed_records, status, reason)`` called when a workflow ends
            (by its end signal, idleness, or the table bound making room for a new one), after
            the board dropped it and before the predictor hears of it.
        max_active: most active workflows (``None`` = unbounded); beyond it the least recently
            active workflow without a request in flight is retired (reason ``table_full``).
        max_ended: most ended ids remembered (idempotent ends, reuse detection).
        batch: gather the prediction queries of invocations and ask the predictor once for all of
            them at :meth:`flush` (or at the next end), when it does not learn online
            (``Predictor.learns_online``); the results are applied in invocation order, so they
            are the same as asking at each invocation.
        on_changed: ``on_changed(records)``, called with the records whose score or value a
            prediction changed (at the invocation, or at :meth:`flush` when batched; the owner
            re-files them).
        on_release: ``on_release(records)``, called with the records a session's hold left
            (closed, idle or over the bound; the owner re-files them: they may be retired now).

    Raises:
        ValueError: a bound below 1.

    Attributes:
        workflows: ``OrderedDict`` workflow id -> :class:`Workflow`, least recently active first.
        sessions: ``OrderedDict`` session id -> :class:`Session`, least recently active first.
        invocations, ended, retired_idle, retired_full, reused_ids, predictor_errors: counters.
        sessions_closed, sessions_idle, sessions_full: sessions released by a close, by
            idleness and by the table bound.
    """

    def __init__(
        self,
        board: ScoreBoard,
        predictor: Predictor | None = None,
        *,
        predict: bool = True,
        follow_app: bool = False,
        stats=None,
        latency_clock: Callable[[], float] = time.perf_counter,
        on_end: Callable[[Workflow, list[NodeScore], str, str], None] | None = None,
        max_active: int | None = None,
        max_ended: int = 100_000,
        batch: bool = False,
        on_changed: Callable[[list[NodeScore]], None] | None = None,
        on_release: Callable[[list[NodeScore]], None] | None = None,
    ) -> None:
        if (max_active is not None and max_active < 1) or max_ended < 1:
            raise ValueError("table bounds must be >= 1")
        self.board = board
        self.predictor = predictor
        self.predict = predict
        self.follow_app = follow_app
        self.stats = stats
        self.latency_clock = latency_clock
        self.on_end = on_end
        self.max_active = max_active
        self.max_ended = max_ended
        self.batch = batch
        self.on_changed = on_changed
        self.on_release = on_release
        self.sessions: OrderedDict[str, Session] = OrderedDict()
        self.sessions_closed = 0
        self.sessions_idle = 0
        self.sessions_full = 0
        self._pending: list[PredictionQuery] = []
        self.workflows: OrderedDict[str, Workflow] = OrderedDict()
        self._ended: OrderedDict[str, tuple[str, int]] = OrderedDict()  # id -> (status, incarnation)
        self.invocations = 0
        self.ended = 0
        self.retired_idle = 0
        self.retired_full = 0
        self.reused_ids = 0
        self.predictor_errors = 0
        self._predictor_logged = False
        self._reuse_logged = False

    def __len__(self) -> int:
        return len(self.workflows)

    def get(self, workflow_id: str) -> Workflow | None:
        """The active workflow ``workflow_id``, or ``None``."""
        return self.workflows.get(workflow_id)

    def session_hints(self, session_id: str) -> Hints:
        """Hints of a request that names only an SGLang session (top-level ``session_id``, no PBKV
        hints): the session is the workflow, :data:`SESSION_AGENT` the agent, and the step counts
        the session's invocations so far, so an app that uses SGLang sessions gets the workflow
        lifecycle without the PBKV SDK (``/close_session`` is its end signal). The caller checked
        ``session_id`` against the workflow-id rule."""
        wf = self.workflows.get(session_id)
        return Hints(session_id, SESSION_AGENT, len(wf.history) if wf is not None else 0)

    def ended_status(self, workflow_id: str) -> str | None:
        """End status of a remembered ended workflow (``None``: active, unknown or forgotten)."""
        entry = self._ended.get(workflow_id)
        return entry[0] if entry is not None else None

    @property
    def ended_count(self) -> int:
        """Ended ids currently remembered (at most ``max_ended``)."""
        return len(self._ended)

    def invocation(self, hints: Hints, features: tuple[float, ...], now: float,
                   session: str | None = None) -> Workflow:
        """One invocation of ``hints.workflow_id`` at time ``now`` (seconds): observe, predict, rescore.

        The table reports what changed one way, through its callbacks: workflows the table bound
        retires to make room go to ``on_end``, records a prediction changed to ``on_changed``
        (after the workflow's history took the new agent).

        A request for an id that already ended starts a new incarnation of it (its own history
        and cache lifecycle); it is counted in :attr:`reused_ids` and logged once.

        Args:
            hints: the request's hints (``workflow_id``, ``app``, ``agent``, ``step``).
            features: the request's numeric features for the predictor.
            now: the owner's clock, seconds.
            session: the request's session id (SGLang's top-level ``session_id``; in replay the
                trace's). A new workflow whose session differs from its own id becomes a turn
                of that session (see the module docstring); a later invocation does not move it.
        """
        workflows = self.workflows
        workflow_id = hints.workflow_id
        wf = workflows.get(workflow_id)
        if wf is None:
            wf = workflows[workflow_id] = Workflow(workflow_id, hints.app, incarnation=self._next_incarnation(workflow_id))
            if session is not None and session != workflow_id:
                self._join_session(wf, session, now)
            if self.max_active is not None and len(workflows) > self.max_active:
                self._retire_over_bound(wf)
        else:
            workflows.move_to_end(workflow_id)
            if self.follow_app and hints.app is not None:
                wf.app = hints.app
        wf.last_activity = now
        if wf.session is not None:
            self._session_activity(wf.session, now)
        self.invocations += 1
        changed: list[NodeScore] = []
        predictor = self.predictor
        if predictor is not None:
            query = PredictionQuery(wf.app, workflow_id, hints.step, tuple(wf.history), hints.agent, features)
            try:
                predictor.observe(query)
                if self.predict and self.batch and not predictor.learns_online:
                    self._pending.append(query)
                elif self.predict:
                    changed = self._predict(predictor, [query])
            except Exception:  # a predictor failure degrades scores, never the request
                self._predictor_failed()
        wf.history.append(hints.agent)
        wf.last_step = hints.step
        if changed and self.on_changed is not None:
            self.on_changed(changed)
        return wf

    def end(self, workflow_id: str, status: str = "completed", reason: str = END_CLIENT) -> Workflow | None:
        """The workflow ended (idempotent; an unknown id is fine): the board drops it, ``on_end``
        runs, the predictor is told, the id is remembered. With requests in flight the end is
        recorded and applied when the last of them finishes (:meth:`finished`).

        Returns:
            The workflow (ended now, or ending when its requests finish), or ``None`` if it was
            not active.
        """
        wf = self.workflows.get(workflow_id)
        if wf is None:
            if workflow_id in self._ended:
                self._ended.move_to_end(workflow_id)
            return None
        self.flush()  # predictions asked before the end apply before it, as if asked at once
        if wf.inflight > 0:
            if wf.pending_end is None:
                wf.pending_end = (status, reason)
            return wf
        del self.workflows[workflow_id]
        sid = wf.session
        if sid is not None:  # its nodes stay held by the session for the next turn
            self.sessions[sid].live.pop(workflow_id, None)
        changed = self.board.end_workflow(workflow_id, len(wf.history), sid)
        self.ended += 1
        self._remember(workflow_id, status, wf.incarnation)
        if self.on_end is not None:
            self.on_end(wf, changed, status, reason)
        predictor = self.predictor
        if predictor is not None:
            try:
                predictor.workflow_ended(wf.app, workflow_id, status)
            except Exception:  # a predictor bug must not break serving
                self._predictor_failed()
        return wf

    def finished(self, wf: Workflow, now: float) -> None:
        """A request of ``wf`` completed at ``now``: one fewer in flight, and it counts as activity
        (idleness counts from here). An end that arrived meanwhile is applied now if it was the
        last request in flight."""
        wf.inflight -= 1
        wf.last_activity = now
        if wf.session is not None and self.workflows.get(wf.workflow_id) is wf:
            self._session_activity(wf.session, now)
        if self.workflows.get(wf.workflow_id) is wf:
            self.workflows.move_to_end(wf.workflow_id)
            if wf.inflight == 0 and wf.pending_end is not None:
                self.end(wf.workflow_id, *wf.pending_end)

    def keep(self, workflow_id: str, now: float) -> bool:
        """A hint says active workflow ``workflow_id`` runs on (a KV-hint retain or fetch from
        another request): it counts as activity at ``now``, as a completion does. Returns whether
        it is active; an unknown or ended id is left alone."""
        wf = self.workflows.get(workflow_id)
        if wf is None:
            return False
        wf.last_activity = max(wf.last_activity, now)
        self.workflows.move_to_end(workflow_id)  # retire_idle walks in activity order
        if wf.session is not None:
            self._session_activity(wf.session, now)
        return True

    def retire_idle(self, now: float, idle_s: float | None) -> list[str]:
        """End (status ``cancelled``, reason ``idle``) every workflow with nothing in flight whose
        last activity is at least ``idle_s`` seconds before ``now``, least recently active first;
        then release every session with no active workflow and no activity for as long (its
        held nodes may retire).

        Returns:
            The retired workflow ids in retirement order (``[]`` if ``idle_s`` is ``None``).
        """
        if idle_s is None or not (self.workflows or self.sessions):
            return []
        horizon = now - idle_s
        expired = []
        for wf in self.workflows.values():  # ordered by last activity: stop at the first recent one
            if wf.last_activity > horizon:
                break
            if wf.inflight == 0:
                expired.append(wf.workflow_id)
        for workflow_id in expired:
            self.end(workflow_id, RETIRED_STATUS, END_IDLE)
        self.retired_idle += len(expired)
        idle = []
        for sid, sess in self.sessions.items():  # ordered by last activity, as the workflows
            if sess.last_activity > horizon:
                break
            if not sess.live:
                idle.append(sid)
        for sid in idle:
            self._release_session(sid)
        self.sessions_idle += len(idle)
        return expired

    def close_session(self, session_id: str) -> int:
        """The client closed session ``session_id`` (idempotent; an unknown id is fine): its hold
        goes, so the nodes its ended turns left retire (``on_release`` re-files them). A turn
        still active ends later as a workflow without a session.

        Returns:
            The number of node records released.
        """
        if session_id not in self.sessions:
            return 0
        self.sessions_closed += 1
        return self._release_session(session_id)

    def flush(self) -> None:
        """Ask the predictor once for every gathered query (batch mode) and apply the predictions in
        invocation order, reporting changed records to ``on_changed``. No-op when nothing waits."""
        pending, self._pending = self._pending, []
        if not pending or self.predictor is None:
            return
        try:
            changed = self._predict(self.predictor, pending)
        except Exception:  # a predictor failure degrades scores, never the request
            self._predictor_failed()
            return
        if changed and self.on_changed is not None:
            self.on_changed(changed)

    # ------------------------------------------------------------------ helpers
    def _join_session(self, wf: Workflow, session_id: str, now: float) -> None:
        sessions = self.sessions
        sess = sessions.get(session_id)
        if sess is None:
            sess = sessions[session_id] = Session()
            if self.max_active is not None and len(sessions) > self.max_active:
                self._release_over_bound(session_id)
        sess.live[wf.workflow_id] = None
        wf.session = session_id

    def _session_activity(self, session_id: str, now: float) -> None:
        sess = self.sessions.get(session_id)
        if sess is not None:
            sess.last_activity = now
            self.sessions.move_to_end(session_id)

    def _release_session(self, session_id: str) -> int:
        """Drop the session: its active turns lose it, the board releases its hold."""
        sess = self.sessions.pop(session_id)
        for workflow_id in sess.live:
            self.workflows[workflow_id].session = None
        released = self.board.release_session(session_id)
        if released and self.on_release is not None:
            self.on_release(released)
        return len(released)

    def _release_over_bound(self, newest: str) -> None:
        # least recently active first, never the newcomer or one with an active turn
        excess = len(self.sessions) - self.max_active
        victims = []
        for sid, sess in self.sessions.items():
            if excess <= 0:
                break
            if sid != newest and not sess.live:
                victims.append(sid)
                excess -= 1
        for sid in victims:
            self._release_session(sid)
        self.sessions_full += len(victims)

    def _next_incarnation(self, workflow_id: str) -> int:
        entry = self._ended.pop(workflow_id, None)
        if entry is None:
            return 1
        self.reused_ids += 1
        if not self._reuse_logged:
            log.warning("PBKV: workflow id %r was used again after it ended; it starts a new incarnation "
                        "(further reused ids are counted only)", workflow_id)
            self._reuse_logged = True
        return entry[1] + 1

    def _retire_over_bound(self, newest: Workflow) -> None:
        # least recently active first, never the newcomer or one with a request in flight
        victims = []
        excess = len(self.workflows) - self.max_active
        for wf in self.workflows.values():
            if excess <= 0:
                break
            if wf is not newest and wf.inflight == 0:
                victims.append(wf)
                excess -= 1
        for wf in victims:
            self.end(wf.workflow_id, RETIRED_STATUS, END_TABLE_FULL)
        self.retired_full += len(victims)

    def _remember(self, workflow_id: str, status: str, incarnation: int) -> None:
        ended = self._ended
        ended[workflow_id] = (status, incarnation)
        ended.move_to_end(workflow_id)
        while len(ended) > self.max_ended:
            ended.popitem(last=False)

    def _predict(self, predictor: Predictor, queries: list[PredictionQuery]) -> list[NodeScore]:
        """One predictor call for ``queries``; the predictions are installed in order. Returns the
        changed records (in the order a call per query would have produced them)."""
        board = self.board
        stats = self.stats
        clock = self.latency_clock
        t0 = clock()
        predictions = predictor.predict(queries)
        t1 = clock()
        if stats is not None:
            stats.predictor_call_s.append(t1 - t0)
        changed: list[NodeScore] = []
        for query, prediction in zip(queries, predictions):
            if query.workflow_id not in self.workflows:  # ended meanwhile (not in batch mode)
                continue
            t2 = clock()
            changed += board.set_prediction(query.workflow_id, prediction)
            n = board.node_count(query.workflow_id)
            if stats is not None and n:  # per-node cost of recomputing Score(c) and the prefetch value
                dt = clock() - t2
                stats.score_update_s.append(dt / n)
                stats.score_update_total_s += dt
                stats.score_update_nodes += n
        return changed

    def _predictor_failed(self) -> None:
        self.predictor_errors += 1
        if not self._predictor_logged:
            log.exception("PBKV: predictor failed; scores keep the last prediction (logged once)")
            self._predictor_logged = True
