"""``lru``: SGLang's default radix-cache rule, least recently used evictable leaf first."""

from __future__ import annotations

from .base import Policy, register_policy


@register_policy("lru")
class LRUPolicy(Policy):
    """Evict the leaf with the oldest ``last_access``; ties leave in the order they became leaves."""

    summary = "least recently used first (SGLang's default)"
    shipped_by, shipped_as = frozenset({"sglang", "vllm", "dynamo"}), "LRU"  # vLLM frees its blocks LRU too

    def priority(self, node) -> tuple:
        """``(last_access,)``."""
        return (node.last_access,)
