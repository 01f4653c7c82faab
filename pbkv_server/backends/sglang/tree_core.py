"""SGLang's Python tree core with PBKV node state (registered as tree-core backend ``pbkv``).

:class:`PBKVTreeNode` adds the engine-core score record ``sc``
(:class:`~pbkv_server.engine.scoring.NodeScore`: A_w(c), Score(c), one-step value, retired state)
and ``last_access`` (SGLang's access counter) — exactly what the engine-core policies read.
:class:`PBKVTreeCore` keeps those records consistent with the tree: a split copies the record to
the new upper node (and a split does not count as an access), a node leaving the tree (or a flush) drops its record, and it owns the
process's :class:`~pbkv_server.backends.sglang.workflows.SGLangWorkflowBook`.
"""

from __future__ import annotations

from typing import Any

from sglang.srt.mem_cache.unified_cache.unified_tree_core import UnifiedTreeCore, UnifiedTreeNode

from pbkv_server.engine.radix import DEVICE, HOST

from .settings import BACKEND_NAME
from .settings import PluginSettings
from .workflows import SGLangWorkflowBook

__all__ = ["PBKVTreeNode", "PBKVTreeCore", "TREE_CORE_NAME", "make_tree_core"]

#: Name under which :func:`make_tree_core` is registered with ``register_tree_core_backend``.
TREE_CORE_NAME = BACKEND_NAME


class PBKVTreeNode(UnifiedTreeNode):
    """A ``UnifiedTreeNode`` with a PBKV score record.

    Attributes:
        sc: :class:`~pbkv_server.engine.scoring.NodeScore` or ``None`` (never used by a hinted request).
    """

    def __init__(self, tree_components, priority: int = 0):
        super().__init__(tree_components, priority=priority)
        self.sc = None

    @property
    def tokens(self) -> int:
        """KV tokens the node holds (its key's length), as engine-core policies read them."""
        return len(self.key)

    @property
    def last_access(self) -> float:
        """SGLang's last-access counter (monotone; larger = more recent), the LRU tie-break."""
        return self.last_access_time

    @property
    def tier(self) -> int:
        """``HOST`` once evicted from the device (its KV only on the host tier), else ``DEVICE``
        (the engine core's tiers, :mod:`pbkv_server.engine.radix`)."""
        return HOST if self.evicted else DEVICE


class PBKVTreeCore(UnifiedTreeCore):
    """``UnifiedTreeCore`` whose nodes are :class:`PBKVTreeNode` and whose records follow the tree.

    Attributes:
        book: the scheduler process's :class:`~pbkv_server.backends.sglang.workflows.SGLangWorkflowBook`, built
            from the eviction strategy's settings (defaults when the policy is not a PBKV one).
    """

    def __init__(self, params, components):
        super().__init__(params, components)
        settings = getattr(self.eviction_strategy, "settings", None) or PluginSettings()
        policy = getattr(self.eviction_strategy, "engine_policy", None)
        # a policy that reads no scores (pbkv-lae) lets the predictor observe but never predict;
        # a policy with lifecycle hooks (pbkv) hears of requests and workflows through the book
        self.book = SGLangWorkflowBook(settings, predict=bool(getattr(policy, "uses_predictions", True)),
                                       policy=policy)

    def reset(self) -> None:
        """Rebuild the tree (flush); every node record is dropped first."""
        if getattr(self, "book", None) is not None and getattr(self, "_node_arena", None):
            for node in list(self._node_arena.values()):
                self.book.forget(node)
        super().reset()

    def _new_node(self, priority: int = 0) -> PBKVTreeNode:
        node = PBKVTreeNode(self.component_types, priority=priority)
        self._register_node(node)
        return node

    def _split_node(self, key, child, split_len):
        # A split is not an access: both halves keep the node's last access, as in the engine core
        # (SGLang's core stamps the suffix as just used, which would reorder LRU tie-breaks).
        last_access = child.last_access_time
        new_node, action = super()._split_node(key, child, split_len)
        child.last_access_time = new_node.last_access_time = last_access
        self.book.split(new_node, child)
        return new_node, action

    def _unregister_node(self, node) -> None:
        self.book.forget(node)
        super()._unregister_node(node)

    def path_to_root(self, node_id: Any) -> list[PBKVTreeNode]:
        """Nodes from ``node_id`` up to (excluding) the root; empty for the root or a gone node."""
        node = self._node_arena.get(node_id)
        out = []
        while node is not None and node is not self.root_node:
            out.append(node)
            node = node.parent
        return out


def make_tree_core(params, components) -> PBKVTreeCore:
    """Tree-core factory for ``register_tree_core_backend`` (signature of SGLang's registry)."""
    return PBKVTreeCore(params, components)
