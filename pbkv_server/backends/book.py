"""The workflow book every engine backend keeps per process: hints in, scores on its own tree nodes.

An engine backend (SGLang today) runs PBKV's policies inside its own radix cache, on its own tree
nodes. What it needs besides the policy order is the same for every backend and lives here:

- hint accounting: each request's parsed hints (:func:`pbkv_contract.hints.parse_hints`) are
  counted as anonymous or malformed (logged once) or become an invocation;
- the engine core's :class:`~pbkv_server.engine.workflows.WorkflowTable` (invocation order,
  predictions, ends, idle retirement on the wall clock) and
  :class:`~pbkv_server.engine.scoring.ScoreBoard` (A_w(c), Score(c), one-step value);
- node records: a backend node gets an ``sc`` attribute (a
  :class:`~pbkv_server.engine.scoring.NodeScore`) that the engine-core policies read; the book
  touches, copies (split) and forgets them;
- the policy's lifecycle hooks (:mod:`~pbkv_server.backends.lifecycle`): a policy with the
  ``Lifecycle`` capability hears of each request's arrival, admission and finish, of workflow
  ends, session closes, splits and drops, as in the embedded engine.

A backend adds only how hints reach it (for SGLang: ``custom_params`` of a ``Req``), when it sees
a request arrive, be admitted and finish, and its tree's hooks. See ``docs/architecture.md``, "Adding an engine backend".
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from typing import Any, Callable, Iterable, Sequence

from pbkv_contract.hints import END_STATUSES, Hints, KvHintEnvelope, parse_kv_hints
from pbkv_contract.prediction import Predictor
from pbkv_server.engine.policies.base import Lifecycle, Policy
from pbkv_server.engine.scoring import NodeScore, ScoreBoard
from pbkv_server.engine.types import EngineRequest
from pbkv_server.engine.workflows import Workflow, WorkflowTable

from .lifecycle import BackendContext, LifecycleFeed

log = logging.getLogger(__name__)

__all__ = ["WorkflowBook", "predictor_or_none"]


class WorkflowBook:
    """Active workflows, the predictor and the score board of one backend process.

    Args:
        gamma: per-step decay of the lookahead score, in (0, 1] (PBKV Eq. 2).
        horizon: K, future steps scored (>= 1).
        predictor: a ready :class:`~pbkv_contract.prediction.Predictor` or ``None`` (scores stay 0,
            so ``he`` orders like ``lae``).
        idle_retire_s: seconds of the clock without activity after which a workflow is retired
            (a client that crashed never ends it); ``None`` = never.
        clock: time source, seconds (``time.monotonic`` by default; tests pass a fake one).
        predict: ask the predictor for predictions at each invocation; ``False`` (policies that
            read no score) lets it observe only.
        policy: the engine-core policy the backend orders by; its
            :class:`~pbkv_server.backends.lifecycle.BackendContext` is attached to this book's
            board and clock, and if it has the ``Lifecycle`` capability its hooks are fed from
            this book (:attr:`feed`). ``None``: no hooks.

    Attributes:
        board: the score board; table: the workflow table (``follow_app``: the latest app named
            by a request wins, as a backend sees one request at a time).
        feed: the policy's :class:`~pbkv_server.backends.lifecycle.LifecycleFeed`, or ``None``
            (the policy has no hooks).
    """

    def __init__(self, gamma: float, horizon: int, predictor: Predictor | None,
                 idle_retire_s: float | None = 600.0, clock: Callable[[], float] = time.monotonic,
                 predict: bool = True, policy: Policy | None = None) -> None:
        self.board = ScoreBoard(gamma, horizon)
        hooks = policy.capability(Lifecycle) if policy is not None else None
        self.feed = LifecycleFeed(hooks) if hooks is not None else None
        if policy is not None and isinstance(policy.context, BackendContext):
            policy.context.attach(self.board, clock)
        self.table = WorkflowTable(self.board, predictor, predict=predict, follow_app=True,
                                   on_end=self._on_end if self.feed is not None else None)
        self.idle_retire_s = idle_retire_s
        self.clock = clock
        self._anonymous = 0
        self._malformed = 0
        self._malformed_logged = False
        #: KV-hint actions seen (``kv_hints``), by kind (retain, demote, evict, fetch), and ignored ones.
        self.kv_hint_counts = {"retain": 0, "demote": 0, "evict": 0, "fetch": 0, "ignored": 0}

    @property
    def predictor(self) -> Predictor | None:
        """The predictor in use (settable; ``None``: scores stay 0)."""
        return self.table.predictor

    @predictor.setter
    def predictor(self, value: Predictor | None) -> None:
        self.table.predictor = value

    @property
    def workflows(self) -> "OrderedDict[str, Workflow]":
        """Active workflows: id -> :class:`~pbkv_server.engine.workflows.Workflow`, least recently
        active first."""
        return self.table.workflows

    @property
    def counters(self) -> dict[str, int]:
        """A snapshot of ``invocations``, ``anonymous``, ``malformed``, ``ended``, ``retired_idle``,
        ``reused_ids``, ``predictor_errors``."""
        t = self.table
        return {"invocations": t.invocations, "anonymous": self._anonymous, "malformed": self._malformed,
                "ended": t.ended, "retired_idle": t.retired_idle, "reused_ids": t.reused_ids,
                "predictor_errors": t.predictor_errors}

    # ------------------------------------------------------------------ requests
    def request(self, hints: Hints | None, reason: str | None, features: tuple[float, ...] = (),
                request: EngineRequest | None = None) -> Hints | None:
        """A request was seen for the first time, with ``parse_hints``'s result ``(hints, reason)``.

        Anonymous (no hints) and malformed (``reason`` set; logged once) requests are counted and
        return ``None``; a hinted request becomes an invocation and returns its hints.
        ``request`` names it for the policy's hooks (its admission and finish are reported by id:
        :meth:`admitted`, :meth:`finished`); an anonymous one without it is not followed.
        """
        if hints is None:
            if self.feed is not None and request is not None:
                self.feed.arrived(request, None)
            if reason is None:
                self._anonymous += 1
            else:
                self._malformed += 1
                if not self._malformed_logged:
                    log.warning("PBKV: malformed hint served anonymously (%s); further ones are counted only",
                                reason)
                    self._malformed_logged = True
            return None
        self.invocation(hints, features, request)
        return hints

    def invocation(self, hints: Hints, features: tuple[float, ...] = (),
                   request: EngineRequest | None = None) -> Workflow:
        """One invocation of ``hints.workflow_id``: observe, predict, rescore (engine-core order),
        then the policy's ``on_invocation``. ``request``: the request that made it, whose
        admission and finish the backend reports by id; ``None`` counts it as admitted at once.

        Returns:
            The workflow's state after the invocation.
        """
        self.retire_idle()
        wf = self.table.invocation(hints, features, self.clock())
        if self.feed is not None:
            self.feed.arrived(request, wf, hints.agent)
        return wf

    def admitted(self, request_id: str, path: Sequence[Any] = ()) -> None:
        """The backend scheduled request ``request_id`` (first report only); ``path``: its cached
        nodes, root first. Unknown ids (never seen, or anonymous without hooks) are ignored."""
        if self.feed is not None:
            self.feed.admitted(request_id, path)

    def cached(self, request_id: str, path: Sequence[Any]) -> None:
        """Admitted request ``request_id``'s prompt is now cached along ``path`` (root first),
        deeper than at its admission (SGLang inserts it after the prefill)."""
        if self.feed is not None:
            self.feed.cached(request_id, path)

    def finished(self, request_id: str, end: Any = None) -> None:
        """Request ``request_id`` finished (an unreported admission is implied); ``end``: the
        deepest node of its prompt, or ``None``. Idempotent."""
        if self.feed is not None:
            self.feed.finished(request_id, end)

    def close_session(self, session_id: str) -> int:
        """The client closed session ``session_id``: the policy hears of it, then the session's
        hold on its ended turns' history goes (:meth:`WorkflowTable.close_session`). Returns the
        node records released."""
        if self.feed is not None:
            self.feed.session_closed(session_id)
        return self.table.close_session(session_id)

    def touch(self, nodes: Iterable[Any], hints: Hints) -> int:
        """Record that ``hints.agent`` of ``hints.workflow_id`` used each of ``nodes``.

        Nodes are visited leaf first (a path walked upward); the walk stops at the first node that
        already records this agent, since its ancestors were recorded with it. A node without a
        record gets one (attribute ``sc``).

        Returns:
            Nodes whose A_w(c) changed.
        """
        wf_id, agent = hints.workflow_id, hints.agent
        if wf_id not in self.table.workflows:  # ended meanwhile: a late request must not revive it
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

    def kv_hints(self, body: Any, hints: Hints | None) -> tuple[KvHintEnvelope | None, str | None]:
        """Read a request's KV-hint envelope (``body`` as :func:`pbkv_contract.hints.parse_kv_hints`
        takes it) for a request of ``hints`` (``None``: anonymous) and apply what the book can now.

        Every understood action is counted by kind, unknown ones as ``ignored``; a malformed
        envelope is counted (and logged once) as a malformed hint, the request's own hints still
        apply. A demote/evict of another workflow retires it now; one of the request's own
        workflow is returned, for the backend to retire once the request finished (its final
        turn; ending it first would leave the request's cache unrecorded). A retain or fetch of an
        active workflow restarts its idle clock (:meth:`keep`): its cache keeps its lookahead rank
        instead of retiring after ``idle_retire_s`` (a trajectory in a long tool call); what else
        they mean is the backend's to apply, from the envelope returned. Never raises.

        Returns:
            ``(envelope, end_after)``: the parsed envelope or ``None``, and the workflow id to end
            after the request, or ``None``.
        """
        try:
            envelope, reason = parse_kv_hints(body)
            if envelope is None:
                if reason is not None:
                    self._count_malformed(reason)
                return None, None
            own = hints.workflow_id if hints is not None else None
            counts = self.kv_hint_counts
            counts["ignored"] += envelope.ignored
            end_after = None
            for action in envelope.actions:
                counts[action.kind] += 1
                target = action.target(own)
                if target is None:
                    continue
                if action.kind in ("retain", "fetch"):
                    kept = action.keeps(own)
                    if kept is not None:
                        self.keep(kept)
                    continue
                if action.after_request(own):
                    end_after = own
                else:
                    self.end_workflow(target, "completed")
            return envelope, end_after
        except Exception as exc:  # bookkeeping must never fail a request
            self._count_malformed(f"kv_hints: unreadable ({type(exc).__name__})")
            return None, None

    def keep(self, workflow_id: str) -> bool:
        """Restart the idle clock of active workflow ``workflow_id`` (a retain or fetch hint: the
        trajectory runs on). Returns whether it is active; an ended or unknown id is left alone
        (a hint never starts a workflow)."""
        return self.table.keep(workflow_id, self.clock())

    def _count_malformed(self, reason: str) -> None:
        self._malformed += 1
        if not self._malformed_logged:
            log.warning("PBKV: malformed hint ignored (%s); further ones are counted only", reason)
            self._malformed_logged = True

    # ------------------------------------------------------------------ lifecycle
    def end_workflow(self, workflow_id: str, status: str = "completed") -> bool:
        """Retire a workflow (idempotent; unknown ids are fine). Returns True if it was active.

        Raises:
            ValueError: ``status`` is not one of completed / failed / cancelled.
        """
        if status not in END_STATUSES:
            raise ValueError(f"status must be one of {END_STATUSES}, got {status!r}")
        return self.table.end(workflow_id, status) is not None

    def retire_idle(self) -> int:
        """Retire workflows idle for ``idle_retire_s``; returns how many."""
        if self.idle_retire_s is None or not self.table.workflows:
            return 0
        return len(self.table.retire_idle(self.clock(), self.idle_retire_s))

    def forget(self, node: Any) -> None:
        """A node leaves the tree: the policy's ``on_drop`` (while it is still linked), then its
        score record is dropped."""
        if self.feed is not None:
            self.feed.dropped(node)
        rec = getattr(node, "sc", None)
        if rec is not None:
            self.board.forget(rec)
            node.sc = None

    def split(self, top: Any, bottom: Any) -> None:
        """``bottom`` was cut and ``top`` is its new upper part: ``top`` inherits its record."""
        rec = getattr(bottom, "sc", None)
        if rec is not None:
            top.sc = self.board.copy(rec, top)
        if self.feed is not None:
            self.feed.split(top, bottom)

    def _on_end(self, wf: Workflow, changed: list[NodeScore], status: str, reason: str) -> None:
        # the table's end callback (client, KV hint, idleness, bound): a backend re-files nothing
        # (it asks priorities at each eviction), the policy forgets the workflow
        self.feed.workflow_ended(wf)


def predictor_or_none(spec: str, horizon: int) -> Predictor | None:
    """The predictor named by ``spec`` (``context``, ``markov``, ``uniform`` or a model file), or
    ``None`` if it cannot be built (logged: the backend then orders by lifecycle only)."""
    try:
        from pbkv_server.predictors.factory import make_predictor

        return make_predictor(spec, horizon, live=True)
    except Exception:
        log.exception("PBKV: cannot build predictor %r; scores stay 0 (lifecycle order only)", spec)
        return None
