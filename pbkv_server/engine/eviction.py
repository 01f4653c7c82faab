"""Eviction for :class:`~pbkv_server.engine.cache.PrefixCache`: victims in policy order, tier moves, drops.

Split from ``cache.py`` by job (one file, one job): this mixin holds how the cache frees device
and host room, and :class:`PrefixCache` (which inherits it) holds admission, release, loading and
the accounting. The rules it keeps are stated in ``cache.py``'s module docstring: whole units only,
no more of a node than needed (:meth:`Eviction._split_tail`), a freed part moves to the host when
the host can make room and is dropped otherwise, and locked, held or kept nodes never move.

The mixin keeps no state of its own; it works on the cache's: ``tree``, ``heaps``, ``policy``,
``board``, ``stats``, ``hooks``, ``host_capacity``, ``latency_clock``, ``_pins``, ``_per_unit``, ``_unit_runs``,
``_selective_host``, ``_condemned``, ``_refile`` and the method ``peek_victim``
(see :class:`PrefixCache`'s attributes). It has no constructor.
"""

from __future__ import annotations

from bisect import bisect_left
from itertools import accumulate, compress, count, repeat
from operator import ge
from typing import TYPE_CHECKING, Callable

from .radix import DEVICE, HOST, Node

if TYPE_CHECKING:  # names for the annotations below; the cache supplies them at run time
    from .heaps import EvictionHeaps
    from .policies.base import Lifecycle, Pins, Policy
    from .radix import RadixTree
    from .scoring import ScoreBoard
    from .types import EngineStats

__all__ = ["Eviction"]


