"""The prefix cache's three lazy heaps: device victims, host victims, prefetch candidates.

Each heap holds entries ``(key, seq, ver, node)`` (the fields of :class:`HeapEntry`) ordered by
``(key, seq)``: ``key`` is the policy's
priority tuple (victims: smallest leaves first) or the negated prefetch value (candidates: largest
value first), and ``seq`` is a global insertion counter that breaks ties in insertion order (so two
nodes of equal priority leave oldest entry first, and the node itself is never compared). Deletion
is lazy: re-filing a node bumps its version (``Node.ver`` for the victim heaps, ``Node.pver`` for
the prefetch heap) and pushes a fresh entry; an entry whose version, tier, lock or children no
longer match is dropped when it reaches the top (:meth:`EvictionHeaps.peek_device` and siblings),
outdated entries on top of a heap are also popped by the re-filing that pushes to it
(:meth:`EvictionHeaps.refile`), and a heap is rebuilt from its valid entries once its stale
entries may outnumber (:data:`STALE_RATIO`) the valid ones it held at its last rebuild (amortised
O(1) per push).

Why both: stale entries that rank between two successive victims are all popped by the eviction
call that takes the second, so the stale entries a heap may hold bound the work of one eviction
call (``benchmarks/eviction_scaling.py --host`` shows the outlier a looser bound gave), and the
old entries of the nodes a new prediction moves off the top would otherwise all wait there for
the next eviction. Why neither, nor when a rebuild runs, changes a decision: an entry that is
invalid now stays invalid (every change that would make its node a candidate again, an unlock, a
tier move, the last device child or host child leaving, a split, re-files the node and so moves
its version on), so dropping it early or late pops the valid entries in the same ``(key, seq)``
order.

An entry is a plain tuple with the fields of :class:`HeapEntry`, read by the named indices
:data:`KEY`, :data:`SEQ`, :data:`VER`, :data:`NODE`: CPython builds and indexes an exact tuple
several times faster than a ``NamedTuple`` subclass, and every re-filing builds one, so the
``NamedTuple`` is the entry's documented layout rather than its runtime type. Entries never leave
this module: callers get nodes (:meth:`EvictionHeaps.peek_device`, :meth:`EvictionHeaps.take_prefetch`).

The heaps know the policy only through the three orders they file by (``priority``,
``host_priority``, ``prefetch_value``); what leaves, and when, is the cache's
(:class:`~pbkv_server.engine.cache.PrefixCache`).

**Groups.** A policy whose priority is a rank shared by many nodes followed by each node's own
key (``kvflow-shipped``: the eviction pass of the node's agents, then its creation order) may
name the node's group (``Policy.group``). Its victims are then filed in the group's own heap by
their own key, and the tier's heap holds one entry per group, keyed ``rank + best own key`` with
the best entry's ``seq``. A rank change re-files the group's one entry (:meth:`EvictionHeaps.regroup`),
not its nodes: O(log n) where re-filing every node of the group was O(group). Pops are those of
one heap of all nodes: a group's entry is a lower bound of its best valid node (entries only go
stale), and is brought up to date when it reaches the top.
"""

from __future__ import annotations

import heapq
import itertools
from typing import TYPE_CHECKING, Callable, Iterator, NamedTuple, Sequence

from .radix import DEVICE, HOST, Node

if TYPE_CHECKING:
    from .policies.base import Policy

__all__ = ["HeapEntry", "EvictionHeaps", "device_valid", "host_valid", "prefetch_valid", "KEY", "SEQ", "VER", "NODE"]

#: Indices of an entry's fields (the order of :class:`HeapEntry`).
KEY, SEQ, VER, NODE = 0, 1, 2, 3

_push = heapq.heappush
_pop = heapq.heappop
_replace = heapq.heapreplace

#: A heap is rebuilt once it may hold more stale entries than this fraction of the valid entries
#: it held at its last rebuild, plus :data:`STALE_SLACK` (module docstring: why it is bounded).
#: A smaller fraction rebuilds more often for little gain once refile pops outdated tops.
STALE_RATIO = 1.0
#: Stale entries always allowed (a small heap is not rebuilt at every push).
STALE_SLACK = 1024


