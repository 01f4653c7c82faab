"""``pbkv-survival`` (experimental, issue 33 step 2): ``pbkv-nextuse``'s order with an online estimate.

``pbkv-nextuse`` (:mod:`.pbkv_nextuse`) ranks active cache by the true time of its
conversation's next call. This policy ranks it the same way with what the engine's own events
give: per workflow, the estimated engine time of its next invocation (:mod:`.host_order`'s
:class:`~.host_order.NextUse`: a waiting request's submission time; while a request runs, now
plus the typical duration and gap; in a gap, the finish plus the typical gap), where the typical
gap is the *median* of the gaps the app has shown, ends counted as infinite gaps
(:class:`~.gap_survival.GapSurvival`, :data:`CONFIDENCE`), instead of their running mean. Fed
by ``on_invocation``, ``on_admit``, ``on_finish`` and ``on_workflow_end`` only, so it runs on
every backend that feeds ``pbkv``.

Only active cache that growing conversations alone read (rule 7's apps: coding agents, chats)
ranks this way; all other cache (multi-agent workflows, held sessions between turns, retired and
unhinted cache) ranks exactly as in ``pbkv``. Experimental: not the product rule. Where both
kinds of cache meet on one tier, the two orders' second keys (an age, a time) are compared as
numbers, which nothing calibrates yet. Units: engine seconds.
"""

from __future__ import annotations

import math

from .base import register_policy
from .gap_survival import GapSurvival
from .host_order import NextUse
from .pbkv import PBKVPolicy
from .pbkv_nextuse import NextUseRanked

#: Confidence of the typical gap: the median (the next call comes within it at least half the time).
CONFIDENCE = 0.5


class SurvivalNextUse(NextUse):
    """:class:`~.host_order.NextUse` whose typical gap is the app's median gap with ends (see
    module docstring); the mean while the app (and the pool) has no outcome."""

    def __init__(self) -> None:
        super().__init__()
        self.survival = GapSurvival()
        self._app: dict = {}  # workflow id -> app, while its latest call's gap is open

    def _d_g(self, app) -> tuple[float, float]:
        d, g = super()._d_g(app)
        if self.survival.outcomes(app) or self.survival.outcomes(None):
            g = self.survival.residual(app, 0.0, CONFIDENCE)
        return d, g

    def invocation(self, wid, app, agent: str, now: float) -> None:
        fin = self._finish_t.get(wid)
        if fin is not None:  # the gap closed: one outcome
            self.survival.observe(app, now - fin)
            self._app.pop(wid, None)
        super().invocation(wid, app, agent, now)

    def finished(self, wid, app, request_id, now: float) -> None:
        self._app[wid] = app
        super().finished(wid, app, request_id, now)

    def ended(self, wid) -> None:
        if wid in self._finish_t and wid in self._app:  # ended in its gap: an infinite gap
            self.survival.observe(self._app[wid], math.inf)
        self._app.pop(wid, None)
        super().ended(wid)


@register_policy("pbkv-survival")
class PBKVSurvivalPolicy(NextUseRanked):
    """:class:`~.pbkv_nextuse.NextUseRanked` with :class:`SurvivalNextUse`'s online estimate
    (engine seconds)."""

    summary = "experimental: pbkv ranking active cache by an online next-call estimate (median gap per app)"

    def __init__(self, context) -> None:
        super().__init__(context)
        self._surv = SurvivalNextUse()  # beside pbkv's own NextUse, which its host order keeps

    def priority(self, node) -> tuple:
        """:class:`~.pbkv_nextuse.NextUseRanked`'s order for active cache that only growing
        conversations read (rule 7's apps); ``pbkv``'s for everything else (multi-agent cache,
        held sessions, retired and unhinted cache), so traffic without a growing app is ordered
        exactly as ``pbkv`` orders it."""
        if self._growing_only(node):
            return NextUseRanked.priority(self, node)
        return PBKVPolicy.priority(self, node)

    def host_priority(self, node) -> tuple:
        """As :meth:`priority`, on the host tier."""
        if self._growing_only(node):
            return NextUseRanked.priority(self, node)
        return PBKVPolicy.host_priority(self, node)

    def _growing_only(self, node) -> bool:
        """True if the node has active readers and each is a workflow of a growing app."""
        sc = node.sc
        if sc is None or not sc.access or sc.retired or self.fallback:
            return False
        wconv, growing = self._wconv, self._conv.growing
        for w in sc.access:
            conv = wconv.get(w)
            if conv is None or not growing(conv[1]):
                return False
        return True

    def workflow_next(self, w, conv) -> float:
        waits = self._surv.submit_t.get(w)
        if waits:
            return min(waits.values())  # a waiting request: used at its admission
        return self._surv.next_t.get(w, math.inf)

    def session_next(self, session) -> float:
        app = self._conv.app_of(session)
        return self.context.now + self._surv._d_g(app)[1]

    # the events feed both estimators: pbkv's (through super) and the survival one, alike
    def on_invocation(self, wf, previous_agent) -> None:
        super().on_invocation(wf, previous_agent)
        self._surv.invocation(wf.workflow_id, wf.app, wf.agent, self._now())
        self._refile_all(wf.workflow_id)

    def on_admit(self, admission, path) -> None:
        wf = admission.workflow
        ws = self._wait.get(wf.workflow_id) if wf is not None else None
        counted = ws is not None and admission.agent in ws  # pbkv's NextUse hears of it too
        super().on_admit(admission, path)
        if wf is None:
            return
        if counted:
            req = admission.request
            still = admission.agent in self._wait.get(wf.workflow_id, ())
            self._surv.admitted(wf.workflow_id, wf.app, admission.agent, req.request_id if req is not None else None,
                                self._now(), still)
        self._refile_all(wf.workflow_id)

    def on_finish(self, request, wf, end) -> None:
        if wf is not None and wf.workflow_id in self._age:
            self._surv.finished(wf.workflow_id, wf.app, request.request_id, self._now())
        super().on_finish(request, wf, end)

    def on_workflow_end(self, wf) -> None:
        self._surv.ended(wf.workflow_id)
        super().on_workflow_end(wf)

    def _refile_all(self, wid) -> None:
        """Re-file a growing conversation's nodes (their estimate moved); other workflows' nodes
        keep ``pbkv``'s own re-filing, so their order and ties stay ``pbkv``'s."""
        conv = self._wconv.get(wid)
        if conv is not None and self._conv.growing(conv[1]):
            super()._refile_all(wid)
