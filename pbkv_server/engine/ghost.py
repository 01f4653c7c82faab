"""The guard's ghost: a two-tier LRU prefix cache of keys and token counts, no KV (:class:`ShadowLRU`).

:class:`~pbkv_server.engine.guard.LRUGuard` feeds it every admission the real cache makes and
compares the prefill the real cache saves with what this ghost LRU would have saved (the
modelling choices are in :mod:`~pbkv_server.engine.guard`'s docstring). It is its own module
because it is most of the guard's code: it keeps LRU's orders as runs of consecutive unit keys,
which is what prompts move as, found by the first key of each run while the keys it is given are
chained, by every key once they are not, with the plain per-key model kept beside it for orders
that runs cannot follow (:class:`ShadowLRU`).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from itertools import accumulate, compress, count, repeat, takewhile
from operator import ge, itemgetter, le, not_
from typing import Hashable, Sequence

from .pages import block_size

__all__ = ["ShadowLRU"]


#: Tiers of a run of the ghost (:class:`_Run`): ``_GONE``, units no tier holds, kept as runs while
#: runs are found by their first keys (:class:`ShadowLRU`).
_DEV, _HOST, _PARK, _GONE = 0, 1, 2, 3
#: Keys of gone runs the ghost keeps at least before it forgets them (then: twice the keys it holds).
_GONE_KEYS = 1 << 20
#: Keys of a piece of a prompt that the ghost keeps as a run of its own rather than join to its
#: neighbours (it would re-point them): a long prompt is a few runs, not one per turn that made it.
_JOIN_KEYS = 256


class _Run:
    """Units next to each other in one tier of the ghost: ``keys`` and ``toks`` in prompt order
    (shallowest first), so the run's LRU order, least recent first, is ``reversed(keys)``.

    All units of a run are pinned by the same number of running requests (``pins``). ``off`` is
    where ``keys[0]`` stood in the prompt that made the run: with chained keys a key stands at the
    same index in every prompt, so the index of a prompt's key in the run is found without a scan
    (only a hint: it is checked). ``prev``/``next`` link the runs of the device or the host tier,
    least recent first (parked and gone runs are not linked: nothing reads their order). A gone
    run keeps its keys only (``toks`` empty, ``size`` 0): a prompt that brings them back brings
    its own token counts."""

    __slots__ = ("keys", "toks", "size", "pins", "tier", "off", "prev", "next")

    def __init__(self, keys: list, toks: list, size: int, pins: int, tier: int, off: int) -> None:
        self.keys = keys
        self.toks = toks
        self.size = size  # sum(toks)
        self.pins = pins
        self.tier = tier
        self.off = off
        self.prev = self.next = self


def _link_before(node: _Run, run: _Run) -> None:
    prev = node.prev
    run.prev, run.next = prev, node
    prev.next = node.prev = run


def _unlink(run: _Run) -> None:
    prev, nxt = run.prev, run.next
    prev.next, nxt.prev = nxt, prev
    run.prev = run.next = run


def _same(keys: list, i: int, rkeys: list, pos: int, n: int) -> bool:
    """``keys[i:i + n] == rkeys[pos:pos + n]``, compared in C; a whole list is compared as it is
    (a slice would copy it)."""
    return ((keys if n == len(keys) else keys[i:i + n])
            == (rkeys if n == len(rkeys) else rkeys[pos:pos + n]))


def _agree(keys: list, i: int, rkeys: list, pos: int, n: int) -> int:
    """How many pairs of ``keys[i:i + n]`` and ``rkeys[pos:pos + n]`` are equal before the first
    pair that differs (``n`` if none does); the first pair is known equal (the walk found the run
    by it).

    The pairs are compared in C, on slices. Where a prompt leaves a run, it does so near the run's
    end (the next prompt of a conversation has a full block where the run ends in the previous
    prompt's last, partial one), so single pairs are tried first from the end, at doubling steps,
    down to one that is equal; the slice up to it, compared, is then all equal (the first pair
    that differs is after it, one of a few) or is not (the first that differs is in it). Either
    way a bisection on slices ends the search: pairs before ``lo`` are equal, and the first that
    differs is at ``hi`` or before (``hi == n``: or none)."""
    if n <= 1:
        return n
    hi, j, step = n, n - 1, 1
    while j > 0 and keys[i + j] != rkeys[pos + j]:
        hi, j, step = j, j - step, 2 * step
    lo = 1
    if j > 0:  # the pair at j is equal
        if _same(keys, i, rkeys, pos, j + 1):
            lo = j + 1
        else:
            hi = j
    while lo < hi:
        mid = (lo + hi) // 2
        if keys[i + lo:i + mid + 1] == rkeys[pos + lo:pos + mid + 1]:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _sum(toks: list, start: int, stop: int, unit: int | None) -> int:
    """``sum(toks[start:stop])``; ``unit``: :func:`~pbkv_server.engine.pages.block_size` of
    ``toks``."""
    if unit is None:
        return sum(toks[start:stop])
    if stop < len(toks):
        return (stop - start) * unit
    return (stop - start - 1) * unit + toks[-1] if stop > start else 0


def _first_reaching(toks: list, need: int, size: int) -> tuple[int, int]:
    """How many units, taken from the end of ``toks`` (``size``: their sum), first add up to
    ``need`` tokens or more (``len(toks) + 1`` if all do not), and their tokens.

    Counted where the units but the last are of one size
    (:func:`~pbkv_server.engine.pages.block_size`); otherwise first a
    guess, checked with two sums made in C (the sums of the last k units never fall as k grows,
    so k is the answer when the last k units hold ``need`` and the last k - 1 do not), then a
    scan in C that stops at the answer."""
    n = len(toks)
    if n:
        last = toks[-1]
        if need <= last:
            return 1, last
        unit = block_size(toks)
        if unit is not None and unit > 0:
            k = 1 + (need - last + unit - 1) // unit
            return (k, (k - 1) * unit + last) if k <= n else (n + 1, size)
        unit = toks[-2] if n >= 2 else 0
        if unit > 0:
            k = 1 + (need - last + unit - 1) // unit
            if k <= n:
                held = sum(toks[n - k:]) if 2 * k <= n else size - sum(toks[:n - k])
                if held >= need and held - toks[n - k] < need:
                    return k, held
    k = next(compress(count(1), map(ge, accumulate(reversed(toks)), repeat(need))), n + 1)
    return k, sum(toks[n - k:]) if k <= n else size


def _span(toks: list, start: int, unit: int | None) -> tuple[int, int, int]:
    """``(sum, min, max)`` of ``toks[start:]`` (not empty); ``unit``:
    :func:`~pbkv_server.engine.pages.block_size` of ``toks``."""
    if unit is None:
        tail = toks[start:]
        return sum(tail), min(tail), max(tail)
    last = toks[-1]
    if start == len(toks) - 1:
        return last, last, last
    return (len(toks) - 1 - start) * unit + last, min(unit, last), max(unit, last)


class ShadowLRU:
    """Ghost directory of a two-tier LRU prefix cache: unit key -> tokens, least recently used
    first, on the device and (behind it) on the host tier.

    Args:
        capacity: device KV capacity, tokens.
        host_capacity: host-tier KV capacity, tokens (0: none; what LRU evicts is dropped).

    Attributes:
        used: tokens of the device units the ghost holds (at most the room given to :meth:`admit`).
        host_used: tokens of the host units (at most ``host_capacity``).
        hit_tokens, host_hit_tokens: prompt tokens the ghost found on the device and on the host,
            over all counted admissions.

    The model is one ordered dict per tier, unit key -> tokens, with a count of running requests
    per pinned key and a dict of the pinned units eviction passed over; the ``_*_keys`` methods
    are that model, as written. A prompt's units enter, move and leave in runs, though (a prompt
    is a run of consecutive keys of one chain; LRU moves it to the device's recent end whole; the
    device evicts its oldest prompts' tails whole; a running request pins its prompt whole), so
    the ghost keeps the same orders as runs of units (:class:`_Run`), found by their keys (below),
    and does per run what the model does per key, each run's keys copied or compared in C: a replay
    of Claude Code traces (1,000+ units a prompt) spent more time in the per-key model than in
    the policy it guards. Keys that are not chained (tests, foreign traces) can make an order that
    runs cannot follow cheaply (a key present twice, one after a key that is missing, a pin of a
    key not on the device); before such a step the ghost turns into the model and stays in it,
    so its results are the model's for every sequence of calls.

    Finding runs by a dict of every unit key -> its run was a third of the ghost's time in a
    replay: most of a long prompt's units are new to the ghost (LRU missed them), each admission
    added their keys and each drop from the host deleted them. So the ghost first indexes only the first key of each run (``_starts``)
    and keeps the units that leave the host as runs too (tier ``_GONE``, held by no tier), with a
    set of the keys of all runs (``_seen``, added to for keys never met before only): a key that
    is a run's first finds its run; one in no run is new; one in a run but not its first stops
    the walk. With chained keys the last never happens (a run is a piece of one chain, so the
    key a prompt meets after a run's last or after a key that differs from the run's is a run's
    first, or new), and a prompt's keys past its longest held prefix are pieces of gone runs and
    new keys, found and moved by runs, as the held ones are. A step that finds a key held past a
    missing one, a key of a run not at its start, a key twice, or that would leave a hole in a
    run (units dropped for lack of host room) first indexes every held key (``_where``,
    :meth:`_to_index`) and forgets gone runs, for good; the results are the same either way.
    Gone runs are forgotten when they hold more than twice the keys the ghost holds (and at
    least :data:`_GONE_KEYS`), so a live server's ghost does not grow with its history.
    """

    __slots__ = ("capacity", "host_capacity", "used", "host_used", "hit_tokens", "host_hit_tokens", "_fast",
                 "_chain", "_starts", "_seen", "_gone", "_gone_cap", "_gone_floor",
                 "_where", "_dev", "_hosts", "_parked_runs", "_maxtok", "_mintok",
                 "_units", "_host", "_pins", "_parked")

    def __init__(self, capacity: int, host_capacity: int = 0) -> None:
        self.capacity = capacity
        self.host_capacity = max(0, host_capacity)
        self.used = self.host_used = 0
        self.hit_tokens = self.host_hit_tokens = 0
        self._fast = True  # runs; False: the per-key model, for good
        self._chain = True  # runs found by their first keys; False: by every key, for good
        self._starts: dict[Hashable, _Run] = {}  # first key of each run, gone ones too -> the run
        self._seen: set = set()  # keys of all runs, gone ones too
        self._gone = 0  # keys of gone runs
        self._gone_cap = self._gone_floor = _GONE_KEYS  # forget gone runs past this many keys
        self._where: dict[Hashable, _Run] = {}  # unit key -> its run (device, host or parked; not chained)
        self._dev = _Run([], [], 0, 0, -1, 0)  # sentinels of the device and host lists of runs
        self._hosts = _Run([], [], 0, 0, -1, 0)
        self._parked_runs: set[_Run] = set()
        # most and fewest tokens of a unit seen: which units fit the host room, without a scan
        self._maxtok, self._mintok = 0, 1 << 62
        # the per-key model (after a turn, :meth:`_to_keys`)
        self._units: OrderedDict[Hashable, int] = OrderedDict()
        self._host: OrderedDict[Hashable, int] = OrderedDict()
        self._pins: dict[Hashable, int] = {}  # unit key -> running requests whose prompt holds it
        self._parked: dict[Hashable, int] = {}  # pinned units eviction passed over: device units still

    def __len__(self) -> int:
        if not self._fast:
            return len(self._units) + len(self._parked)
        return (sum(len(run.keys) for run in self._runs(self._dev))
                + sum(len(run.keys) for run in self._parked_runs))

    def pin(self, keys: Sequence[Hashable]) -> None:
        """A request whose prompt is ``keys`` runs: its units stay on the device until :meth:`unpin`
        (the real cache locks a running request's path, so LRU evicts the next unlocked unit)."""
        if self._fast:
            if type(keys) is not list:
                keys = list(keys)
            plan, end = self._find(keys, False)
            # a key pinned while it is not a device unit keeps its count where runs have none
            if end == len(keys) and self._distinct(plan) and all(r.tier != _HOST for _, r, _, _ in plan):
                for _, run, pos, n in plan:
                    self._isolate(run, pos, n).pins += 1
                return
            self._to_keys()
        self._pin_keys(keys)

    def unpin(self, keys: Sequence[Hashable]) -> None:
        """The request of :meth:`pin` finished. A unit eviction passed over while it was pinned
        becomes the least recent device unit again (it was the least recent when passed over, and
        its last use is still that request's admission), deepest unit first."""
        if self._fast:
            if type(keys) is not list:
                keys = list(keys)
            run = self._starts.get(keys[0]) if self._chain and keys else None
            if run is not None and run.tier != _GONE and run.keys == keys:
                # the prompt is one run, as the guard's prompts mostly are at their unpin: the
                # walk's plan, without the walk
                plan = [(0, run, 0, len(keys))]
            else:
                plan, _ = self._find(keys, True)  # a key no run holds is not pinned: nothing to do
            if self._distinct(plan):
                dev = self._dev
                for _, run, pos, n in plan:
                    if run.pins:
                        run = self._isolate(run, pos, n)
                        run.pins -= 1
                        if not run.pins and run.tier == _PARK:  # each comes before those of the keys before it
                            self._parked_runs.discard(run)
                            run.tier = _DEV
                            _link_before(dev.next, run)
                return
            self._to_keys()
        self._unpin_keys(keys)

    def admit(self, keys: Sequence[Hashable], toks: Sequence[int], room: int, count: bool = True) -> int:
        """:meth:`admit_tiers`, device hit only (outputs, and callers without a host tier)."""
        return self.admit_tiers(keys, toks, room, count)[0]

    def admit_tiers(self, keys: Sequence[Hashable], toks: Sequence[int], room: int,
                    count: bool = True, pin: bool = False) -> tuple[int, int]:
        """Look ``keys`` up, then cache them on the device as LRU would, evicting to ``room``
        tokens; evicted units move to the host tier (LRU there too) while it has room.

        Args:
            keys: the prompt's unit keys (chained); toks: tokens per unit.
            room: device tokens the cached units may take after this admission (capacity minus the
                tokens reserved for running outputs, this request's included).
            count: add the hits to :attr:`hit_tokens` / :attr:`host_hit_tokens` (``False`` for
                speculative prefills and outputs).
            pin: then :meth:`pin` ``keys`` (the guard's running request), without walking them
                again: after the admission they are the most recent device runs, whole.

        Returns:
            ``(device hit, host hit)`` prompt tokens of the longest prefix of ``keys`` the ghost
            holds on either tier, counted with ``toks`` as the real cache counts them.

        The prompt's units become the most recent device units, deepest first, so a prefix is
        always more recent than its extensions and eviction (oldest first) takes tails before
        their prefixes, the order in which a radix tree evicts leaves. The prompt's own units are
        never evicted.
        """
        if not self._fast:
            return self._admit_model(keys, toks, room, count, pin)
        if type(keys) is not list:
            keys = list(keys)
        if type(toks) is not list:
            toks = list(toks)
        plan, end = self._find(keys, False)
        gone = None
        if self._chain and end < len(keys):
            gone = self._walk_gone(keys, end)
            if gone is None:
                self._to_index()
                plan, end = self._walk(keys, False)
        # the model's device prefix (parked units included: they are device units again first),
        # then, if the host tier holds units, the prefix goes on through units of either tier
        dev_end = 0
        for i, run, _, n in plan:
            if run.tier == _HOST:
                break
            dev_end = i + n
        fresh, clash = None, False
        unit = block_size(toks)  # (the prompt's sums are products)
        if end < len(keys):  # the new units, as a run, indexed where no run holds the key already
            size, least, most = _span(toks, end, unit)
            fresh = _Run(keys[end:], toks[end:], size, 0, _DEV, end)
            if self._chain:  # the pieces of gone runs it holds are no runs' now
                starts = self._starts
                for _, run, _, n in gone:
                    rkeys = run.keys
                    del starts[rkeys[0]]
                    if n < len(rkeys):  # the rest stays gone, found by its first key
                        del rkeys[:n]
                        starts[rkeys[0]] = run
                        run.off += n
                    self._gone -= n
                starts[keys[end]] = fresh
            else:
                where = self._where
                before = len(where)
                deque(map(where.setdefault, fresh.keys, repeat(fresh)), maxlen=0)
                clash = len(where) - before < len(fresh.keys)  # one was held, or is new twice
        if clash or not self._distinct(plan):
            # a key present twice, or present after a missing one: the model updates it in place
            self._to_keys()  # (it drops the key index, fresh keys and all)
            return self._admit_model(keys, toks, room, count, pin)
        hit, loading = _sum(toks, 0, dev_end, unit), 0
        pieces = []
        for i, run, pos, n in plan:
            tier = run.tier
            piece = self._take(run, pos, n)[0]
            if tier == _HOST:  # loaded back: it holds its host room until the evictions below are done
                loading += piece.size
            elif i >= dev_end:  # a device unit after the device prefix counts with its own tokens
                hit += piece.size
            piece.off = i
            pieces.append(piece)
        self.used += loading
        if fresh is not None:
            self.used += fresh.size
            if most > self._maxtok:
                self._maxtok = most
            if least < self._mintok:
                self._mintok = least
        # the prompt's runs, in prompt order: neighbours with the same pins are joined, so that
        # the chain's next prompts walk few runs, but two long pieces are not (re-pointing the
        # keys of the shorter would cost more than walking one more run): a prompt has at most
        # one run per _JOIN_KEYS keys and its short pieces
        if fresh is not None:
            pieces.append(fresh)
        runs, group, long = [], [], False
        for piece in pieces:
            longer = len(piece.keys) >= _JOIN_KEYS
            if group and (group[0].pins != piece.pins or long and longer):
                runs.append(self._join(group))
                group, long = [], False
            group.append(piece)
            long = long or longer
        if group:
            runs.append(self._join(group))
        dev = self._dev
        for run in reversed(runs):  # deepest first: the prompt's first unit is the most recent
            run.tier = _DEV
            _link_before(dev, run)
        self._evict(room, runs[-1] if runs else None, loading)
        if pin:  # (eviction stopped at the prompt's runs: they hold its keys, each once)
            for run in runs:
                run.pins += 1
        self.host_used -= loading
        if count:
            self.hit_tokens += hit
            self.host_hit_tokens += loading
        return hit, loading

    def shrink(self, room: int) -> None:
        """Evict as LRU would until the device units take at most ``room`` tokens: the real cache
        made room for running requests' decoded KV (engine model ``sglang``, where the output is
        not reserved at admission but grows a token a step, and the real cache evicts for it)."""
        if self._fast:
            self._evict(room, None, 0)
        else:
            self._evict_keys(room, 0, 0)

    # -- runs -----------------------------------------------------------------------------------

    def _find(self, keys: list, skip_missing: bool) -> tuple[list, int]:
        """:meth:`_walk`, by the runs' first keys while keys are chained (:meth:`_walk_chain`);
        when ``keys`` show they are not, the ghost indexes every key first (:meth:`_to_index`)."""
        if self._chain:
            plan = self._walk_chain(keys, skip_missing)
            if plan is not None:
                return plan
            self._to_index()
        return self._walk(keys, skip_missing)

    def _walk_chain(self, keys: list, skip_missing: bool) -> tuple[list, int] | None:
        """:meth:`_walk` by the runs' first keys (``_starts``), or None where that could differ: a
        key in a run but not its first (only the key index finds it), or (``skip_missing``) a
        missing key before the last (only the key index finds what is held past it).

        A run's first key finds its run (a key is in one run at most); a key in no run
        (``_seen``) is not held, nor is one of a gone run: both end the walk, as in :meth:`_walk`."""
        starts, seen = self._starts, self._seen
        plan = []
        i, total = 0, len(keys)
        while i < total:
            key = keys[i]
            run = starts.get(key)
            if run is None or run.tier == _GONE:
                if run is None and key in seen or skip_missing and i + 1 < total:
                    return None
                break
            i += self._stretch(keys, i, run, plan)
        return plan, i

    @staticmethod
    def _stretch(keys: list, i: int, run: _Run, plan: list) -> int:
        """Add to ``plan`` the stretch of ``keys`` from ``i`` that ``run`` holds from its first key
        on, ``(i, run, 0, length)``; returns the length."""
        rkeys = run.keys
        n = _agree(keys, i, rkeys, 0, min(len(keys) - i, len(rkeys)))
        plan.append((i, run, 0, n))
        return n

    def _walk_gone(self, keys: list, end: int) -> list | None:
        """The keys of ``keys`` from ``end`` on (past its held prefix) as stretches ``(index in
        keys, gone run, 0, length)`` of gone runs, then keys in no run, which it adds to ``_seen``;
        or None where they are not so (a held key, a key of a run not at its start, a run or a
        key met twice): the key index must decide, and ``_seen`` is dropped then."""
        starts, seen = self._starts, self._seen
        plan = []
        i, total = end, len(keys)
        while i < total:
            run = starts.get(keys[i])
            if run is None:  # new keys from here, each once (else one was met before or is twice)
                new = keys[i:]
                before = len(seen)
                seen.update(new)
                if len(seen) - before < len(new):
                    return None
                break
            if run.tier != _GONE:
                return None
            i += self._stretch(keys, i, run, plan)
        return plan if self._distinct(plan) else None

    def _to_index(self, *extra: _Run) -> None:
        """Index every held key (and those of the unlinked runs ``extra``), for good: a step the
        index of first keys cannot follow, or a run about to lose units in its middle. Gone runs
        are forgotten."""
        where: dict[Hashable, _Run] = {}
        for run in (*self._runs(self._dev), *self._runs(self._hosts), *self._parked_runs, *extra):
            where.update(zip(run.keys, repeat(run)))
        self._where = where
        self._chain = False
        self._starts, self._seen, self._gone = {}, set(), 0

    def _to_gone(self, run: _Run) -> None:
        """``run`` (unlinked) is held by no tier now; forget gone runs if they hold too many keys."""
        run.tier = _GONE
        run.toks, run.size = [], 0  # (see _Run)
        self._gone += len(run.keys)
        if self._gone > self._gone_cap:
            live = [*self._runs(self._dev), *self._runs(self._hosts), *self._parked_runs]
            self._starts = {run.keys[0]: run for run in live}
            seen = self._seen = set()
            for run in live:
                seen.update(run.keys)
            self._gone = 0
            self._gone_cap = max(self._gone_floor, 2 * len(seen))

    def _walk(self, keys: list, skip_missing: bool) -> tuple[list, int]:
        """``keys`` as stretches ``(index in keys, run, index in run, length)`` of consecutive keys
        held by one run in the same order, from the first key up to the first key no run holds
        (``skip_missing``: past it, to the end), and the index where the walk stopped."""
        where, plan = self._where, []
        i, total = 0, len(keys)
        while i < total:
            key = keys[i]
            run = where.get(key)
            if run is None:
                if not skip_missing:
                    break
                i = next(compress(count(i + 1), map(where.__contains__, keys[i + 1:])), total)
                continue
            rkeys = run.keys
            pos = i - run.off
            if not 0 <= pos < len(rkeys) or rkeys[pos] != key:
                pos = rkeys.index(key)
            n = _agree(keys, i, rkeys, pos, min(total - i, len(rkeys) - pos))
            plan.append((i, run, pos, n))
            i += n
        return plan, i

    @staticmethod
    def _distinct(plan: list) -> bool:
        """No run holds two stretches of the walk (with chained keys a run holds one piece of a
        chain, which a prompt meets once; a prompt that meets a run twice needs the model)."""
        n = len(plan)
        if n < 3:
            return n < 2 or plan[0][1] is not plan[1][1]
        return len(set(map(itemgetter(1), plan))) == n  # (runs hash by identity)

    @staticmethod
    def _runs(head: _Run):
        run = head.next
        while run is not head:
            yield run
            run = run.next

    def _place_before(self, node: _Run, run: _Run) -> None:
        """Put ``run`` in ``node``'s tier, just before it in LRU order (gone runs have none)."""
        run.tier = node.tier
        if node.tier == _PARK:
            self._parked_runs.add(run)
        elif node.tier != _GONE:
            _link_before(node, run)

    def _place_after(self, node: _Run, run: _Run) -> None:
        """Put ``run`` in ``node``'s tier, just after it in LRU order."""
        run.tier = node.tier
        if node.tier == _PARK:
            self._parked_runs.add(run)
        elif node.tier != _GONE:
            _link_before(node.next, run)

    def _detach(self, run: _Run) -> None:
        if run.tier == _PARK:
            self._parked_runs.discard(run)
        elif run.tier != _GONE:
            _unlink(run)

    def _take(self, run: _Run, pos: int, n: int, size: int | None = None) -> tuple[_Run, _Run | None]:
        """Take ``run.keys[pos:pos + n]`` out of its tier as a run of its own (same pins and tier
        field, unlinked); returns it and the run left in the taken run's place (None if none).
        Of the two parts, the one with fewer keys gets a new run (its keys are re-pointed).
        ``size``: the taken units' tokens, if known."""
        rkeys, rtoks = run.keys, run.toks
        total = len(rkeys)
        if n == total:
            self._detach(run)
            return run, None
        end = pos + n
        keys, toks = rkeys[pos:end], rtoks[pos:end]
        if size is None:
            size = _sum(toks, 0, n, block_size(toks))
        off = run.off + pos
        rest_off = run.off + n if pos == 0 else run.off  # (past a middle piece the hint misses)
        del rkeys[pos:end], rtoks[pos:end]
        if 2 * n <= total:
            piece = _Run(keys, toks, size, run.pins, run.tier, off)
            if self._chain:  # the first keys of both parts (each part keeps its other keys)
                self._starts[keys[0]] = piece
                self._starts[rkeys[0]] = run
            else:
                self._where.update(zip(keys, repeat(piece)))
            run.size -= size
            run.off = rest_off
            return piece, run
        rest = _Run(rkeys, rtoks, run.size - size, run.pins, run.tier, rest_off)
        if self._chain:
            self._starts[rkeys[0]] = rest
            self._starts[keys[0]] = run
        else:
            self._where.update(zip(rkeys, repeat(rest)))
        self._place_before(run, rest)
        self._detach(run)
        run.keys, run.toks, run.size, run.off = keys, toks, size, off
        return run, rest

    def _isolate(self, run: _Run, pos: int, n: int) -> _Run:
        """The run of ``run.keys[pos:pos + n]``, split off in place (its pins will differ)."""
        total = len(run.keys)
        if n == total:
            return run
        end, off = pos + n, run.off
        piece, rest = self._take(run, pos, n)  # rest: the keys before the piece, then those after it
        if end == total:  # the piece is the deepest part: the oldest
            self._place_before(rest, piece)
        elif pos == 0:  # the shallowest: the most recent
            self._place_after(rest, piece)
        else:  # in the middle: the part after it (deeper) is older, the part before it more recent
            deep, front = self._take(rest, pos, total - end)
            deep.off = off + end
            self._place_before(front, deep)
            self._place_before(front, piece)
        return piece

    def _join(self, group: list) -> _Run:
        """One run of consecutive pieces of a prompt (prompt order, same pins); the longest piece
        holds the rest, its lists extended in place (the others' units are copied, not its own)."""
        if len(group) == 1:
            return group[0]
        at, big = 0, group[0]
        for i, piece in enumerate(group):
            if len(piece.keys) > len(big.keys):
                at, big = i, piece
        chain, where, starts = self._chain, self._where, self._starts
        size = 0
        for piece in group:
            size += piece.size
            if chain:  # one first key for all
                if piece is not group[0]:
                    del starts[piece.keys[0]]
            elif piece is not big:
                where.update(zip(piece.keys, repeat(big)))
        if chain:
            starts[group[0].keys[0]] = big
        if at:  # the pieces before it
            keys, toks = [], []
            for piece in group[:at]:
                keys += piece.keys
                toks += piece.toks
            big.keys[:0] = keys
            big.toks[:0] = toks
        for piece in group[at + 1:]:
            big.keys += piece.keys
            big.toks += piece.toks
        big.size, big.off = size, group[0].off
        return big

    def _evict(self, room: int, stop: _Run | None, loading: int) -> None:
        """The model's eviction (:meth:`_evict_keys`) by runs: least recent device units leave until
        ``used <= room``, never those of ``stop`` and the runs after it (the admitted prompt's);
        a pinned run is passed over whole (parked), since passing over frees nothing. Evicted
        units move to the host tier in the same order; its oldest units leave after all have
        moved, as many as they would have one at a time (no unit that moved is larger than the
        host room, and the tier was within its capacity before)."""
        need = self.used - room
        if need <= 0:
            return
        dev = self._dev
        room_host = self.host_capacity - loading
        moved = False
        while need > 0:
            run = dev.next
            if run is dev or run is stop:
                break
            if run.pins:
                _unlink(run)
                run.tier = _PARK
                self._parked_runs.add(run)
                continue
            if run.size < need:
                _unlink(run)
            else:
                n, size = _first_reaching(run.toks, need, run.size)
                run = self._take(run, len(run.keys) - n, n, size)[0]
            need -= run.size
            self.used -= run.size
            moved = self._write_back(run, room_host) or moved
        if moved and self.host_used > self.host_capacity:
            self._drop_host()

    def _write_back(self, run: _Run, room_host: int) -> bool:
        """Move an evicted run to the host tier's recent end; units larger than ``room_host``
        are dropped. Returns whether any unit moved."""
        if room_host < self._maxtok:
            if room_host < self._mintok:  # none fits
                if self._chain:
                    self._to_gone(run)
                else:
                    deque(map(self._where.pop, run.keys), maxlen=0)
                return False
            if max(run.toks) <= room_host:
                return self._to_host(run)
            if self._chain:  # the run would hold a hole: not a piece of a chain any more
                self._to_index(run)
            fits = list(map(le, run.toks, repeat(room_host)))
            deque(map(self._where.pop, compress(run.keys, map(not_, fits))), maxlen=0)
            run.keys = list(compress(run.keys, fits))
            run.toks = list(compress(run.toks, fits))
            run.size = sum(run.toks)
            if not run.keys:
                return False
            run.off = -len(run.keys)  # (not a chain's piece now: no hint)
        return self._to_host(run)

    def _to_host(self, run: _Run) -> bool:
        run.tier = _HOST
        _link_before(self._hosts, run)
        self.host_used += run.size
        return True

    def _drop_host(self) -> None:
        """Drop the host tier's least recent units until it is within its capacity."""
        hosts, where = self._hosts, self._where
        need = self.host_used - self.host_capacity
        while need > 0:
            run = hosts.next
            if run is hosts:
                break
            n, size = (len(run.keys), run.size) if run.size < need else _first_reaching(run.toks, need, run.size)
            if n >= len(run.keys):  # the whole run
                _unlink(run)
                size = run.size
                if self._chain:
                    self._to_gone(run)
                else:
                    deque(map(where.pop, run.keys), maxlen=0)
            else:  # its deepest units
                cut = len(run.keys) - n
                keys = run.keys[cut:]
                del run.keys[cut:], run.toks[cut:]
                run.size -= size
                if self._chain:
                    piece = _Run(keys, [], 0, 0, _GONE, run.off + cut)
                    self._starts[keys[0]] = piece
                    self._to_gone(piece)
                else:
                    deque(map(where.pop, keys), maxlen=0)
            need -= size
            self.host_used -= size

    def _state(self) -> tuple[OrderedDict, OrderedDict, dict, dict]:
        """The model's state: device units and host units (key -> tokens, least recent first),
        parked units (key -> tokens) and pins (key -> running requests)."""
        if not self._fast:
            return self._units, self._host, self._parked, self._pins
        units, host, parked, pins = OrderedDict(), OrderedDict(), {}, {}
        for run in self._runs(self._dev):
            units.update(zip(reversed(run.keys), reversed(run.toks)))
            if run.pins:
                pins.update(dict.fromkeys(run.keys, run.pins))
        for run in self._runs(self._hosts):
            host.update(zip(reversed(run.keys), reversed(run.toks)))
        for run in self._parked_runs:
            parked.update(zip(run.keys, run.toks))
            pins.update(dict.fromkeys(run.keys, run.pins))
        return units, host, parked, pins

    def _to_keys(self) -> None:
        """Turn into the per-key model (a step runs cannot follow comes next), for good."""
        self._units, self._host, self._parked, self._pins = self._state()
        self._fast = False
        self._chain = False
        self._where, self._starts, self._seen, self._gone = {}, {}, set(), 0
        self._dev.prev = self._dev.next = self._dev
        self._hosts.prev = self._hosts.next = self._hosts
        self._parked_runs = set()

    # -- the per-key model ----------------------------------------------------------------------

    def _pin_keys(self, keys: Sequence[Hashable]) -> None:
        pins = self._pins
        for key in keys:
            pins[key] = pins.get(key, 0) + 1

    def _unpin_keys(self, keys: Sequence[Hashable]) -> None:
        pins, parked, units = self._pins, self._parked, self._units
        for key in keys:
            c = pins.get(key, 0) - 1
            if c > 0:
                pins[key] = c
                continue
            pins.pop(key, None)
            tok = parked.pop(key, None)
            if tok is not None:
                units[key] = tok
                units.move_to_end(key, last=False)

    def _admit_model(self, keys: Sequence[Hashable], toks: Sequence[int], room: int, count: bool,
                     pin: bool) -> tuple[int, int]:
        got = self._admit_keys(keys, toks, room, count)
        if pin:
            self._pin_keys(keys)
        return got

    def _admit_keys(self, keys: Sequence[Hashable], toks: Sequence[int], room: int,
                    count: bool) -> tuple[int, int]:
        units, host, parked = self._units, self._host, self._parked
        if parked:  # a parked unit used again is an ordinary device unit (made recent below)
            for key in keys:
                tok = parked.pop(key, None)
                if tok is not None:
                    units[key] = tok
        # a linear scan, not a bisection: keys that are not chained (tests, foreign traces) may be
        # present after a missing one
        n = sum(1 for _ in takewhile(units.__contains__, keys))
        hit = sum(toks[:n])
        host_hit = loading = 0
        if host and n < len(keys):  # the prefix continues on the host tier: load it back
            m = n + sum(1 for _ in takewhile(lambda k: k in host or k in units, keys[n:]))
            for key in keys[n:m]:
                tok = host.pop(key, None)
                if tok is not None:  # loaded back: a device unit again
                    loading += tok  # it holds its host room until the evictions below are done
                    host_hit += tok
                    units[key] = tok
                    self.used += tok
                else:
                    hit += units[key]
            n = m
        if n < len(keys):
            # with chained keys the units after the first miss are new (the ghost is prefix-closed)
            before = len(units)
            units.update(zip(reversed(keys[n:]), reversed(toks[n:])))
            if len(units) - before == len(keys) - n:
                self.used += sum(toks[n:])
            else:  # a key repeated at another depth (keys not chained): recount
                self.used = sum(units.values())
        deque(map(units.move_to_end, reversed(keys[:n])), maxlen=0)  # the loop runs in C
        self._evict_keys(room, len(keys), loading)
        self.host_used -= loading
        if count:
            self.hit_tokens += hit
            self.host_hit_tokens += host_hit
        return hit, host_hit

    def _evict_keys(self, room: int, keep: int, loading: int) -> None:
        """Evict least recent device units, never the ``keep`` most recent (the admitted prompt's),
        until ``used <= room``; evicted units move to the host tier, whose ``loading`` tokens (units
        being loaded back) keep their room meanwhile."""
        units, host, parked, pins = self._units, self._host, self._parked, self._pins
        while self.used > room and len(units) > keep:
            key, tok = units.popitem(last=False)
            if key in pins:  # a running request's unit: locked in the real cache, passed over
                parked[key] = tok
                continue
            self.used -= tok
            if tok <= self.host_capacity - loading:  # write back to the host tier, its LRU units make room
                host[key] = tok
                self.host_used += tok
                while self.host_used > self.host_capacity:
                    self.host_used -= host.popitem(last=False)[1]
