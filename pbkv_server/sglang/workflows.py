"""Workflows, predictions and node scores of one SGLang scheduler process.

Each scheduler process owns one :class:`WorkflowBook` (held by its PBKV tree core). It mirrors the
engine core's bookkeeping (:class:`pbkv_server.engine.Engine`): at each invocation (the first time
the cache sees a hinted request) the predictor observes it and predicts the workflow's next K
agents, and the engine core's :class:`~pbkv_server.engine.scoring.ScoreBoard` rescores the nodes
that workflow touched; nodes a request uses record ``(workflow, agent)`` in their A_w(c); a
workflow end (or idleness) retires the workflow. Score arithmetic lives only in
:mod:`pbkv_server.engine.scoring`.

Hints arrive as ``req.sampling_params.custom_params["pbkv"]`` (hint protocol v1, body form).
A malformed hint is counted, logged once, and the request is served anonymously.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Iterable

from pbkv_sdk.protocol import BODY_KEY, END_STATUSES, Hints, parse_hints
from pbkv_server.engine.scoring import NodeScore, ScoreBoard
from predictor.api import PredictionQuery, Predictor

from .settings import PluginSettings

log = logging.getLogger(__name__)

__all__ = ["WorkflowBook", "ActiveWorkflow", "hints_of_request"]

#: Attribute under which a parsed hint is cached on SGLang's ``Req`` (parse once per request).
_REQ_ATTR = "_pbkv_hints"
_NO_HINTS = (None, None)


def hints_of_request(req: Any) -> tuple[Hints | None, str | None]:
    """Hints of an SGLang ``Req`` (or any object with ``sampling_params.custom_params``).

    Returns:
        ``(hints, None)``, ``(None, None)`` for an anonymous request, or ``(None, reason)`` for a
        malformed hint. Never raises. The result is cached on the request object.
    """
    cached = getattr(req, _REQ_ATTR, None)
    if cached is not None:
        return cached
    try:
        custom = getattr(getattr(req, "sampling_params", None), "custom_params", None)
        if not isinstance(custom, dict) or BODY_KEY not in custom:
            result = _NO_HINTS
        else:
            result = parse_hints(None, {"custom_params": custom})
    except Exception as exc:  # defensive: never fail a request over hints
        result = (None, f"malformed hint: {type(exc).__name__}")
    try:
        setattr(req, _REQ_ATTR, result)
    except Exception:
        pass
    return result


@dataclass(slots=True)
class ActiveWorkflow:
    """Scheduler-side state of one active workflow.

    Attributes:
        workflow_id: id from the hints.
        app: app name (``None`` if not sent).
        history: agents of its invocations so far, oldest first.
        last_seen: ``time.monotonic()`` of its latest invocation, seconds.
        last_step: step of its latest invocation (-1 before any).
    """

    workflow_id: str
    app: str | None
    history: list[str] = field(default_factory=list)
    last_seen: float = 0.0
    last_step: int = -1


class WorkflowBook:
    """Active workflows, the predictor and the engine-core score board of one scheduler process.

    Args:
        settings: plugin settings (gamma, horizon, predictor spec, idle retirement).
        predictor: a ready :class:`~predictor.api.Predictor`; ``None`` builds one from
            ``settings.predictor`` (a build failure is logged and leaves every score 0, so
            ``pbkv-he`` degrades to the ``pbkv-lae`` order).
        clock: time source in seconds (tests pass a fake one).

    Attributes:
        board: the :class:`~pbkv_server.engine.scoring.ScoreBoard` (A_w(c), Score(c), values).
        counters: ``invocations``, ``anonymous``, ``malformed``, ``ended``, ``retired_idle``,
            ``predictor_errors``.
    """

    def __init__(self, settings: PluginSettings, predictor: Predictor | None = None, clock=time.monotonic):
        self.settings = settings
        self.board = ScoreBoard(settings.gamma, settings.horizon)
        self.predictor = predictor if predictor is not None else _build_predictor(settings)
        self.clock = clock
        self.workflows: OrderedDict[str, ActiveWorkflow] = OrderedDict()
        self.counters = dict.fromkeys(
            ("invocations", "anonymous", "malformed", "ended", "retired_idle", "predictor_errors"), 0)
        self._malformed_logged = False
        self._predictor_logged = False

    # ------------------------------------------------------------------ requests
    def begin_request(self, req: Any) -> Hints | None:
        """Register ``req``'s invocation the first time the cache sees it; return its hints.

        Later calls for the same request only return the cached hints. Anonymous and malformed
        requests return ``None`` (malformed ones are counted and logged once).
        """
        hints, reason = hints_of_request(req)
        if getattr(req, "_pbkv_begun", False):
            return hints
        try:
            req._pbkv_begun = True
        except Exception:
            pass
        if hints is None:
            if reason is None:
                self.counters["anonymous"] += 1
            else:
                self.counters["malformed"] += 1
                if not self._malformed_logged:
                    log.warning("PBKV: malformed hint served anonymously (%s); further ones are counted only",
                                reason)
                    self._malformed_logged = True
            return None
        self.invocation(hints)
        return hints

    def invocation(self, hints: Hints, features: tuple[float, ...] = ()) -> ActiveWorkflow:
        """One invocation of ``hints.workflow_id``: observe, predict, rescore (engine-core order).

        Returns:
            The workflow's state after the invocation.
        """
        self.retire_idle()
        wf = self.workflows.get(hints.workflow_id)
        if wf is None:
            wf = ActiveWorkflow(hints.workflow_id, hints.app)
            self.workflows[hints.workflow_id] = wf
        else:
            self.workflows.move_to_end(hints.workflow_id)
            if hints.app is not None:
                wf.app = hints.app
        wf.last_seen = self.clock()
        self.counters["invocations"] += 1
        if self.predictor is not None:
            query = PredictionQuery(wf.app, wf.workflow_id, hints.step, tuple(wf.history), hints.agent, features)
            try:
                self.predictor.observe(query)
                prediction = self.predictor.predict([query])[0]
                self.board.set_prediction(wf.workflow_id, prediction)
            except Exception:  # a predictor failure degrades scores, never the request
                self.counters["predictor_errors"] += 1
                if not self._predictor_logged:
                    log.exception("PBKV: predictor failed; scores keep the last prediction (logged once)")
                    self._predictor_logged = True
        wf.history.append(hints.agent)
        wf.last_step = hints.step
        return wf

    def touch(self, nodes: Iterable[Any], hints: Hints) -> int:
        """Record that ``hints.agent`` of ``hints.workflow_id`` used each of ``nodes``.

        Nodes are visited leaf first (a path walked upward); the walk stops at the first node that
        already records this agent, since its ancestors were recorded with it.

        Returns:
            Nodes whose A_w(c) changed.
        """
        wf_id, agent = hints.workflow_id, hints.agent
        if wf_id not in self.workflows:  # ended meanwhile: a late request must not revive it
            return 0
        changed = 0
        for node in nodes:
            rec = node.sc
            if rec is None:
                rec = node.sc = NodeScore(node)
            agents = rec.access.get(wf_id)
            if agents is not None and agent in agents:
                break
            self.board.touch(rec, wf_id, agent)
            changed += 1
        return changed

    # ------------------------------------------------------------------ lifecycle
    def end_workflow(self, workflow_id: str, status: str = "completed") -> bool:
        """Retire a workflow (idempotent; unknown ids are fine). Returns True if it was active.

        Raises:
            ValueError: ``status`` is not one of completed / failed / cancelled.
        """
        if status not in END_STATUSES:
            raise ValueError(f"status must be one of {END_STATUSES}, got {status!r}")
        wf = self.workflows.pop(workflow_id, None)
        if wf is None:
            return False
        self.board.end_workflow(workflow_id)
        self.counters["ended"] += 1
        if self.predictor is not None:
            try:
                self.predictor.workflow_ended(wf.app, workflow_id, status)
            except Exception:
                self.counters["predictor_errors"] += 1
        return True

    def retire_idle(self) -> int:
        """Retire workflows idle for ``settings.idle_retire_s``; returns how many."""
        idle = self.settings.idle_retire_s
        if idle is None or not self.workflows:
            return 0
        horizon = self.clock() - idle
        retired = 0
        while self.workflows:
            wf = next(iter(self.workflows.values()))
            if wf.last_seen > horizon:
                break
            self.end_workflow(wf.workflow_id, "cancelled")
            self.counters["retired_idle"] += 1
            retired += 1
        return retired

    def forget(self, node: Any) -> None:
        """A node left the tree: drop its score record."""
        rec = getattr(node, "sc", None)
        if rec is not None:
            self.board.forget(rec)
            node.sc = None

    def split(self, top: Any, bottom: Any) -> None:
        """``bottom`` was cut and ``top`` is its new upper part: ``top`` inherits its record."""
        rec = getattr(bottom, "sc", None)
        if rec is not None:
            top.sc = self.board.copy(rec, top)


def _build_predictor(settings: PluginSettings) -> Predictor | None:
    try:
        from pbkv_server.predictors.factory import make_predictor

        return make_predictor(settings.predictor, settings.horizon)
    except Exception:
        log.exception("PBKV: cannot build predictor %r; scores stay 0 (lifecycle order only)",
                      settings.predictor)
        return None
