"""``pbkv-nextuse``: ``pbkv`` told the true time of each conversation's next call (offline, replay only).

An oracle for the decomposition of opt's gain (issue 33, ``scripts/decompose_opt.py``): opt
knows, per cache unit, when it is next used; ``pbkv --predictor oracle`` knows which *agent*
calls next. On a coding agent the next agent is nearly always ``main``, so the second says
little; what matters there is *when* a conversation calls again (a tool call's duration, a
human's think time) and *whether* it calls again at all (its end). This policy is ``pbkv``
(:mod:`.pbkv`, every rule) with that one piece of knowledge added, and nothing else of the future:

- a workflow's next-use time is the reference position of its conversation's next unserved
  request (:meth:`~pbkv_server.sim.future.TraceFuture.next_call`; the conversation is the
  workflow's session, else the workflow, as in rule 7); ``inf`` when it calls no more;
- an active node's next use is the soonest next-use time of the active workflows that will
  read it: every workflow that touched it, except a growing conversation's workflow whose
  live path does not hold it (rule 7: that history is never resent);
- a held session's live path (rule 7, between turns) takes the session's next-use time;
- both tiers rank active cache by next use, latest first, instead of workflow age (rule 1),
  score (rule 6) or the online estimate (rule 3): ``(1, -next use, score, last_access)``; a
  waiting request's cache stays above (rule 2: ``(2, -next use, ...)``), retired and unhinted
  cache and the guard's fallback rank as in ``pbkv``; shared retired cache (rule 5) ranks as
  used now (``(1, -0.0, 0, t)``: kept as long as any active cache, as ``pbkv`` keeps it with
  the oldest workflow's).

Units: positions of the future, seconds of the timing-only reference replay
(:func:`~pbkv_server.sim.future.reference_order`: recorded call durations and gaps at the
replay's concurrency, no cache effects). The order is not iterated to the replay's own
(``iterates_order`` False): one run, and what it knows is the trace's timing, not the
cache's effect on it. What it does not know: which blocks the next call reads (opt does).
"""

from __future__ import annotations

import math

from .base import register_policy
from .pbkv import HELD_USES, PBKVPolicy

#: Next use given to shared retired cache (rule 5): used now, so it ranks above every active
#: node whose next call is ahead (positions are >= 0).
SHARED_RETIRED_NEXT = 0.0


class NextUseRanked(PBKVPolicy):
    """``pbkv`` whose active cache ranks by the next call of the workflows that read it, on both
    tiers: ``(1, -next use, score, t)``, waiting ``(2, -next use, score, t)``, held session ``(1,
    -its next call, HELD_USES, t)``, shared retired ``(1, -0.0, 0, t)``; the rest as ``pbkv``. A
    subclass says when a workflow calls next (:meth:`workflow_next`, :meth:`session_next`)."""

    sglang_name = None

    def workflow_next(self, w, conv) -> float:
        """Time (in the subclass's units) of workflow ``w``'s next call (``conv``: its conversation)."""
        raise NotImplementedError

    def session_next(self, session) -> float:
        """Time of the next call of a held session (no active turn)."""
        raise NotImplementedError

    # ----------------------------------------------------------------- order
    def priority(self, node) -> tuple:
        """See class docstring (one order with and without a host tier: no rule 6)."""
        sc = node.sc
        if sc is not None and sc.retired and not sc.finished_private and not self.fallback:
            return (1, -SHARED_RETIRED_NEXT, 0.0, node.last_access)
        held = self._held_session(node)
        if held is not None:
            return (1, -self.session_next(held), HELD_USES, node.last_access)
        shared = self._shared_rank(node)
        if shared is not None:
            return shared
        nxt = self.next_use(node)
        score = self._score(node, sc)
        if self._wait and self._waiting(node, sc):
            return (2, -nxt, score, node.last_access)
        return (1, -nxt, score, node.last_access)

    def host_priority(self, node) -> tuple:
        """The device order (:meth:`priority`): the next use replaces rule 3's estimate."""
        return self.priority(node)

    def next_use(self, node) -> float:
        """Soonest next call of the active workflows that will read ``node`` (see module
        docstring); ``inf`` if none will."""
        best = math.inf
        conversations = self._conv
        for w in node.sc.access:
            conv = self._wconv.get(w)
            if conv is None:
                t = self.workflow_next(w, w)
            elif conversations.growing(conv[1]) and not conversations.live(node, conv[0]):
                continue  # a growing conversation's history off its live path: never resent
            else:
                t = self.workflow_next(w, conv[0])
            if t < best:
                best = t
        return best

    # ----------------------------------------------------------------- hooks
    def on_finish(self, request, wf, end) -> None:
        """The request was served: its conversation's next call moved, so re-file the
        workflow's nodes on both tiers and its live path."""
        super().on_finish(request, wf, end)
        if wf is not None:
            self._refile_all(wf.workflow_id)

    def _refile_all(self, wid) -> None:
        reorder = self.context.reorder
        for rec in self.context.board.records(wid):
            reorder(rec.owner)
        conv = self._wconv.get(wid)
        if conv is not None:
            for node in self._conv.path(conv[0]):
                reorder(node)


@register_policy("pbkv-nextuse")
class PBKVNextUsePolicy(NextUseRanked):
    """:class:`NextUseRanked` with each conversation's true next-call time (future positions).

    Raises:
        ValueError: at construction, when the context's future cannot answer ``next_call``.
    """

    summary = "offline: pbkv ranking active cache by its conversation's true next-call time (decomposition)"
    offline = True
    iterates_order = False

    def __init__(self, context) -> None:
        super().__init__(context)
        future = context.future
        if future is None or not hasattr(future, "next_call"):
            raise ValueError("policy 'pbkv-nextuse' needs EngineConfig.future with next_call (simulator only)")
        self._next_call = future.next_call

    def workflow_next(self, w, conv) -> float:
        return self._next_call(conv)

    def session_next(self, session) -> float:
        return self._next_call(session)
