"""``pbkv-survival`` (experimental ablation, issue 33): ``pbkv`` whose rule 8 uses the median gap.

``pbkv``'s rule 8 (:mod:`.pbkv`, with a host tier) ranks device cache that only growing
conversations read by its next use as rule 3 estimates it, with the app's running *mean* gap
(:mod:`.host_order`'s :class:`~.host_order.NextUse`). This policy is ``pbkv`` with one change:
in rule 8 the typical gap is the *median* of the gaps the app has shown, ends counted as
infinite gaps (:class:`~.gap_survival.GapSurvival`, :data:`CONFIDENCE`). Rule 3's host order and
every other rule keep ``pbkv``'s mean; without a host tier it is ``pbkv``. Fed by
``on_invocation``, ``on_admit``, ``on_finish`` and ``on_workflow_end`` only, as ``pbkv``. Kept
to measure the statistic: on 40 Claude Code conversations the median and the mean are about
equal (``docs/design/next-use-time.md``). Units: engine seconds.
"""

from __future__ import annotations

import math

from .base import register_policy
from .gap_survival import GapSurvival
from .host_order import NextUse
from .pbkv import PBKVPolicy

#: Confidence of the typical gap: the median (the next call comes within it at least half the time).
CONFIDENCE = 0.5


class SurvivalNextUse(NextUse):
    """:class:`~.host_order.NextUse` whose typical gap is the app's median gap with ends (see
    module docstring); the mean while the app (and the pool) has no outcome."""

    def __init__(self, queue_wait: bool = True) -> None:
        super().__init__(queue_wait)
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
class PBKVSurvivalPolicy(PBKVPolicy):
    """``pbkv`` whose rule 8 reads :class:`SurvivalNextUse` (the app's median gap with ends) instead
    of ``pbkv``'s own mean-gap estimate (engine seconds)."""

    summary = "experimental: pbkv with rule 8's next-call estimate from the app's median gap (ablation)"
    sglang_name = None

    def __init__(self, context) -> None:
        super().__init__(context)
        self._surv = SurvivalNextUse(self.queue_wait_cycle)  # beside pbkv's own NextUse, which rules 3 and 7 keep reading

    def _due_estimate(self) -> NextUse:
        return self._surv

    # each hook feeds the survival estimate first, so that pbkv's rule-8 re-filing (in super) reads it
    def on_invocation(self, wf, previous_agent) -> None:
        self._surv.invocation(wf.workflow_id, wf.app, wf.agent, self._now())
        super().on_invocation(wf, previous_agent)

    def on_admit(self, admission, path) -> None:
        wf = admission.workflow
        ws = self._wait.get(wf.workflow_id) if wf is not None else None
        if ws is not None and admission.agent in ws:  # a request pbkv's NextUse hears of too
            req = admission.request
            self._surv.admitted(wf.workflow_id, wf.app, admission.agent, req.request_id if req is not None else None,
                                self._now(), ws[admission.agent] > 1)
        super().on_admit(admission, path)

    def on_finish(self, request, wf, end) -> None:
        if wf is not None and wf.workflow_id in self._age:
            self._surv.finished(wf.workflow_id, wf.app, request.request_id, self._now())
        super().on_finish(request, wf, end)

    def on_workflow_end(self, wf) -> None:
        self._surv.ended(wf.workflow_id)
        super().on_workflow_end(wf)
