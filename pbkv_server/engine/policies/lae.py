"""``lae``: lifecycle-aware eviction (PBKV baseline): retired cache first, then LRU.

Retired cache (every workflow that used it has ended) leaves before the cache of active
workflows. Among retired nodes, a finished workflow's private history leaves first: nodes that
only one workflow ever touched and that workflow made two or more invocations, so no later
request extends them; then every other retired node, least recently used first. Shared prefixes
(system prompts, tool descriptions) are thus kept over dead private history, as the PBKV paper
intends, while recency decides everything else: a chat turn (a single-request workflow) retires
at once, but the next turn of its conversation extends it, so its order must be LRU's, and
traffic without hints (no workflow at all) is ordered exactly as ``lru`` orders it.
"""

from __future__ import annotations

from .base import Policy, register_policy


@register_policy("lae")
class LifecycleAwarePolicy(Policy):
    """Retired ``(0, 0 finished private | 1 other, last_access)`` before active ``(1, 0, last_access)``."""

    summary = "lifecycle-aware: retired cache first (finished workflows' private history first), then LRU"
    sglang_name = "pbkv-lae"

    def priority(self, node) -> tuple:
        """See class docstring; anonymous-only nodes count as active (LRU among actives)."""
        sc = node.sc
        if sc is not None and sc.n_ever > 0 and not sc.access:
            return (0, 0 if sc.finished_private else 1, node.last_access)
        return (1, 0, node.last_access)