class Eviction:
    """The eviction primitives of :class:`~pbkv_server.engine.cache.PrefixCache` (a mixin: see the module)."""

    # what this mixin reads of the cache (declared for readers and type checkers; set by PrefixCache)
    tree: RadixTree
    heaps: EvictionHeaps
    policy: Policy
    board: ScoreBoard
    stats: EngineStats
    hooks: Lifecycle
    host_capacity: int
    latency_clock: Callable[[], float]
    _pins: Pins | None
    _per_unit: bool
    _unit_runs: bool
    _selective_host: bool
    _condemned: dict[Node, None]
    _cutting: Node | None
    _refile: Callable[[Node], None]
    peek_victim: Callable[[], Node | None]

    def evict_device(self, tokens: int, limit: Callable[[Node, int], bool] | None = None) -> int:
        """Evict device nodes in policy order until ``tokens`` are freed.

        Args:
            tokens: tokens to free.
            limit: optional ``limit(node, tokens) -> bool``, asked before ``tokens`` of ``node``
                (its tail, or all of it) would leave; eviction stops at the first refusal
                (prefetch uses it to spare active cache).

        Returns:
            Tokens freed (may be less than asked when nothing else is evictable); a victim larger
            than what is still needed gives only its tail, in whole units.
        """
        t0 = self.latency_clock()
        # nothing reads the prefetch heap during an eviction: the entries it files wait (the
        # entry of a victim moved to the host goes invalid once its parent follows it)
        holds = self.heaps.hold_prefetch()
        try:
            freed = self._evict_loop(tokens, limit)
        finally:
            if holds:
                self.heaps.release_prefetch()
        self.stats.eviction_decision_s.append(self.latency_clock() - t0)
        return freed

    def _evict_loop(self, tokens: int, limit: Callable[[Node, int], bool] | None) -> int:
        """:meth:`evict_device`'s victims, taken in order."""
        freed = 0
        blocked: list[Node] = []
        # a policy whose priority differs between the units of one node (its last unit decides)
        # takes one unit at a time, so that the rest of the node is ranked again
        per_unit = self._per_unit
        runs = self._unit_runs and limit is None
        pins = self._pins
        peek, evict = self.peek_victim, self._evict
        while freed < tokens:
            node = peek()
            if pins is not None and node is not None:
                expired = pins.expire()
                if pins.holds(node):
                    break  # held nodes rank last: everything left is held
                if expired:
                    continue  # holds ended and their nodes were re-filed: the order may be new
            need = min(tokens - freed, node.toks[-1]) if per_unit and node is not None else tokens - freed
            if node is None or (limit is not None and not limit(node, self._tail_tokens(node, need))):
                break
            if runs:
                got = self._evict_run(node, tokens - freed)
                if got:
                    freed += got
                    continue
            # the victim's entry goes stale below (tier move, drop, or withdraw): no pop needed
            if need <= node.tokens - node.toks[0]:  # else needed whole (_tail_units): no cut, no call
                node = self._split_tail(node, need)
            if evict(node):
                freed += node.tokens
            else:  # a pinned host node hangs below and the host tier is full: it stays for now
                self.heaps.withdraw(node)  # out of the heap until re-filed below
                blocked.append(node)
        for node in blocked:
            self._refile(node)
        return freed

    def _evict_run(self, top: Node, tokens: int) -> int:
        """Take, at once, the units of device victim ``top`` that one-unit eviction would take in
        a row, up to ``tokens``, when its only child is a host node (the chain they would join).
        Returns tokens freed (0: nothing taken, the caller takes one unit).

        One unit at a time (``unit_priority``), the victim's last unit goes to the host, the rest
        is filed again with a fresh entry and is the next victim while its new priority ranks
        strictly before every other victim's (``EvictionHeaps.next_after``: an equal key filed
        earlier goes first). Each unit becomes a one-unit host node above the chain, the host
        making room for it in its own order, in which the chain competes. Here the run is found
        first, the host makes room for all of it, dropping its victims in the same order until
        the chain would be next, and the units that fit join the chain's node (a
        :attr:`~pbkv_server.engine.radix.Node.frag` node): the same tiers, drops, counts and order
        of entries, without a node and a refiling per unit. Units that do not fit are left to the
        caller's loop, one at a time."""
        if not top.children:
            # no tier below to join: without a host tier each unit is dropped as it goes
            return 0 if self.host_capacity else self._drop_run(top, tokens)
        # units that go join the chain, so nothing else may hang below them: its only child
        if len(top.children) != 1:
            return 0
        chain = next(iter(top.children.values()))
        if chain.tier != HOST:
            return 0
        toks = top.toks
        free = self.host_capacity - self.tree.host_tokens
        if free < toks[-1] and len(chain.toks) == 1:
            # a full host whose next victim is the chain's only unit takes none of the run: the
            # host's room stops at that unit (_evict_host's keep) and not even the run's last
            # unit fits, so the caller moves one unit (which drops that one). Asked first: a
            # memory-short replay passes most of a long victim through the host this way, unit
            # by unit, and the run's count and sums below cost O(units of top) each time
            self.policy.settle()  # as _evict_host does before it reads the host heap
            if self.heaps.peek_host() is chain:
                return self._pass_run(top, chain, tokens, free)
        after = self.heaps.next_after(top, True)
        n = len(toks)
        m = _rest_first(toks, n, tokens, self.policy.priority_at, top, after)
        got = sum(toks[n - m:])
        if got > free:
            # the chain competes in the host order as it would unit by unit (its deepest units
            # go first, the run's join its top), up to its last unit: dropping it all would start
            # a new chain, filed afresh, which the steps one unit at a time below reproduce
            self._evict_host(got - free, keep=chain)
            chain = next(iter(top.children.values()))  # its rest, when its tail was dropped
            free = self.host_capacity - self.tree.host_tokens
            if got > free:  # the rest goes one unit at a time
                run, m, got = m, 0, 0
                while m < run and got + toks[n - 1 - m] <= free:
                    got += toks[n - 1 - m]
                    m += 1
                if m == 0:
                    return 0
        self._count_units(m, got)  # one eviction per unit, as one-unit eviction counts them
        if m == n:  # all of top goes, as its last unit alone would: the chain takes its place
            parent = top.parent
            self.hooks.on_drop(top)  # the node leaves for good (its units stay, in the chain)
            self._condemned.pop(top, None)
            if top.sc is not None:
                self.board.forget(top.sc)
            self.tree.absorb(top, chain)
            self._refile(parent)
            return got
        self.tree.shift_units(top, chain, m)
        self.hooks.on_split(top, chain)  # top ends at a new unit (as the cut of a unit would tell)
        if not top.frag:  # cut for real, as in _split_tail
            self._condemned[top] = None
        self._refile(top)
        return got

    def _pass_run(self, top: Node, chain: Node, tokens: int, free: int) -> int:
        """Take, at once, the units of device victim ``top`` that a full host passes through one
        at a time, up to ``tokens``: ``chain``, ``top``'s only child, is a one-unit host leaf and
        the host's next victim, and the host's room (``free``) is short of ``top``'s last unit.
        Returns tokens freed (0: fewer than two such steps, the caller takes one unit).

        One step (:meth:`evict_device`'s one-unit path, :meth:`_evict_run` taking nothing): the
        last unit of ``top`` is cut off, the host drops its next victim (the one-unit leaf) to
        make room, the unit moves to the host in its place and the rest is filed again. The
        steps go on while the rest ranks strictly first on the device and the unit just moved
        strictly first on the host (fresh entries: an equal key filed earlier goes first), and
        the dropped unit makes room for the next one. Here the steps are counted first, then done
        at once: the first ``k - 1`` units are dropped, the ``k``-th stays on the host above the
        rest, with the same tiers, drops, counts, next uses and order of entries, without a
        split, a drop and four re-filings per unit (an ``opt`` replay with a host tier passed
        ~190k units of long prompts through a full host this way)."""
        toks = top.toks
        n = len(toks)
        if n < 3 or self._selective_host:
            return 0
        cap = self.host_capacity
        unit = toks[-1]
        if cap < unit or free + chain.tokens < unit:
            return 0
        left = tokens - unit
        free += chain.tokens - unit
        k = 1  # steps the tokens allow: the rest holds n - k units, the host leaf unit n - k + 1
        while k < n - 1 and left > 0:
            unit, moved = toks[n - k - 1], toks[n - k]
            if free >= unit or cap < unit or free + moved < unit:
                break
            left -= unit
            free += moved - unit
            k += 1
        if k < 2:
            return 0
        policy, heaps = self.policy, self.heaps
        at, host_at = policy.priority_at, policy.host_priority_at
        dev_after = heaps.next_after(top, True)  # the other victims do not change in the steps
        host_after = heaps.next_after(chain, False)

        def first(j: int) -> bool:
            """After ``j`` steps the rest ranks first on the device and the unit moved last on
            the host (top, cut to its last unit, is the first one moved)."""
            host_key = policy.host_priority(top) if j == 1 else host_at(top, n - j + 1)
            return ((dev_after is None or at(top, n - j) < dev_after)
                    and (host_after is None or host_key < host_after))

        # a shorter rest never ranks earlier, and a unit higher up never later on the host
        # (Policy.priority_at): first(j) holds up to some j and for none past it, so the steps
        # are found as _rest_first finds a run, O(log steps) priorities, not two per unit
        if not first(k - 1):
            lo, j = 1, 1  # first(j) for every j < lo; not first(k - 1)
            while j < k - 1 and first(j):
                lo, j = j + 1, 2 * j + 1
            hi = min(j, k - 1)  # not first(hi)
            while lo < hi:
                mid = (lo + hi) // 2
                if first(mid):
                    lo = mid + 1
                else:
                    hi = mid
            k = lo  # steps 2..lo follow first(1..lo - 1); step lo + 1 does not
            if k < 2:
                return 0
        got = sum(toks[n - k:])
        self._drop(chain)
        self._cutting = top  # the cuts file neither part: both are filed below, as the steps do
        try:
            rest = self.tree.split(top, n - k)
            if not top.frag:  # a cut for real, as in _split_tail
                self._condemned[rest] = None
            kept = self.tree.split(top, 1)  # the k-th unit; top keeps the k - 1 dropped ones
        finally:
            self._cutting = None
        self._drop(top)
        self._count_units(k, got)  # one eviction per unit, as one-unit eviction counts them
        self._condemned.pop(kept, None)
        self.tree.set_tier(kept, HOST)
        self._refile(kept)
        self._refile(rest)
        return got

    def _drop_run(self, top: Node, tokens: int) -> int:
        """Drop, at once, the units of device leaf ``top`` that one-unit eviction would drop in a
        row, up to ``tokens`` (no host tier: each unit it takes is dropped). Returns tokens freed.

        One unit at a time, the victim's last unit is cut off and dropped and the rest is filed
        again, and is the next victim while it ranks strictly first (:func:`_rest_first`, as in
        :meth:`_evict_run`). Here the run is cut off once and dropped: the same drops, counts
        and order of entries, without a split, a drop and two re-filings per unit (at host 0 a
        memory-short ``opt`` replay evicted ~1.9M single units of ~80k-token prompts)."""
        toks = top.toks
        n = len(toks)
        m = _rest_first(toks, n, tokens, self.policy.priority_at, top, self.heaps.next_after(top, True))
        if m < n:  # the rest stays, filed afresh: a cut for real, as in _split_tail
            rest = self.tree.split(top, n - m)
            if not top.frag:
                self._condemned[rest] = None
        got = top.tokens
        self._count_units(m, got)  # one eviction per unit, as one-unit eviction counts them
        parent = top.parent
        self._drop(top)
        self._refile(parent)
        return got

    def _evict(self, node: Node) -> bool:
        """Move device node ``node`` to the host tier, or drop it (and its host subtree) if the
        host cannot make room. Returns False (nothing changed on the device) when it could only be
        dropped and a pinned host node hangs below it."""
        parent = node.parent
        tokens = node.tokens
        cap = self.host_capacity
        if cap >= tokens:
            tree = self.tree
            short = tokens - (cap - tree.host_tokens)
            # selective host only while the predicted order runs: in the guard's fallback the
            # policy follows LRU, which writes every victim to the host
            if short > 0 and (not self._selective_host or self.policy.order_guard.fallback or self._worth_host(node)):
                self._evict_host(short)
            if cap - tree.host_tokens >= tokens:
                s = self.stats  # _count_eviction, inline: once per victim
                s.evictions += 1
                s.evicted_tokens += tokens
                if self.policy.order_guard.fallback:
                    s.guard_fallback_evictions += 1
                self._condemned.pop(node, None)
                tree.set_tier(node, HOST)
                refile = self._refile
                refile(node)
                refile(parent)
                return True
        if self._pinned_below(node) or self._kept(node):
            return False
        self._count_eviction(node)
        self._drop_subtree(node)
        self._refile(parent)
        return True

    def _worth_host(self, node: Node) -> bool:
        """True if device victim ``node`` ranks above the host tier's next victim in the policy's
        host order (``selective_host`` policies write a victim to a full host only then: otherwise
        it would displace cache the policy values more, and would itself leave the host first)."""
        self.policy.settle()
        key = self.heaps.peek_host_key()
        if key is None:
            return True
        return self.policy.host_priority(node) > key

    def _count_eviction(self, node: Node) -> None:
        self._count_units(1, node.tokens)

    def _count_units(self, units: int, tokens: int) -> None:
        """Count ``units`` evictions of ``tokens`` tokens in all (each unit one eviction)."""
        s = self.stats
        s.evictions += units
        s.evicted_tokens += tokens
        if self.policy.order_guard.fallback:
            s.guard_fallback_evictions += units

    def _evict_host(self, tokens: int, keep: Node | None = None) -> int:
        """Drop host leaves in the host order until ``tokens`` are freed, or until only the first
        unit of ``keep`` would be next. Returns tokens freed."""
        self.policy.settle()
        freed = 0
        heaps = self.heaps
        pins = self._pins
        while freed < tokens:
            node = heaps.peek_host()
            if node is None or (node is keep and len(node.toks) == 1):
                break
            if pins is not None:
                filed = heaps.filing(node)
                pins.expire()
                if pins.holds(node):
                    break  # held nodes rank last: everything left is held
                if heaps.filing(node) != filed:
                    continue  # its hold ended and it was re-filed: take it in its new place
            if node is keep or node.frag:
                kept = node is keep
                node = self._host_run(node, tokens - freed, len(node.toks) - kept)
                if kept:
                    keep = node.parent  # the rest of keep (a cut leaves node the dropped tail)
            elif tokens - freed <= node.tokens - node.toks[0]:  # else needed whole: no cut (_tail_units)
                node = self._split_tail(node, tokens - freed)
            parent = node.parent
            freed += node.tokens
            self._drop(node)
            self._refile(parent)
        return freed

    def _host_run(self, node: Node, need: int, most: int) -> Node:
        """The tail of host victim ``node`` (a chain of one-unit nodes, ``Node.frag``) that the
        chain's own eviction would drop now, split off: its last unit, then each unit above while
        ``need`` is not met and the rest still ranks strictly first (as in :meth:`_evict_run`)."""
        toks = node.toks
        n = len(toks)
        m = 1
        if toks[-1] < need and n > 1:
            m = _rest_first(toks, most, need, self.policy.host_priority_at, node, self.heaps.next_after(node, False))
        if m < n:
            self.tree.split(node, n - m)
        return node

    def _split_tail(self, node: Node, need: int) -> Node:
        """The smallest tail of ``node``'s units that holds ``need`` tokens, split off as its own
        node (``node`` itself, the deeper part, keeps its identity); ``node`` whole if it is needed
        whole."""
        m = self._tail_units(node, need)
        if m < len(node.toks):
            self._cutting = node  # the cut files neither part: the caller files both (cache._on_split)
            try:
                top = self.tree.split(node, len(node.toks) - m)
            finally:
                self._cutting = None
            if node.tier == DEVICE and not node.frag:  # a frag node's units were nodes already
                self._condemned[top] = None
        return node

    def _tail_tokens(self, node: Node, need: int) -> int:
        """Tokens of the tail :meth:`_split_tail` would take for ``need``."""
        return sum(node.toks[len(node.toks) - self._tail_units(node, need):])

    @staticmethod
    def _tail_units(node: Node, need: int) -> int:
        toks = node.toks
        n = len(toks)
        # the usual case, a victim needed whole: the units after the first hold less than need
        # (a unit holds >= 0 tokens), so the walk below would end at n; skip its O(units) loop
        if need > node.tokens - toks[0]:
            return n
        if need <= 0:
            return 0
        # the sums of the last k units never fall as k grows (a unit holds >= 0 tokens), so k
        # is the answer when the last k units hold need and the last k - 1 do not. First a
        # guess, checked with two sums made in C: the units of a trace's prompt are blocks of
        # one size but the last, so the tail is the last unit and enough of the size above it
        last = toks[-1]
        if need <= last:
            return 1
        size = toks[-2]  # n >= 2 here: a one-unit node is needed whole
        if size > 0:
            k = 1 + (need - last + size - 1) // size
            if k < n:
                held = sum(toks[n - k:])
                if held >= need and held - toks[n - k] < need:
                    return k
        # else the first k whose last k units hold need, on running sums made in C (nodes of
        # real traces are hundreds of units long) that stop there: a victim is often much
        # longer than the tail taken
        return next(compress(count(1), map(ge, accumulate(reversed(toks)), repeat(need))), n)

    def _pinned_below(self, node: Node) -> bool:
        """A node below ``node`` is locked, or kept by the policy (then ``node`` cannot be dropped)."""
        kept = self._kept if self._pins is not None else None
        stack = list(node.children.values())
        while stack:
            n = stack.pop()
            if n.lock or (kept is not None and kept(n)):
                return True
            stack.extend(n.children.values())
        return False

    def _kept(self, node: Node) -> bool:
        """The policy keeps ``node`` in the cache (``Pins.keeps``), its expired holds cleared first."""
        pins = self._pins
        if pins is None:
            return False
        pins.expire()
        return pins.keeps(node)

    def _drop_subtree(self, node: Node) -> None:
        stack, order = [node], []
        while stack:
            n = stack.pop()
            order.append(n)
            stack.extend(n.children.values())
        for n in reversed(order):  # children before parents
            self._drop(n)

    def _drop(self, node: Node) -> None:
        self.stats.dropped_tokens += node.tokens
        self.hooks.on_drop(node)  # while the node is still attached (policies read its parent)
        self._condemned.pop(node, None)
        self.tree.remove(node)
        if node.sc is not None:
            self.board.forget(node.sc)


