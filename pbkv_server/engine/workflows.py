"""Workflow bookkeeping of the engine core: active workflows, predictor calls, predictions on the board.

One :class:`WorkflowTracker` is shared by the :class:`~pbkv_server.engine.Engine` (simulator and
live sim server) and the SGLang plugin's per-process book, so both run the same invocation order
(DESIGN.md sections 4-5): at an invocation the predictor observes it and predicts the workflow's
next K agents (PBKV Eq. 1-2 weights via :meth:`ScoreBoard.set_prediction`), then the agent joins
the workflow's history; an end (or idleness) retires the workflow on the board and tells the
predictor. A predictor failure is counted and logged once, and never reaches the request.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable

from pbkv_contract.prediction import PredictionQuery, Predictor

from .scoring import NodeScore, ScoreBoard

log = logging.getLogger(__name__)

__all__ = ["Workflow", "WorkflowTracker"]


@dataclass(slots=True)
class Workflow:
    """State of one active workflow.

    Attributes:
        workflow_id: the id from the hints.
        app: application name (``None`` if the client sent none).
        history: agents of its invocations so far, oldest first.
        last_activity: time of its latest invocation (or, in the Engine, request completion),
            seconds on the owner's clock (engine time, or ``time.monotonic()`` in the plugin).
        inflight: its requests waiting or running, kept by the owner (the Engine counts them; the
            plugin leaves 0). Idle retirement spares a workflow with ``inflight > 0``.
        last_step: step of its latest invocation (-1 before any).
    """

    workflow_id: str
    app: str | None
    history: list[str] = field(default_factory=list)
    last_activity: float = 0.0
    inflight: int = 0
    last_step: int = -1

    @property
    def agent(self) -> str | None:
        """Agent of the latest invocation."""
        return self.history[-1] if self.history else None

    @property
    def last_seen(self) -> float:
        """Alias of :attr:`last_activity` (the SGLang plugin's name)."""
        return self.last_activity


class WorkflowTracker:
    """Active workflows (least recently active first), their predictions and their retirement.

    Args:
        board: the :class:`~pbkv_server.engine.scoring.ScoreBoard` holding A_w(c) and Score(c).
        predictor: a :class:`~pbkv_contract.prediction.Predictor`, or ``None`` (no predictions; scores stay 0).
        predict: ask for a prediction at each invocation (``False``: the predictor only observes,
            for policies that do not use scores).
        follow_app: a later invocation that names an app replaces the workflow's app (plugin);
            ``False`` keeps the app of the first invocation (Engine).
        stats: an :class:`~pbkv_server.engine.EngineStats` that receives ``predictor_call_s``,
            ``score_update_s`` (per node), ``score_update_total_s`` and ``score_update_nodes``;
            ``None`` records no latencies.
        latency_clock: clock of those samples, seconds.
        on_end: ``on_end(workflow, changed_records)`` called when a workflow ends, after the board
            dropped it and before the predictor hears of it (the Engine re-files the records).

    Attributes:
        workflows: ``OrderedDict`` workflow id -> :class:`Workflow`, least recently active first.
        invocations, ended, retired_idle, predictor_errors: counters.
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
        on_end: Callable[[Workflow, list[NodeScore]], None] | None = None,
    ) -> None:
        self.board = board
        self.predictor = predictor
        self.predict = predict
        self.follow_app = follow_app
        self.stats = stats
        self.latency_clock = latency_clock
        self.on_end = on_end
        self.workflows: OrderedDict[str, Workflow] = OrderedDict()
        self.invocations = 0
        self.ended = 0
        self.retired_idle = 0
        self.predictor_errors = 0
        self._predictor_logged = False

    def __len__(self) -> int:
        return len(self.workflows)

    def get(self, workflow_id: str) -> Workflow | None:
        """The active workflow ``workflow_id``, or ``None``."""
        return self.workflows.get(workflow_id)

    def invocation(self, hints, features: tuple[float, ...], now: float) -> tuple[Workflow, list[NodeScore]]:
        """One invocation of ``hints.workflow_id`` at time ``now`` (seconds): observe, predict, rescore.

        Args:
            hints: :class:`pbkv_contract.hints.Hints` (``workflow_id``, ``app``, ``agent``, ``step``).
            features: the request's numeric features for the predictor.
            now: the owner's clock, seconds.

        Returns:
            ``(workflow, changed)``: the workflow after the invocation (its agent appended to the
            history) and the board records whose score or value the new prediction changed (the
            caller re-files them; empty when nothing was predicted or the predictor failed).
        """
        workflows = self.workflows
        workflow_id = hints.workflow_id
        wf = workflows.get(workflow_id)
        if wf is None:
            wf = workflows[workflow_id] = Workflow(workflow_id, hints.app)
        else:
            workflows.move_to_end(workflow_id)
            if self.follow_app and hints.app is not None:
                wf.app = hints.app
        wf.last_activity = now
        self.invocations += 1
        changed: list[NodeScore] = []
        predictor = self.predictor
        if predictor is not None:
            query = PredictionQuery(wf.app, workflow_id, hints.step, tuple(wf.history), hints.agent, features)
            try:
                predictor.observe(query)
                if self.predict:
                    changed = self._predict(predictor, query)
            except Exception:  # a predictor failure degrades scores, never the request
                self._predictor_failed()
        wf.history.append(hints.agent)
        wf.last_step = hints.step
        return wf, changed

    def end(self, workflow_id: str, status: str = "completed") -> Workflow | None:
        """The workflow ended (idempotent; an unknown id is fine): the board drops it, ``on_end``
        runs, the predictor is told.

        Returns:
            The ended workflow, or ``None`` if it was not active.
        """
        wf = self.workflows.pop(workflow_id, None)
        if wf is None:
            return None
        changed = self.board.end_workflow(workflow_id)
        self.ended += 1
        if self.on_end is not None:
            self.on_end(wf, changed)
        predictor = self.predictor
        if predictor is not None:
            try:
                predictor.workflow_ended(wf.app, workflow_id, status)
            except Exception:  # a predictor bug must not break serving
                self._predictor_failed()
        return wf

    def finished(self, wf: Workflow, now: float) -> None:
        """A request of ``wf`` completed at ``now``: one fewer in flight, and it counts as activity."""
        wf.inflight -= 1
        wf.last_activity = now
        if wf.workflow_id in self.workflows:
            self.workflows.move_to_end(wf.workflow_id)

    def retire_idle(self, now: float, idle_s: float | None) -> list[str]:
        """End (status ``cancelled``) every workflow with nothing in flight whose last activity is
        at least ``idle_s`` seconds before ``now``, least recently active first.

        Returns:
            The retired ids in retirement order (``[]`` if ``idle_s`` is ``None``).
        """
        if idle_s is None or not self.workflows:
            return []
        horizon = now - idle_s
        expired = []
        for wf in self.workflows.values():  # ordered by last activity: stop at the first recent one
            if wf.last_activity > horizon:
                break
            if wf.inflight == 0:
                expired.append(wf.workflow_id)
        for workflow_id in expired:
            self.end(workflow_id, "cancelled")
        self.retired_idle += len(expired)
        return expired

    # ------------------------------------------------------------------ helpers
    def _predict(self, predictor: Predictor, query: PredictionQuery) -> list[NodeScore]:
        board = self.board
        stats = self.stats
        if stats is None:
            return board.set_prediction(query.workflow_id, predictor.predict([query])[0])
        clock = self.latency_clock
        t0 = clock()
        prediction = predictor.predict([query])[0]
        t1 = clock()
        stats.predictor_call_s.append(t1 - t0)
        changed = board.set_prediction(query.workflow_id, prediction)
        dt = clock() - t1
        n = board.node_count(query.workflow_id)
        if n:  # per-node cost of recomputing Score(c) and the prefetch value
            stats.score_update_s.append(dt / n)
            stats.score_update_total_s += dt
            stats.score_update_nodes += n
        return changed

    def _predictor_failed(self) -> None:
        self.predictor_errors += 1
        if not self._predictor_logged:
            log.exception("PBKV: predictor failed; scores keep the last prediction (logged once)")
            self._predictor_logged = True
