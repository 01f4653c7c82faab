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

Experimental: not the product rule (``pbkv``'s multi-agent figures are untouched); a held
session's path (between turns) ranks as if its next turn came one typical gap after its filing.
Units: engine seconds.
"""

from __future__ import annotations

import math

from .base import register_policy
from .gap_survival import GapSurvival
from .host_order import NextUse
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
        self._next = SurvivalNextUse()

    def workflow_next(self, w, conv) -> float:
        waits = self._next.submit_t.get(w)
        if waits:
            return min(waits.values())  # a waiting request: used at its admission
        return self._next.next_t.get(w, math.inf)

    def session_next(self, session) -> float:
        app = self._conv.app_of(session)
        return self.context.now + self._next._d_g(app)[1]

    def on_invocation(self, wf, previous_agent) -> None:
        super().on_invocation(wf, previous_agent)
        self._refile_all(wf.workflow_id)

    def on_admit(self, admission, path) -> None:
        super().on_admit(admission, path)
        if admission.workflow is not None:
            self._refile_all(admission.workflow.workflow_id)