def _rest_first(toks: list, most: int, need: int, at: Callable[[Node, int], tuple], node: Node,
                after: tuple | None) -> int:
    """How many of ``node``'s last units one-unit eviction takes in a row, the last one taken
    anyway: after ``k`` units it takes one more while their ``toks`` are short of ``need``,
    ``k < most`` and the rest ranks strictly before ``after`` (``at(node, n - k)``, the priority of
    the rest; ``None``: nothing else to rank against).

    The count ``need`` allows is found by a checked guess or on running sums made in C
    (:func:`_units_holding`): a run is often cut far short of it by the host's room
    (:meth:`Eviction._evict_run`), and a memory-short ``opt`` replay of ~80k-token prompts spent
    a third of its CPU counting units one by one in Python here. A shorter rest never ranks
    earlier (``Policy.priority_at``), so "the rest after ``k`` units ranks first" holds up to
    some ``k`` and for none past it: one priority checks the whole count, else galloping from
    the start and bisection find the bound, O(log units taken) priorities."""
    n = len(toks)
    if most <= 1 or toks[-1] >= need:
        return 1
    m = _units_holding(toks, n, most, need)
    if after is None or at(node, n - m + 1) < after:
        return m
    lo, k = 1, 1  # the rest after lo - 1 units ranks first; after m - 1 it does not
    while k < m - 1 and at(node, n - k) < after:
        lo, k = k + 1, 2 * k + 1
    hi = min(k, m - 1)  # the rest after hi units does not rank first
    while lo < hi:
        mid = (lo + hi) // 2
        if at(node, n - mid) < after:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _units_holding(toks: list, n: int, most: int, need: int) -> int:
    """The fewest last units of ``toks`` (``n`` of them) that hold ``need`` tokens, at most
    ``most`` (``most``: none hold it); ``most >= 2`` and the last unit holds less than ``need``.

    First a guess, checked with one sum made in C, as :meth:`Eviction._tail_units` guesses: the
    units of a trace's prompt are blocks of one size but the last. Else the count is found on
    running sums made in C (``accumulate``, ``bisect``); those cost O(``most``) in new integers,
    where the guess costs one pass over the units it counts, and a run is often far shorter
    than its node."""
    size = toks[-2]
    if size > 0:
        k = 1 + (need - toks[-1] + size - 1) // size  # >= 2
        if k >= most:
            if sum(toks[n - most:]) < need:
                return most
        else:
            held = sum(toks[n - k:])
            if held >= need and held - toks[n - k] < need:
                return k
    sums = list(accumulate(reversed(toks[n - most:])))  # sums[k - 1]: tokens of the last k units
    return min(bisect_left(sums, need) + 1, most)
