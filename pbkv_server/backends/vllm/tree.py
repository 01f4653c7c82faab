"""vLLM's cached blocks as the tree nodes that the engine-core policies order.

vLLM keeps no radix tree: a cached block is found by the hash of its tokens chained with its
parent's hash, so every block has one parent block (the block before it in the request that cached
it) and a chain of blocks is a path from the root. :class:`BlockTree` records that parent link
and, per block, what an engine-core policy reads (:class:`~pbkv_server.engine.policies.base.NodeView`:
``tokens``, ``last_access``, ``sc``). One node per block: vLLM caches and frees whole blocks
(``block_size`` tokens on the GPU, an offloaded chunk on the CPU tier), the same granularity as
the engine core with one unit per block.

:meth:`BlockTree.order` is the victim order both PBKV tiers use: leaves first (a block that still
has a cached child is not a candidate, so a parent never leaves before its children and every
cached chain stays a prefix), lowest engine-core ``priority`` first on the GPU, lowest
``host_priority`` first on the CPU tier (the engine core's host drop order). Scores come from the
:class:`~pbkv_server.backends.book.WorkflowBook` (the engine core's score board); nothing here
is an eviction rule of its own. Imports no vLLM.
"""

from __future__ import annotations

import heapq
from typing import Any, Hashable, Iterable, Sequence

from pbkv_contract.hints import Hints
from pbkv_server.backends.book import WorkflowBook
from pbkv_server.engine.policies.base import EvictionOrder
from pbkv_server.engine.radix import DEVICE, HOST

__all__ = ["BlockNode", "BlockTree"]


class BlockNode:
    """One cached block (or offloaded chunk) as a policy node.

    Attributes:
        key: the block's id in its pool (GPU block id, or the CPU tier's ``OffloadKey``).
        tokens: KV tokens the block holds.
        last_access: tick of the latest request that used the block (larger = more recent).
        sc: the engine-core score record (:class:`~pbkv_server.engine.scoring.NodeScore`) or None.
        parent: key of the parent block, or None (first block of a prompt, or parent gone).
        children: keys of the cached blocks whose parent this is.
        tier: the engine core's tier of its pool (``DEVICE``: GPU blocks, ``HOST``: CPU chunks).
    """

    __slots__ = ("key", "tokens", "last_access", "sc", "parent", "children", "tier")

    def __init__(self, key: Hashable, tokens: int, parent: Hashable | None, tier: int = DEVICE) -> None:
        self.key = key
        self.tier = tier
        self.tokens = tokens
        self.last_access = 0.0
        self.sc = None
        self.parent = parent
        self.children: set = set()


