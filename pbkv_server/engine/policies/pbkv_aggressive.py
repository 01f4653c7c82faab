"""``pbkv-aggressive``: ``pbkv`` whose prefetch may also displace low-score active cache."""

from __future__ import annotations

from ..prefetch import aggressive_prefetch
from .base import register_policy
from .pbkv import PBKVPolicy


@register_policy("pbkv-aggressive")
class AggressivePBKVPolicy(PBKVPolicy):
    """Like ``pbkv``, plus up to ``rho`` x device capacity of active cache per prefetch round may
    be evicted for host cache of higher score (``config.rho``)."""

    summary = "pbkv whose prefetch may displace up to rho of the device of lower-score cache"
    sglang_name = None  # the plugin implements the conservative planner only

    def prefetch(self, seconds: float) -> None:
        """See :func:`~pbkv_server.engine.prefetch.aggressive_prefetch`."""
        aggressive_prefetch(self.cache, seconds, self.cache.config.rho)
