"""SGLang eviction strategies ``pbkv``, ``pbkv-he`` and ``pbkv-lae``.

SGLang's tree core builds one strategy per scheduler process from ``--radix-eviction-policy`` and
``--radix-eviction-policy-config`` and orders evictable leaves by ``get_priority(node)`` (lowest
first, from a heap). Each PBKV strategy delegates to the engine core's policy of the same rule
(:mod:`pbkv_server.engine.policies`: ``he`` = retired first, then ascending Score(c) of PBKV
Eq. 2, LRU tie-break; ``lae`` = retired first by fewest workflows ever, then LRU), so SGLang and
the simulator rank nodes by one implementation. The node's ``sc`` record and ``last_access`` come
from :class:`~pbkv_server.backends.sglang.tree_core.PBKVTreeNode`.
"""

from __future__ import annotations

import logging
from typing import Any

from sglang.srt.mem_cache.evict_policy import EvictionStrategy

from pbkv_server.engine.policies import make_policy

from .settings import POLICIES, PluginSettings

log = logging.getLogger(__name__)

__all__ = ["PBKVStrategy", "PBKVHEStrategy", "PBKVLAEStrategy", "STRATEGIES"]


class _NodeView:
    """``sc`` / ``last_access`` of a plain SGLang node (used only without the ``pbkv`` backend)."""

    __slots__ = ("sc", "last_access")

    def __init__(self, node: Any) -> None:
        self.sc = getattr(node, "sc", None)
        self.last_access = node.last_access_time


class _EnginePolicyStrategy(EvictionStrategy):
    """An SGLang ``EvictionStrategy`` whose order is an engine-core policy's ``priority``.

    Args:
        **config: the ``--radix-eviction-policy-config`` object (see
            :class:`~pbkv_server.backends.sglang.settings.PluginSettings`).

    Raises:
        ValueError: an unknown config key or a value out of range.
    """

    #: SGLang flag value; set by subclasses.
    sglang_name = ""

    def __init__(self, **config: Any) -> None:
        self.settings = PluginSettings.from_kwargs(self.sglang_name, config)
        self.engine_policy = make_policy(POLICIES[self.sglang_name], None)  # priority() needs no engine
        self.prefetch = self.settings.prefetch_enabled(self.sglang_name)
        self._warned = False

    def get_priority(self, node: Any) -> tuple:
        """Sort key of an evictable node (smallest leaves first); see the module docstring."""
        if not hasattr(node, "last_access"):
            if not self._warned:
                log.warning("PBKV policy %r without --radix-cache-backend pbkv: no hints reach the tree, "
                            "so the order is LRU", self.sglang_name)
                self._warned = True
            node = _NodeView(node)
        return self.engine_policy.priority(node)


class PBKVStrategy(_EnginePolicyStrategy):
    """``pbkv``: hierarchical eviction (engine policy ``pbkv`` = ``he``) plus conservative prefetch."""

    sglang_name = "pbkv"


class PBKVHEStrategy(_EnginePolicyStrategy):
    """``pbkv-he``: hierarchical eviction (engine policy ``he``), no prefetch."""

    sglang_name = "pbkv-he"


class PBKVLAEStrategy(_EnginePolicyStrategy):
    """``pbkv-lae``: lifecycle-aware eviction (engine policy ``lae``)."""

    sglang_name = "pbkv-lae"


#: SGLang policy name -> strategy class (factories for ``_EVICTION_POLICY_FACTORIES``).
STRATEGIES = {cls.sglang_name: cls for cls in (PBKVStrategy, PBKVHEStrategy, PBKVLAEStrategy)}
