"""``lae``: lifecycle-aware eviction (PBKV baseline): retired cache first, then LRU.

Retired cache (every workflow that used it has ended, one of them after two or more invocations:
:attr:`~pbkv_server.engine.scoring.NodeScore.retired`) leaves before the cache of active
workflows. Among retired nodes, a finished workflow's private history leaves first (nodes that
only that multi-step workflow ever touched: no later request extends them), then every other
retired node, least recently used first. Shared prefixes (system prompts, tool descriptions) are
thus kept over dead private history, as the PBKV paper intends, while recency decides everything
else. A single-request workflow (a chat turn) ends at once, but the next turn of its conversation
extends its prompt, so its cache is never called retired: like traffic without hints, it stays in
the active class, ordered exactly as ``lru`` orders it.
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
        if sc is not None and sc.retired:
            return (0, 0 if sc.finished_private else 1, node.last_access)
        return (1, 0, node.last_access)
