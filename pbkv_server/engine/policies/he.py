"""``he``: hierarchical eviction (PBKV section 4): retired first, then ascending lookahead score.

Retired nodes leave in ``lae``'s order (a finished multi-step workflow's private history first,
then least recently used), so ``he`` refines lifecycle-aware eviction rather than replacing it.
All other nodes are ordered by Score(c) of PBKV Eq. 2 (:mod:`pbkv_server.engine.scoring`), which
the engine keeps current incrementally; LRU breaks ties (equal scores, e.g. 0 for cache of
anonymous requests and of ended single-request workflows, or without a predictor), so traffic
without hints or predictions is ordered exactly as ``lru`` orders it.

Robustness guard (:mod:`~pbkv_server.engine.guard`): while :attr:`~Policy.fallback` is set, the
score is ignored and the order is ``lae``'s (retired first, then LRU), the same tuple shape with
score 0. Retired-first stays because it uses no prediction (only end signals), and in
``benchmarks/policy_matrix.py`` it did no worse than a pure-LRU fallback (the figures are in
``docs/design/engine.md``, "Why the fallback order is lae's"). The guard's ghost still compares
with pure LRU, so a retired-first order that lost would keep it in fallback.
"""

from __future__ import annotations

from .base import Policy, register_policy


@register_policy("he")
class HierarchicalPolicy(Policy):
    """Retired ``(0, 0 finished private | 1 other, last_access)`` before active ``(1, Score(c), last_access)``."""

    summary = "hierarchical: retired first, then ascending lookahead score (PBKV Eq. 2)"
    uses_predictions = True
    sglang_name = "pbkv-he"
    guardable = True

    def priority(self, node) -> tuple:
        """See class docstring."""
        sc = node.sc
        if sc is None:
            return (1, 0.0, node.last_access)
        if sc.retired:
            return (0, 0 if sc.finished_private else 1, node.last_access)
        return (1, 0.0 if self.order_guard.fallback else sc.score, node.last_access)
