"""``pbkv-aggressive``: ``pbkv`` whose prefetch may also displace low-score active cache, bounded.

The PBKV paper's aggressive variant loads high-score host cache even when the device is full, by
evicting active cache of lower Score(c) (up to a share rho of the device). With an online
predictor that changes its mind, unbounded rounds thrash: a round displaces cache the previous
round loaded, and every decode stretch displaces rho of the device again. Two bounds keep it to
what the paper intends:

- a displacement budget of ``rho`` x device capacity per step window, refilled continuously (a
  token bucket), instead of per prefetch round: the step window is the mean gap between two
  consecutive invocations of a workflow (measured online), the time in which each active
  workflow's prediction changes about once;
- cache it prefetched is not displaced by its own prefetch within the horizon window, K step
  windows: the span the prediction that justified the prefetch speaks about.

Both use :data:`DEFAULT_WINDOW_S` until a gap is seen.

While the robustness guard holds the policy in LRU order (:attr:`~Policy.fallback`), prefetch is
``pbkv``'s conservative one: displacement ranks active cache by the predicted score, the very
order the guard has stopped trusting.
"""

from __future__ import annotations

import math

from .base import register_policy
from .pbkv_paper import PBKVPaperPolicy
from .plan import HeapPlan

#: Window (seconds) before any workflow's second invocation was seen.
DEFAULT_WINDOW_S = 1.0
#: Weight of the newest gap in the running mean of invocation gaps.
GAP_EMA = 0.1


@register_policy("pbkv-aggressive")
class AggressivePBKVPolicy(PBKVPaperPolicy):
    """Like ``pbkv-paper``, plus active cache of lower score may be evicted for host cache of higher
    score, within ``config.rho`` x device capacity per step window (see module docstring).

    Raises:
        ValueError: ``config.rho`` outside [0, 1] (at construction).
    """

    summary = "pbkv whose prefetch may displace lower-score cache, up to rho of the device per workflow step"
    sglang_name = None  # the plugin implements the conservative planner only

    def __init__(self, context) -> None:
        super().__init__(context)
        rho = context.rho
        if not 0.0 <= rho <= 1.0:
            raise ValueError(f"rho must be in [0, 1], got {rho}")
        self._cap = rho * context.device_capacity
        self._horizon = context.horizon
        self._budget = self._cap
        self._refilled_at = 0.0
        self._gap: float | None = None
        self._last_seen: dict[str, float] = {}
        self._loaded_at: dict = {}  # node -> engine time of its prefetch by this policy

    @property
    def window_s(self) -> float:
        """Step window, seconds: the mean gap between a workflow's consecutive invocations."""
        return self._gap if self._gap else DEFAULT_WINDOW_S

    @property
    def horizon_s(self) -> float:
        """Horizon window, seconds: K step windows."""
        return self._horizon * self.window_s

    def on_invocation(self, wf, previous_agent) -> None:
        """Measure the gap since the workflow's previous invocation (engine time)."""
        now = self.context.now
        last = self._last_seen.get(wf.workflow_id)
        if last is not None and now > last:
            gap = now - last
            self._gap = gap if self._gap is None else (1 - GAP_EMA) * self._gap + GAP_EMA * gap
        self._last_seen[wf.workflow_id] = now

    def on_workflow_end(self, wf) -> None:
        """Forget the workflow's last invocation time."""
        self._last_seen.pop(wf.workflow_id, None)

    def prefetch_plan(self, seconds: float) -> HeapPlan:
        """One bounded aggressive round (see :func:`~pbkv_server.engine.prefetch.aggressive_prefetch`);
        a conservative one while the guard holds the policy in LRU order."""
        if self.order_guard.fallback:
            return super().prefetch_plan(seconds)
        now, window, horizon = self.context.now, self.window_s, self.horizon_s
        self._budget = min(self._cap, self._budget + self._cap * max(0.0, now - self._refilled_at) / window)
        self._refilled_at = now
        loaded_at = self._loaded_at

        def protected(node) -> bool:
            return now - loaded_at.get(node, -math.inf) < horizon

        def on_load(node) -> None:
            loaded_at[node] = now

        return HeapPlan(int(self._budget), protected, on_load, self._displaced)

    def _displaced(self, tokens: int) -> None:
        """The round displaced ``tokens`` of active cache: they leave the budget."""
        self._budget -= tokens

    def on_split(self, top, bottom) -> None:
        """Both halves of a prefetched node count as prefetched then."""
        if bottom in self._loaded_at:
            self._loaded_at[top] = self._loaded_at[bottom]

    def on_drop(self, node) -> None:
        """Forget the node."""
        self._loaded_at.pop(node, None)
