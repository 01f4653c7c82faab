"""``pbkv-paper``: the paper's exact rules, hierarchical eviction plus conservative prefetch (PBKV
section 4; ``docs/architecture.md``, "Prefetch").

Kept under its own name so that the paper's tables can be reproduced; ``pbkv`` (:mod:`.pbkv`)
refines it where memory is short (``docs/design/memory-short-policy.md``)."""

from __future__ import annotations

from ..prefetch import conservative_prefetch
from .base import register_policy
from .he import HierarchicalPolicy


@register_policy("pbkv-paper")
class PBKVPaperPolicy(HierarchicalPolicy):
    """``he`` eviction order; on decode-only steps, loads high-value host cache into free or
    retired device space without touching active cache."""

    summary = "he eviction + conservative prefetch into idle device space"
    sglang_name = "pbkv-paper"

    def prefetch_value(self, node) -> float:
        """One-step value ``sum_w A_w(c) . P_w^(1)``."""
        return node.sc.value if node.sc is not None else 0.0

    def prefetch(self, seconds: float) -> None:
        """See :func:`~pbkv_server.engine.prefetch.conservative_prefetch`."""
        conservative_prefetch(self.cache, seconds)
