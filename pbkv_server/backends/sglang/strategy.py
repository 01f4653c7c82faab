"""SGLang eviction strategies of the plugin policies (``pbkv``, ``pbkv-he``, ``pbkv-lae``, ...).

SGLang's tree core builds one strategy per scheduler process from ``--radix-eviction-policy`` and
``--radix-eviction-policy-config`` and orders evictable leaves by ``get_priority(node)`` (lowest
first, from a heap). There is one strategy per registered policy that declares an ``sglang_name``
(:mod:`pbkv_server.engine.policies`); each delegates to that engine-core policy's ``priority`` (a
host leaf, evicted from the device, to its ``host_priority``: SGLang's host-tier eviction asks the
same ``get_priority``), so SGLang and the simulator rank nodes by one implementation. The node's ``sc`` record and ``last_access`` come
from :class:`~pbkv_server.backends.sglang.tree_core.PBKVTreeNode`.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from sglang.srt.mem_cache.evict_policy import EvictionStrategy

from pbkv_server.backends.lifecycle import BackendContext
from pbkv_server.engine.policies import make_policy, policy_info, sglang_policy_names
from pbkv_server.engine.policies.base import EvictionOrder
from pbkv_server.engine.scoring import ScoreBoard

from .settings import PluginSettings

log = logging.getLogger(__name__)

__all__ = ["strategy_class", "strategies"]


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
        # the policy's context reads the tree core's book once the book attaches it (backends/lifecycle.py)
        self.context = BackendContext(ScoreBoard(self.settings.gamma, self.settings.horizon), time.monotonic,
                                      self.settings.horizon)
        self.engine_policy: EvictionOrder = make_policy(sglang_policy_names()[self.sglang_name], self.context)
        self.prefetch = self.settings.prefetch_enabled(self.sglang_name)
        self._warned = False

    def get_priority(self, node: Any) -> tuple:
        """Sort key of an evictable node (smallest leaves first); see the module docstring."""
        if not hasattr(node, "last_access"):
            if not self._warned:
                log.warning("PBKV policy %r without --radix-cache-backend pbkv: no hints reach the tree, "
                            "so the order is LRU", self.sglang_name)
                self._warned = True
            return self.engine_policy.priority(_NodeView(node))
        if node.evicted:  # a host leaf (SGLang's host eviction): the policy's host drop order
            return self.engine_policy.host_priority(node)
        return self.engine_policy.priority(node)


def strategy_class(sglang_name: str) -> type[_EnginePolicyStrategy]:
    """The SGLang ``EvictionStrategy`` class of plugin policy ``sglang_name`` (one class per name,
    made once: SGLang compares factories by identity).

    Raises:
        ValueError: ``sglang_name`` is not a plugin policy of the registry.
    """
    cls = _CLASSES.get(sglang_name)
    if cls is None:
        engine_name = sglang_policy_names().get(sglang_name)
        if engine_name is None:
            raise ValueError(f"{sglang_name!r} is not a PBKV plugin policy; known: {', '.join(sglang_policy_names())}")
        info = policy_info(engine_name)
        cls = type(f"PBKVStrategy[{sglang_name}]", (_EnginePolicyStrategy,), {
            "sglang_name": sglang_name, "__module__": __name__,
            "__doc__": f"``{sglang_name}``: engine-core policy ``{engine_name}`` ({info.summary}).",
        })
        _CLASSES[sglang_name] = cls
    return cls


def strategies() -> dict[str, type[_EnginePolicyStrategy]]:
    """SGLang policy name -> strategy class, for every plugin policy of the registry (factories for
    SGLang's ``_EVICTION_POLICY_FACTORIES``)."""
    return {name: strategy_class(name) for name in sglang_policy_names()}


_CLASSES: dict[str, type[_EnginePolicyStrategy]] = {}
