"""``lae``: lifecycle-aware eviction (PBKV baseline): retired cache first, then LRU.

Among retired nodes the ones that fewer workflows ever used leave first (they were less
shared, so less likely to be a common prefix of future workflows), then the older ones.
"""

from __future__ import annotations

from .base import Policy, register_policy


@register_policy("lae")
class LifecycleAwarePolicy(Policy):
    """Retired ``(0, workflows ever, last_access)`` before active ``(1, 0, last_access)``."""

    summary = "lifecycle-aware: retired cache first, then LRU"
    sglang_name = "pbkv-lae"

    def priority(self, node) -> tuple:
        """See class docstring; anonymous-only nodes count as active (LRU among actives)."""
        sc = node.sc
        if sc is not None and sc.n_ever > 0 and not sc.access:
            return (0, sc.n_ever, node.last_access)
        return (1, 0, node.last_access)