class HeapEntry(NamedTuple):
    """Layout of one lazy-heap entry (held as a plain tuple of these fields, module docstring);
    compared as a tuple, ``key`` then ``seq``, never the node.

    Attributes:
        key: victim heaps: the policy's priority tuple (smallest leaves first); prefetch heap:
            ``-prefetch_value`` (largest value first).
        seq: global insertion counter, the tie-breaker (earlier entry first).
        ver: the node's ``ver`` (victim heaps) or ``pver`` (prefetch heap) when filed; the entry
            is stale once the node's counter moved on.
        node: the node filed.
    """

    key: tuple | float
    seq: int
    ver: int
    node: Node


def device_valid(entry: tuple) -> bool:
    """The entry is current and its node may leave the device now (unlocked, no device child)."""
    node = entry[NODE]
    return (entry[VER] == node.ver and node.attached and node.tier == DEVICE and node.lock == 0
            and node.n_dev_children == 0)


def host_valid(entry: tuple) -> bool:
    """The entry is current and its node may be dropped from the host now (unlocked leaf)."""
    node = entry[NODE]
    return entry[VER] == node.ver and node.attached and node.tier == HOST and node.lock == 0 and not node.children


def prefetch_valid(entry: tuple) -> bool:
    """The entry is current and its node may be loaded now (unlocked host node, parent on device)."""
    node = entry[NODE]
    return (entry[VER] == node.pver and node.attached and node.tier == HOST and node.lock == 0
            and node.parent.tier == DEVICE)


class _Group:
    """One group's victims on one tier (module docstring, "Groups").

    Attributes:
        rank: the group's rank (``Policy.group_rank``), leading its nodes' priorities.
        heap: entries ``(own key, seq, ver, node)`` of its nodes.
        best: ``(own key, seq)`` of the entry the tier heap's current entry was made from, or
            ``None`` (no entry: the group had no valid node when last looked at).
        ver: version of the group's current entry in the tier heap (older ones are stale).
        limit: length of ``heap`` that triggers its rebuild.
    """

    __slots__ = ("rank", "heap", "best", "ver", "limit")
    attached = True  # read like a node's by the tier heap's inline check of outdated tops

    def __init__(self, rank: tuple) -> None:
        self.rank = rank
        self.heap: list[tuple] = []
        self.best: tuple | None = None
        self.ver = 0
        self.limit = _rebuild_at(0)


def _top_valid(valid: Callable[[tuple], bool]) -> Callable[[tuple], bool]:
    """Validity of a tier-heap entry that may be a group's (current while its version is)."""

    def check(entry: tuple) -> bool:
        item = entry[NODE]
        return entry[VER] == item.ver if item.__class__ is _Group else valid(entry)

    return check


_top_device_valid = _top_valid(device_valid)
_top_host_valid = _top_valid(host_valid)


