"""Two-tier radix tree over cache-unit keys: the index of the engine core's prefix cache.

Each edge holds a run of unit keys (whole pages or blocks of the prompt, see
:mod:`~pbkv_server.engine.pages`) with their token counts; a node is the KV cache of that run and lives in exactly one tier, device
(GPU) or host. Invariants kept here:

- the device tier is prefix-closed: a device node's parent is on device (or is the root), so
  only nodes without device children can leave the device;
- a node is present only if its parent is, so only nodes without children can be dropped;
- ``device_tokens``/``host_tokens`` always equal the sums of their nodes' tokens;
- a node with ``lock > 0`` is on the path of a running request and is never moved or dropped.

The tree knows nothing about policies; the engine decides which node moves where.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Callable, Hashable, Iterator, NamedTuple, Sequence

if TYPE_CHECKING:  # scoring builds on nodes; the tree only carries the record
    from .scoring import NodeScore

__all__ = ["DEVICE", "HOST", "Node", "RadixTree", "Match"]

DEVICE = 0
HOST = 1

_ids = itertools.count(1)


class Node:
    """One radix-tree node: a run of blocks cached in one tier.

    Attributes:
        keys: block keys of the run (list, >= 1 entry except for the root).
        toks: tokens of each block (list, same length).
        tokens: sum of ``toks``.
        parent: parent node (``None`` for the root and for nodes that left the tree).
        children: first key of a child's run -> child.
        tier: :data:`DEVICE` or :data:`HOST`.
        lock: number of running requests whose path includes the node.
        last_access: engine time of the latest request that used the node, seconds.
        n_dev_children: children on the device tier.
        ver: version of the node's entry in an eviction heap (stale entries are skipped).
        pver: version of the node's entry in the prefetch heap.
        sc: the node's :class:`~pbkv_server.engine.scoring.NodeScore` (set by the cache; ``None``
            for the root and until the cache sets it).
        attached: False once the node was dropped from the tree.
        frag: the node stands for a chain of one-unit nodes (a ``unit_priority`` policy's
            eviction moved its units one at a time, :meth:`RadixTree.shift_units`): each boundary
            between its units is a node boundary of that chain, so a cut inside it is a
            :meth:`~RadixTree.split` that changes no order (the cache files nothing again). Never
            set for other policies.
    """

    __slots__ = ("id", "keys", "toks", "tokens", "parent", "children", "tier", "lock", "last_access",
                 "n_dev_children", "ver", "pver", "sc", "attached", "frag")

    def __init__(self, keys: list, toks: list, parent: "Node | None", tier: int, now: float,
                 tokens: int | None = None) -> None:
        self.id = next(_ids)
        self.keys = keys
        self.toks = toks
        self.tokens = sum(toks) if tokens is None else tokens  # tokens: their sum, when known
        self.parent = parent
        self.children: dict[Hashable, Node] = {}
        self.tier = tier
        self.lock = 0
        self.last_access = now
        self.n_dev_children = 0
        self.ver = 0
        self.pver = 0
        self.sc: NodeScore | None = None
        self.attached = True
        self.frag = False

    def __repr__(self) -> str:
        tier = "dev" if self.tier == DEVICE else "host"
        return f"Node#{self.id}({len(self.keys)} blocks, {self.tokens} tok, {tier}, lock={self.lock})"


class Match(NamedTuple):
    """Result of :meth:`RadixTree.match`: ``path``, the nodes covering ``blocks[:matched]`` from the
    root down (root excluded; device nodes first, then host nodes, since the device tier is
    prefix-closed), and ``matched``, the number of leading blocks found."""

    path: list[Node]
    matched: int


class RadixTree:
    """Prefix cache index with token accounting per tier.

    Args:
        on_split: called as ``on_split(top, bottom)`` after a node is cut in two; ``top`` is the
            new node holding the first part, ``bottom`` the existing node keeping the rest (so
            references to the deeper end of a path stay valid).
        path_keys: a key fixes every key before it in its prompt (``EngineConfig.path_keys``):
            :meth:`match` compares a node's last key, and bisects where a node diverges.
    """

    def __init__(self, on_split: Callable[[Node, Node], None] | None = None, path_keys: bool = False) -> None:
        self.root = Node([], [], None, DEVICE, 0.0)
        self.root.lock = 1  # the root is never evicted
        self.device_tokens = 0
        self.host_tokens = 0
        self.n_nodes = 0
        self._on_split = on_split
        self.path_keys = path_keys

    def match(self, blocks: Sequence[Hashable]) -> Match:
        """Longest cached prefix of ``blocks`` (either tier), splitting a node where it diverges.

        Args:
            blocks: block keys of a prompt, a ``list``.

        Returns:
            A :class:`Match` (``path``, ``matched``).
        """
        node, i, n, path = self.root, 0, len(blocks), []
        while i < n:
            child = node.children.get(blocks[i])
            if child is None:
                break
            keys = child.keys
            width = len(keys)
            if self.path_keys:
                # path keys: the node matches whole if its last key does, and the keys that match
                # are a prefix of it (its first does: the child was found by it)
                end = i + width
                if end <= n and keys[-1] == blocks[end - 1]:
                    path.append(child)
                    node = child
                    i = end
                    continue
                j, hi = 1, min(width, n - i)
                while j < hi:  # the first key that differs
                    mid = (j + hi) // 2
                    if keys[mid] == blocks[i + mid]:
                        j = mid + 1
                    else:
                        hi = mid
            else:
                if keys == blocks[i:i + width]:
                    path.append(child)
                    node = child
                    i += width
                    continue
                j, limit = 1, min(width, n - i)
                while j < limit and keys[j] == blocks[i + j]:
                    j += 1
            path.append(self.split(child, j))
            i += j
            break
        return Match(path, i)

    def insert(self, parent: Node, keys: list, toks: list, tier: int, now: float) -> Node:
        """Add a new leaf under ``parent`` holding ``keys`` (no child of ``parent`` may start with
        ``keys[0]``). Returns the node. The node keeps ``keys`` and ``toks`` as they are, its own
        from then on (:meth:`split` cuts them in place): pass lists the caller does not keep.

        Raises:
            ValueError: ``keys`` is empty, already present, or a device leaf under a host parent.
        """
        if not keys:
            raise ValueError("cannot insert an empty run of blocks")
        if keys[0] in parent.children:
            raise ValueError("a child starting with this block already exists")
        if tier == DEVICE and parent.tier != DEVICE:
            raise ValueError("device node under a host parent would break prefix closure")
        node = Node(keys, toks, parent, tier, now)
        parent.children[keys[0]] = node
        self.n_nodes += 1
        if tier == DEVICE:
            parent.n_dev_children += 1
            self.device_tokens += node.tokens
        else:
            self.host_tokens += node.tokens
        return node

    def split(self, node: Node, j: int) -> Node:
        """Cut ``node`` after its first ``j`` blocks (0 < j < len). Returns the new upper node (a
        cut of a :attr:`Node.frag` node leaves both parts ``frag``).

        O(the shorter part): the longer part keeps ``node``'s lists, cut in place (the tree owns
        a node's ``keys`` and ``toks``: :meth:`insert` takes lists nobody else changes or reads
        later). An eviction cuts a short tail off a node thousands of units long, again and
        again as it frees room a little at a time."""
        keys, toks = node.keys, node.toks
        if 2 * j > len(keys):  # the top is the longer part: it takes the lists, cut at j
            node.keys, node.toks = keys[j:], toks[j:]
            tail = sum(node.toks)
            del keys[j:], toks[j:]
            top = Node(keys, toks, node.parent, node.tier, node.last_access, node.tokens - tail)
            node.tokens = tail
        else:
            top = Node(keys[:j], toks[:j], node.parent, node.tier, node.last_access)
            node.keys, node.toks = keys[j:], toks[j:]
            node.tokens -= top.tokens
        top.lock = node.lock
        top.frag = node.frag
        top.children = {node.keys[0]: node}
        top.n_dev_children = 1 if node.tier == DEVICE else 0
        node.parent.children[top.keys[0]] = top
        node.parent = top
        self.n_nodes += 1
        if self._on_split is not None:
            self._on_split(top, node)
        return top

    def shift_units(self, node: Node, child: Node, units: int) -> int:
        """Move the last ``units`` units of ``node`` (0 < units < len) to the front of its only
        child ``child``, which becomes :attr:`Node.frag` (its units stand for one-unit nodes); ``child``
        may be on another tier (the units change tier with it). Returns the tokens moved.

        A ``unit_priority`` eviction uses it to move a run of units down to the host chain below
        them at once, where moving them one at a time would leave one node per unit."""
        # in place, as split() cuts (the tree owns a node's lists): the chain below grows by
        # a few units at a time to thousands, and a new list per shift copied all of it
        keys, toks = node.keys, node.toks
        moved_keys, moved_toks = keys[-units:], toks[-units:]
        del keys[-units:], toks[-units:]
        tokens = sum(moved_toks)
        node.tokens -= tokens
        del node.children[child.keys[0]]
        child.keys[:0] = moved_keys
        child.toks[:0] = moved_toks
        child.tokens += tokens
        child.frag = True
        node.children[moved_keys[0]] = child
        if node.tier != child.tier:
            if child.tier == DEVICE:
                self.host_tokens -= tokens
                self.device_tokens += tokens
            else:
                self.device_tokens -= tokens
                self.host_tokens += tokens
        return tokens

    def absorb(self, node: Node, child: Node) -> int:
        """Move every unit of ``node`` to the front of its only child ``child`` (as
        :meth:`shift_units`), which takes ``node``'s place under its parent; ``node`` leaves the
        tree. Returns the tokens moved."""
        parent, tokens = node.parent, node.tokens
        del parent.children[node.keys[0]]
        del node.children[child.keys[0]]
        child.keys[:0] = node.keys  # in place, as shift_units
        child.toks[:0] = node.toks
        child.tokens += tokens
        child.frag = True
        child.parent = parent
        parent.children[child.keys[0]] = child
        if node.tier != child.tier:
            dev = 1 if child.tier == DEVICE else -1
            parent.n_dev_children += dev
            self.device_tokens += dev * tokens
            self.host_tokens -= dev * tokens
        node.parent = None
        node.attached = False
        self.n_nodes -= 1
        return tokens

    def set_tier(self, node: Node, tier: int) -> None:
        """Move ``node`` to ``tier`` (the caller checks capacity and prefix closure)."""
        if node.tier == tier:
            return
        node.tier = tier
        if tier == DEVICE:
            self.host_tokens -= node.tokens
            self.device_tokens += node.tokens
            node.parent.n_dev_children += 1
        else:
            self.device_tokens -= node.tokens
            self.host_tokens += node.tokens
            node.parent.n_dev_children -= 1

    def remove(self, node: Node) -> None:
        """Drop a childless, unlocked node from the tree.

        Raises:
            ValueError: the node has children, is locked, or is the root.
        """
        if node.children or node.lock or node is self.root:
            raise ValueError(f"cannot drop {node!r}: it has children, is locked, or is the root")
        parent = node.parent
        del parent.children[node.keys[0]]
        if node.tier == DEVICE:
            parent.n_dev_children -= 1
            self.device_tokens -= node.tokens
        else:
            self.host_tokens -= node.tokens
        node.parent = None
        node.attached = False
        self.n_nodes -= 1

    def nodes(self) -> Iterator[Node]:
        """Every node except the root (depth-first; O(tree), for checks and tests)."""
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.children.values())
