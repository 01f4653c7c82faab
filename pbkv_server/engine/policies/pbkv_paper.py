"""``pbkv-paper``: the paper's exact rules, hierarchical eviction plus conservative prefetch (PBKV
section 4; ``docs/architecture.md``, "Prefetch").

Kept under its own name so that the paper's tables can be reproduced; ``pbkv`` (:mod:`.pbkv`)
refines it where memory is short (``docs/design/memory-short-policy.md``)."""

from __future__ import annotations

from .base import register_policy
from .he import HierarchicalPolicy
from .plan import HeapPlan


@register_policy("pbkv-paper")
class PBKVPaperPolicy(HierarchicalPolicy):
    """``he`` eviction order; on decode-only steps, loads high-value host cache into free or
    retired device space without touching active cache."""

    summary = "he eviction + conservative prefetch into idle device space"
    sglang_name = "pbkv-paper"

    def prefetch_value(self, node) -> float:
        """One-step value ``sum_w A_w(c) . P_w^(1)``."""
        return node.sc.value if node.sc is not None else 0.0

    def prefetch_plan(self, seconds: float) -> HeapPlan:
        """The conservative round: best prefetch value first, into free or retired device space
        (:func:`~pbkv_server.engine.prefetch.conservative_prefetch`)."""
        return CONSERVATIVE


#: The conservative plan (the same every stretch).
CONSERVATIVE = HeapPlan()
