"""``belady``: offline reference, evict the node whose next use is farthest in the future.

Needs the whole future (``EngineConfig.future``), so it exists only in the simulator. A node is
used by a future request exactly when that request's prompt contains the node's first block
(a request that shares only part of the node still needs its first block), so the node's next
use is ``future.next_use(first key, now)``. It changes only when the node is used again (then
it is recomputed at admission) or cut in two (the lower half gets a new first key).
"""

from __future__ import annotations

import math

from .base import Policy, register_policy


@register_policy("belady")
class BeladyPolicy(Policy):
    """Priority ``(-next_use, last_access)``: never-used-again nodes leave first.

    Raises:
        ValueError: at construction, when ``config.future`` is missing.
    """

    summary = "offline reference: farthest next use first (needs the trace's future)"
    offline = True

    def __init__(self, context) -> None:
        super().__init__(context)
        if context.future is None:
            raise ValueError("policy 'belady' needs EngineConfig.future (a FutureOracle; simulator only)")
        self.future = context.future
        self._now = -1
        # node -> reference position of its next use (absent: not computed yet = never)
        self._next_use: dict = {}

    def priority(self, node) -> tuple:
        """See class docstring."""
        return (-self._next_use.get(node, math.inf), node.last_access)

    def on_admit(self, admission, path) -> None:
        """Recompute the next use of every node the admitted request uses."""
        self._now = admission.index
        for node in path:
            self._next_use[node] = self.future.next_use(node.keys[0], admission.index)

    def on_split(self, top, bottom) -> None:
        """``top`` keeps the old first key (and next use); ``bottom`` gets its new one."""
        if bottom in self._next_use:
            self._next_use[top] = self._next_use[bottom]
        self._next_use[bottom] = self.future.next_use(bottom.keys[0], self._now)

    def on_drop(self, node) -> None:
        """Forget the node's next use."""
        self._next_use.pop(node, None)