class BlockTree:
    """Parent links, access ticks and score records of one pool's cached blocks.

    Args:
        book: the process's workflow book (scores, workflows).
        policy: the engine-core policy whose ``priority`` orders victims.
        tier: ``DEVICE`` (GPU pool: ``priority``) or ``HOST`` (CPU tier: ``host_priority``).
    """

    def __init__(self, book: WorkflowBook, policy: EvictionOrder, tier: int = DEVICE) -> None:
        self.book = book
        self.policy = policy
        self.tier = tier
        self._rank = policy.host_priority if tier == HOST else policy.priority
        self.nodes: dict[Hashable, BlockNode] = {}

    def __len__(self) -> int:
        return len(self.nodes)

    def get(self, key: Hashable) -> BlockNode | None:
        """The node of ``key``, or None."""
        return self.nodes.get(key)

    def add(self, key: Hashable, parent: Hashable | None, tokens: int) -> BlockNode:
        """The node of ``key``, made under ``parent`` if new (an existing node keeps its parent)."""
        node = self.nodes.get(key)
        if node is not None:
            return node
        if parent is not None and parent not in self.nodes:
            parent = None
        node = self.nodes[key] = BlockNode(key, tokens, parent, self.tier)
        if parent is not None:
            self.nodes[parent].children.add(key)
        return node

    def use(self, path: Sequence[BlockNode], hints: Hints | None, tick: float) -> None:
        """A request used ``path`` (root first): stamp ``tick`` on each node, and record
        ``hints.agent`` for ``hints.workflow_id`` on it (leaf first, as the book walks)."""
        for node in path:
            if node.last_access < tick:
                node.last_access = tick
        if hints is not None and path:
            self.book.touch(reversed(path), hints)

    def drop(self, key: Hashable) -> None:
        """``key`` left the cache: unlink it and forget its score record (children, if any, lose
        their parent link; they stay evictable)."""
        node = self.nodes.get(key)
        if node is None:
            return
        self.book.forget(node)  # the policy's on_drop sees it still linked, as in the engine core
        del self.nodes[key]
        if node.parent is not None:
            parent = self.nodes.get(node.parent)
            if parent is not None:
                parent.children.discard(key)
        for child in node.children:
            c = self.nodes.get(child)
            if c is not None:
                c.parent = None

    def rekey(self, old: Hashable, new: Hashable) -> None:
        """The cache entry of ``old`` now lives in ``new`` (vLLM ``move_block_hashes``)."""
        node = self.nodes.pop(old, None)
        if node is None:
            return
        node.key = new
        self.nodes[new] = node
        if node.parent is not None and node.parent in self.nodes:
            siblings = self.nodes[node.parent].children
            siblings.discard(old)
            siblings.add(new)
        for child in node.children:
            if child in self.nodes:
                self.nodes[child].parent = new

    def clear(self) -> None:
        """Forget every node (a prefix-cache reset)."""
        for node in self.nodes.values():
            self.book.forget(node)
        self.nodes.clear()

    def priority(self, node: BlockNode) -> tuple:
        """The engine-core policy's sort key of ``node`` on this tree's tier (lowest leaves first)."""
        return self._rank(node)

    def order(self, candidates: Iterable[Hashable], n: int) -> list[Hashable]:
        """The first ``n`` victims among ``candidates`` (evictable keys, oldest first).

        Leaves first: a candidate with a cached child that is not itself chosen earlier is not
        eligible; when its last child is chosen it becomes eligible with that child's place in
        the tie-break, so equal priorities leave a chain bottom-up before anything else. Ties
        between different leaves keep ``candidates``' order (vLLM's LRU queue). A candidate
        without a node (cached by a path PBKV did not see) ranks as an anonymous block last used
        at tick 0. If fewer than ``n`` leaves exist (a child held by a running request whose
        parent is a duplicate block), the rest come by priority alone, so an allocation vLLM can
        serve never fails here.

        Returns:
            At most ``n`` keys, in eviction order.
        """
        cands = list(candidates)
        if n <= 0 or not cands:
            return []
        index = {key: i for i, key in enumerate(cands)}
        nodes = self.nodes
        pending: dict[Hashable, int] = {}  # candidate -> cached children not yet chosen
        heap: list[tuple[tuple, int, Any]] = []
        for key in cands:
            node = nodes.get(key)
            if node is None:
                node = BlockNode(key, 0, None, self.tier)
            left = len(node.children)
            if left:
                pending[key] = left
            else:
                heap.append((self.priority(node), index[key], key))
        heapq.heapify(heap)
        chosen: list[Hashable] = []
        taken: set = set()
        while heap and len(chosen) < n:
            _, idx, key = heapq.heappop(heap)
            chosen.append(key)
            taken.add(key)
            node = nodes.get(key)
            parent = node.parent if node is not None else None
            if parent is not None and parent in pending:
                pending[parent] -= 1
                if pending[parent] == 0:
                    del pending[parent]
                    heapq.heappush(heap, (self.priority(nodes[parent]), idx, parent))
        if len(chosen) < n and pending:
            rest = sorted((self.priority(nodes[k]), index[k], k) for k in pending)
            chosen.extend(k for _, _, k in rest[: n - len(chosen)])
        return chosen