class EvictionHeaps:
    """Device-victim, host-victim and prefetch-candidate heaps of one cache, filed by one policy.

    Args:
        policy: the policy whose orders the heaps keep.
        prefetches: keep the prefetch heap (the policy prefetches); otherwise it stays empty.
        grouped: the policy groups its victims (it overrides ``Policy.group``; module
            docstring, "Groups"); its ``host_priority`` is its ``priority``.

    Attributes:
        device, host, prefetch: the heaps (lists of entry tuples, heap-ordered; read with
            :data:`KEY`...:data:`NODE`), read only in this module: the cache asks for nodes
            (:meth:`peek_device`, :meth:`peek_host`...) and leaves a taken victim's entry to go
            stale (its tier moves, it is dropped, or :meth:`withdraw`).
    """

    __slots__ = ("device", "host", "prefetch", "_seq", "_policy", "_prefetches", "_taken", "_pf_held",
                 "_dev_limit", "_host_limit", "_pf_limit", "_grouped", "_dev_groups", "_host_groups")

    def __init__(self, policy: "Policy", prefetches: bool, grouped: bool = False) -> None:
        self.device: list[tuple] = []
        self.host: list[tuple] = []
        self.prefetch: list[tuple] = []
        self._seq = itertools.count()
        self._policy = policy
        self._prefetches = prefetches
        self._taken: list[tuple] = []  # entries of the candidates a prefetch round holds, in order
        self._pf_held: list[tuple] | None = None  # prefetch entries filed while held (hold_prefetch)
        # each heap's length that triggers its next rebuild (_rebuild_at of its last valid count)
        self._dev_limit = self._host_limit = self._pf_limit = _rebuild_at(0)
        self._grouped = grouped
        self._dev_groups: dict = {}  # group -> _Group of its device victims
        self._host_groups: dict = {}  # group -> _Group of its host victims

    def refile(self, node: Node) -> None:
        """File ``node`` again under its current priority (and prefetch value), invalidating its
        older entries; a node that cannot leave its tier now gets no victim entry. O(log n)
        amortised.

        Outdated entries on top of the heap pushed to (re-filed since, or out of the tree: they
        can never be valid again) are popped here, by the re-filing that outdated them, rather
        than all at once by the next eviction: a new prediction re-files the nodes that ranked
        first, and their old entries sit on top. (The check on top is inline, not a helper: this
        runs at every re-filing.)"""
        if not node.attached or node.parent is None:
            return
        if node.tier == DEVICE:
            if node.lock == 0 and node.n_dev_children == 0:
                node.ver = ver = node.ver + 1
                heap = self.device
                entry = (self._policy.priority(node), next(self._seq), ver, node)
                if heap:
                    # an invalid top takes the new entry's place in one sift, instead of a push
                    # now and a pop by the next peek (an invalid entry stays invalid: the module
                    # docstring). The usual case: the victim an eviction just moved, whose
                    # parent, a device leaf now, is re-filed next (device_valid, inline)
                    top = heap[0][NODE]
                    if (heap[0][VER] != top.ver or not top.attached or top.tier != DEVICE or top.lock
                            or top.n_dev_children):
                        n = len(heap)
                        if (n < 2 or entry < heap[1]) and (n < 3 or entry < heap[2]):
                            heap[0] = entry  # before both children: the heap holds (the next victim)
                        else:
                            _replace(heap, entry)
                    else:
                        _push(heap, entry)
                else:
                    _push(heap, entry)
                top = heap[0]  # the entry just filed is current: the loop stops there at the latest
                while top[VER] != top[NODE].ver or not top[NODE].attached:
                    _pop(heap)
                    top = heap[0]
                if len(heap) > self._dev_limit:
                    self.device = heap = _compact(heap, device_valid)
                    self._dev_limit = _rebuild_at(len(heap))
        else:
            if node.lock == 0 and not node.children:
                node.ver += 1
                heap = self.host
                _push(heap, (self._policy.host_priority(node), next(self._seq), node.ver, node))
                top = heap[0]  # the entry just pushed is current: the loop stops there at the latest
                while top[VER] != top[NODE].ver or not top[NODE].attached:
                    _pop(heap)
                    top = heap[0]
                if len(heap) > self._host_limit:
                    self.host = heap = _compact(heap, host_valid)
                    self._host_limit = _rebuild_at(len(heap))
            if self._prefetches and node.parent.tier == DEVICE:
                value = self._policy.prefetch_value(node)
                node.pver += 1  # invalidates an entry holding an outdated (maybe now zero) value
                if value > 0:
                    held = self._pf_held
                    if held is not None:  # pushed by release_prefetch if still valid
                        held.append((-value, next(self._seq), node.pver, node))
                        return
                    heap = self.prefetch
                    _push(heap, (-value, next(self._seq), node.pver, node))
                    top = heap[0]  # the entry just pushed is current: the loop stops there at the latest
                    while top[VER] != top[NODE].pver or not top[NODE].attached:
                        _pop(heap)
                        top = heap[0]
                    if len(heap) > self._pf_limit:
                        self.prefetch = heap = _compact(heap, prefetch_valid)
                        self._pf_limit = _rebuild_at(len(heap))

    def hold_prefetch(self) -> bool:
        """Hold the prefetch entries :meth:`refile` files from now on, unpushed, until
        :meth:`release_prefetch`; False (nothing changes) if they are held already.

        For a caller that reads no prefetch entry meanwhile (a device eviction,
        ``Eviction.evict_device``): an entry's place is its ``(key, seq)``, drawn when it is
        filed, so pushed later it ranks as it would have; and one that went invalid meanwhile
        stays invalid (module docstring), so it is never pushed. On a conversation's path walked
        up by eviction, each moved victim's entry goes invalid when its parent, the next victim,
        leaves the device: pushed, it would only have been popped unread."""
        if self._pf_held is not None:
            return False
        self._pf_held = []
        return True

    def release_prefetch(self) -> None:
        """Push the entries held since :meth:`hold_prefetch` that are still valid; stop holding."""
        held, self._pf_held = self._pf_held, None
        heap = self.prefetch
        pushed = False
        for entry in held:
            if prefetch_valid(entry):
                _push(heap, entry)
                pushed = True
        if pushed:
            top = heap[0]  # as refile: outdated entries on top go now (a current one stops the loop)
            while top[VER] != top[NODE].pver or not top[NODE].attached:
                _pop(heap)
                top = heap[0]
            if len(heap) > self._pf_limit:
                self.prefetch = _compact(heap, prefetch_valid)
                self._pf_limit = _rebuild_at(len(self.prefetch))

    def refile_grouped(self, node: Node) -> None:
        """:meth:`refile` for a policy that groups its victims (module docstring, "Groups"; the
        cache binds one or the other, so the plain one pays nothing for groups)."""
        if not node.attached or node.parent is None:
            return
        if node.tier == DEVICE:
            if node.lock == 0 and node.n_dev_children == 0:
                node.ver += 1
                group = self._policy.group(node)
                if group is not None:
                    self._file_in_group(node, group, True)
                    return
                heap = self.device
                _push(heap, (self._policy.priority(node), next(self._seq), node.ver, node))
                top = heap[0]  # the entry just pushed is current: the loop stops there at the latest
                while top[VER] != top[NODE].ver or not top[NODE].attached:
                    _pop(heap)
                    top = heap[0]
                if len(heap) > self._dev_limit:
                    self.device = heap = _compact(heap, _top_device_valid)
                    self._dev_limit = _rebuild_at(len(heap))
        else:
            if node.lock == 0 and not node.children:
                node.ver += 1
                group = self._policy.group(node)
                if group is not None:
                    self._file_in_group(node, group, False)
                else:
                    heap = self.host
                    _push(heap, (self._policy.host_priority(node), next(self._seq), node.ver, node))
                    top = heap[0]  # the entry just pushed is current: the loop stops there at the latest
                    while top[VER] != top[NODE].ver or not top[NODE].attached:
                        _pop(heap)
                        top = heap[0]
                    if len(heap) > self._host_limit:
                        self.host = heap = _compact(heap, _top_host_valid)
                        self._host_limit = _rebuild_at(len(heap))
            if self._prefetches and node.parent.tier == DEVICE:
                value = self._policy.prefetch_value(node)
                node.pver += 1  # invalidates an entry holding an outdated (maybe now zero) value
                if value > 0:
                    heap = self.prefetch
                    _push(heap, (-value, next(self._seq), node.pver, node))
                    top = heap[0]  # the entry just pushed is current: the loop stops there at the latest
                    while top[VER] != top[NODE].pver or not top[NODE].attached:
                        _pop(heap)
                        top = heap[0]
                    if len(heap) > self._pf_limit:
                        self.prefetch = heap = _compact(heap, prefetch_valid)
                        self._pf_limit = _rebuild_at(len(heap))

    def clear_victims(self) -> None:
        """Forget every victim entry (the policy's order changed: the caller re-files every node)."""
        self.device, self.host = [], []
        self._dev_limit = self._host_limit = _rebuild_at(0)
        self._dev_groups.clear()
        self._host_groups.clear()

    def regroup(self, group) -> None:
        """The rank of ``group`` changed (``Policy.group_rank``): file its one entry per tier again
        under the new rank. O(log n), whatever the group's size."""
        for groups, device in ((self._dev_groups, True), (self._host_groups, False)):
            g = groups.get(group)
            if g is not None:
                g.rank = self._policy.group_rank(group)
                if g.best is not None:
                    g.ver += 1
                    self._push_group(g, device)

    # ---------------------------------------------------------------- groups (module docstring)
    def _file_in_group(self, node: Node, group, device: bool) -> None:
        """File ``node`` (its version already moved on) in ``group``'s heap on its tier, and give
        the group a new tier entry if the node is now its best."""
        groups = self._dev_groups if device else self._host_groups
        g = groups.get(group)
        if g is None:
            g = groups[group] = _Group(self._policy.group_rank(group))
        own = self._policy.node_key(node)
        seq = next(self._seq)
        heap = g.heap
        _push(heap, (own, seq, node.ver, node))
        if len(heap) > g.limit:
            g.heap = heap = _compact(heap, device_valid if device else host_valid)
            g.limit = _rebuild_at(len(heap))
        best = g.best
        if best is None or (own, seq) < best:
            g.best = (own, seq)
            g.ver += 1
            self._push_group(g, device)

    def _push_group(self, g: _Group, device: bool) -> None:
        """Push ``g``'s current entry (``rank + best own key``, the best's seq) to its tier heap."""
        heap = self.device if device else self.host
        own, seq = g.best
        _push(heap, (g.rank + own, seq, g.ver, g))
        top = heap[0]  # the entry just pushed is current: the loop stops there at the latest
        while top[VER] != top[NODE].ver or not top[NODE].attached:
            _pop(heap)
            top = heap[0]
        if device and len(heap) > self._dev_limit:
            self.device = heap = _compact(heap, _top_device_valid)
            self._dev_limit = _rebuild_at(len(heap))
        elif not device and len(heap) > self._host_limit:
            self.host = heap = _compact(heap, _top_host_valid)
            self._host_limit = _rebuild_at(len(heap))

    def _peek_grouped(self, device: bool) -> tuple | None:
        """``(key, node)`` of the best valid victim of a tier whose heap holds group entries."""
        valid = device_valid if device else host_valid
        while True:
            heap = self.device if device else self.host  # read afresh: a push below may rebuild it
            if not heap:
                return None
            entry = heap[0]
            item = entry[NODE]
            if item.__class__ is not _Group:
                if valid(entry):
                    return entry[KEY], item
                _pop(heap)
                continue
            if entry[VER] != item.ver:
                _pop(heap)
                continue
            sub = item.heap
            while sub and not valid(sub[0]):
                _pop(sub)
            _pop(heap)  # the group's entry is re-made below unless it is current
            if not sub:
                item.best = None
                item.ver += 1
                continue
            top = sub[0]
            if (top[KEY], top[SEQ]) == item.best:
                _push(heap, entry)  # current: put it back (it is the smallest, so back on top)
                return entry[KEY], top[NODE]
            item.best = (top[KEY], top[SEQ])
            item.ver += 1
            self._push_group(item, device)

    # The peeks repeat the lazy-deletion loop inline rather than share a helper: they run once per
    # victim taken, and a shared helper would add a call to every eviction.
    def peek_device(self) -> Node | None:
        """The node of the best valid device-victim entry (stale entries above it are dropped)."""
        if self._grouped:
            found = self._peek_grouped(True)
            return found[1] if found is not None else None
        heap = self.device
        while heap:
            if device_valid(heap[0]):
                return heap[0][NODE]
            heapq.heappop(heap)
        return None

    def peek_host(self) -> Node | None:
        """The node of the best valid host-victim entry, not removed (stale entries above it are
        dropped), or ``None`` when the host has no victim."""
        if self._grouped:
            found = self._peek_grouped(False)
            return found[1] if found is not None else None
        heap = self.host
        while heap:
            if host_valid(heap[0]):
                return heap[0][NODE]
            heapq.heappop(heap)
        return None

    def next_after(self, node: Node, device: bool) -> tuple | None:
        """The key that must rank strictly after ``node``'s for ``node`` to be a tier's next victim
        again once re-filed (a fresh entry ranks after every entry of an equal key): the best
        valid key of the other victims when ``node`` is the best one now, else the best key
        (which ``node``'s does not beat); ``None`` when no other victim is filed. Not for grouped
        heaps (a ``unit_priority`` eviction asks it, ``eviction.py``)."""
        valid = device_valid if device else host_valid
        heap = self.device if device else self.host
        while heap and not valid(heap[0]):
            _pop(heap)
        if not heap:
            return None
        if heap[0][NODE] is not node:
            return heap[0][KEY]
        entry = _pop(heap)
        while heap and not valid(heap[0]):
            _pop(heap)
        key = heap[0][KEY] if heap else None
        _push(heap, entry)  # back in its place: the same (key, seq)
        return key

    @staticmethod
    def filing(node: Node) -> int:
        """The version of ``node``'s current victim entry: it changes whenever the node is re-filed
        (a caller that let a policy act compares it to learn whether the node moved)."""
        return node.ver

    @staticmethod
    def withdraw(node: Node) -> None:
        """Make ``node``'s victim entries stale: it is not a victim until re-filed (a victim the
        cache could not evict now)."""
        node.ver += 1

    def peek_host_key(self) -> tuple | None:
        """The priority of the best valid host victim, not removed (stale entries above it are
        dropped), or ``None`` when the host has no victim."""
        if self._grouped:
            found = self._peek_grouped(False)
            return found[0] if found is not None else None
        heap = self.host
        while heap:
            if host_valid(heap[0]):
                return heap[0][KEY]
            heapq.heappop(heap)
        return None

    def peek_prefetch(self) -> Node | None:
        """The node of the best valid prefetch entry (stale entries above it are dropped)."""
        heap = self.prefetch
        while heap:
            if prefetch_valid(heap[0]):
                return heap[0][NODE]
            heapq.heappop(heap)
        return None

    def take_prefetch(self) -> Node | None:
        """Remove the best valid prefetch candidate and return its node, or ``None``. Its entry is
        kept aside until :meth:`return_prefetch` (a prefetch round takes candidates one by one,
        then hands back the ones it did not load, which keep their place in the order)."""
        heap = self.prefetch
        while heap:
            if prefetch_valid(heap[0]):
                entry = heapq.heappop(heap)
                self._taken.append(entry)
                return entry[NODE]
            heapq.heappop(heap)
        return None

    def take_prefetches(self) -> Iterator[Node]:
        """:meth:`take_prefetch` as an iterator, until no valid candidate is left: a prefetch
        round's candidates. (A generator, with the validity check inline: a round takes every
        candidate in turn, most of them to skip and hand back, and resuming a generator costs
        less than a method call.)"""
        keep = self._taken.append
        while True:
            heap = self.prefetch  # read afresh: a load's re-filing may have rebuilt it
            while heap:
                entry = heap[0]
                node = entry[NODE]
                if (entry[VER] == node.pver and node.attached and node.tier == HOST and node.lock == 0
                        and node.parent.tier == DEVICE):  # prefetch_valid(entry)
                    break
                _pop(heap)
            else:
                return
            _pop(heap)
            keep(entry)
            yield node

    def return_prefetch(self, unused: Sequence[Node]) -> None:
        """End a round of :meth:`take_prefetch`: put back the entries of the ``unused`` nodes (a
        subsequence of the nodes taken, in the order taken) and forget the others' (loaded)."""
        taken = iter(self._taken)
        for node in unused:
            for entry in taken:
                if entry[NODE] is node:
                    _push(self.prefetch, entry)  # still valid if its node is unchanged
                    break
        self._taken.clear()


def _rebuild_at(valid: int) -> int:
    """Heap length at which a heap rebuilt with ``valid`` entries is rebuilt again: after at least
    ``STALE_RATIO * valid + STALE_SLACK`` more pushes, so a rebuild (O(length)) costs O(1 /
    STALE_RATIO) per push, and the heap holds at most that many entries beyond ``valid``."""
    return valid + int(STALE_RATIO * valid) + STALE_SLACK


def _compact(heap: list, valid: Callable[[tuple], bool]) -> list:
    kept = [e for e in heap if valid(e)]
    heapq.heapify(kept)
    return kept
