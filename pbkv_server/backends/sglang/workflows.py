"""Workflows, predictions and node scores of one SGLang scheduler process.

Each scheduler process owns one :class:`WorkflowBook` (held by its PBKV tree core). Its workflow
bookkeeping is the engine core's own :class:`~pbkv_server.engine.workflows.WorkflowTracker`, the
one :class:`pbkv_server.engine.Engine` uses: at each invocation (the first time the cache sees a
hinted request) the predictor observes it and predicts the workflow's next K agents, and the
engine core's :class:`~pbkv_server.engine.scoring.ScoreBoard` rescores the nodes that workflow
touched; nodes a request uses record ``(workflow, agent)`` in their A_w(c); a workflow end (or
idleness) retires the workflow. Score arithmetic lives only in :mod:`pbkv_server.engine.scoring`.

Hints arrive as ``req.sampling_params.custom_params["pbkv"]`` (hint protocol v1, body form).
A malformed hint is counted, logged once, and the request is served anonymously.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Iterable

from pbkv_contract.hints import BODY_KEY, END_STATUSES, Hints, parse_hints
from pbkv_server.engine.scoring import NodeScore, ScoreBoard
from pbkv_server.engine.workflows import Workflow, WorkflowTracker
from pbkv_contract.prediction import Predictor

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


#: Scheduler-side state of one active workflow: the engine core's workflow record (``last_seen``
#: is its ``last_activity``, ``time.monotonic()`` seconds of the latest invocation).
ActiveWorkflow = Workflow


class WorkflowBook:
    """Active workflows, the predictor and the engine-core score board of one scheduler process.

    Args:
        settings: plugin settings (gamma, horizon, predictor spec, idle retirement).
        predictor: a ready :class:`~pbkv_contract.prediction.Predictor`; ``None`` builds one from
            ``settings.predictor`` (a build failure is logged and leaves every score 0, so
            ``pbkv-he`` degrades to the ``pbkv-lae`` order).
        clock: time source in seconds (tests pass a fake one).

    Attributes:
        board: the :class:`~pbkv_server.engine.scoring.ScoreBoard` (A_w(c), Score(c), values).
        tracker: the engine core's :class:`~pbkv_server.engine.workflows.WorkflowTracker`
            (active workflows, predictor calls, ends and idle retirement).
        workflows: ``tracker.workflows``; predictor: ``tracker.predictor`` (settable).
        counters: a dict snapshot of ``invocations``, ``anonymous``, ``malformed``, ``ended``,
            ``retired_idle``, ``predictor_errors``.
    """

    def __init__(self, settings: PluginSettings, predictor: Predictor | None = None, clock=time.monotonic):
        self.settings = settings
        self.board = ScoreBoard(settings.gamma, settings.horizon)
        self.tracker = WorkflowTracker(self.board, predictor if predictor is not None else _build_predictor(settings),
                                       follow_app=True)
        self.clock = clock
        self._anonymous = 0
        self._malformed = 0
        self._malformed_logged = False

    @property
    def predictor(self) -> Predictor | None:
        """The predictor in use (settable; ``None``: scores stay 0)."""
        return self.tracker.predictor

    @predictor.setter
    def predictor(self, value: Predictor | None) -> None:
        self.tracker.predictor = value

    @property
    def workflows(self):
        """Active workflows: ``OrderedDict`` id -> :class:`ActiveWorkflow`, least recently seen first."""
        return self.tracker.workflows

    @property
    def counters(self) -> dict[str, int]:
        """A snapshot of ``invocations``, ``anonymous``, ``malformed``, ``ended``, ``retired_idle``,
        ``predictor_errors``."""
        t = self.tracker
        return {"invocations": t.invocations, "anonymous": self._anonymous, "malformed": self._malformed,
                "ended": t.ended, "retired_idle": t.retired_idle, "predictor_errors": t.predictor_errors}

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
                self._anonymous += 1
            else:
                self._malformed += 1
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
        return self.tracker.invocation(hints, features, self.clock())[0]

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
        return self.tracker.end(workflow_id, status) is not None

    def retire_idle(self) -> int:
        """Retire workflows idle for ``settings.idle_retire_s``; returns how many."""
        if self.settings.idle_retire_s is None or not self.tracker.workflows:
            return 0
        return len(self.tracker.retire_idle(self.clock(), self.settings.idle_retire_s))

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
