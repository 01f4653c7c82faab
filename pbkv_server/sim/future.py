"""The future of a trace, for the offline ``belady`` policy (a :class:`~pbkv_server.engine.FutureOracle`).

Belady's rule evicts the block whose next use is farthest away. In a closed-loop replay the order
of future requests depends on the run itself, so the oracle ranks uses by a reference order: each
request's submission time in a timing-only replay of the trace at the same concurrency (recorded
durations and tool gaps, no cache effects; :func:`reference_order`). Uses already served are
dropped as the run proceeds (:meth:`TraceFuture.consume`), so the answer is "the earliest use, in
reference order, of a request not yet served". A request that is waiting in the queue still counts
as a future use: its blocks are needed next. The engine's belady policy asks at each admission,
passing the admitted request's submission index; the simulator binds submission indices to request
ids (:meth:`TraceFuture.bind`), so the admitted request itself is consumed before answering.

The same future also answers per *owner* (a workflow or a session, :meth:`TraceFuture.next_call`):
the reference position of the owner's next unserved request, whatever blocks it holds. That is
the next-use-time oracle of ``pbkv-nextuse`` (:mod:`~pbkv_server.engine.policies.pbkv_nextuse`):
it knows *when* each conversation calls again (tool and think time, its end), not which blocks
the call reads.
"""

from __future__ import annotations

import heapq
import math
from array import array
from itertools import repeat
from typing import Hashable, Iterable, Mapping, Sequence

__all__ = ["TraceFuture", "UseIndex", "reference_order"]


class UseIndex:
    """Which requests hold each key, whatever their order: built once for a set of requests and
    shared by the futures of several orders of them (:meth:`TraceFuture.ranked`).

    Args:
        requests: ``request_id -> block keys``.

    Attributes:
        ids: the request ids, in the order given.
        holders: ``key -> ranges of indices into ids`` (ascending, disjoint) of the requests that
            hold it: the requests of a conversation come in a row and hold most of the previous
            one's keys, so a key is held by runs of consecutive requests (on a Claude Code trace,
            runs are a small fraction of the (request, key) pairs).
    """

    def __init__(self, requests: Mapping[str, Sequence[Hashable]]):
        self.ids = list(requests)
        self.holders = _held_ranges(requests.values())


class TraceFuture:
    """Next-use oracle over a fixed set of requests.

    Args:
        requests: ``request_id -> (reference position, block keys)``; positions are any numbers
            that order the requests (smaller = sooner).
        owners: ``request_id -> owners`` (its workflow id and its session id, say) for
            :meth:`next_call`; ``None``: no owner is known (``next_call`` answers ``inf``).

    ``next_use`` and ``next_call`` cost amortised O(1): each key's (owner's) uses are sorted once
    and a cursor skips the consumed ones from the front. :meth:`ranked` builds the same oracle
    from a :class:`UseIndex`, sorting a key's uses when it is first asked about.
    """

    def __init__(self, requests: Mapping[str, tuple[float, Sequence[Hashable]]],
                 owners: Mapping[str, Sequence[Hashable]] | None = None):
        ordered = sorted(requests.items(), key=lambda kv: kv[1][0])
        self._setup([rid for rid, _ in ordered], [pos for _, (pos, _) in ordered], owners)
        self._uses = _uses((i, blocks) for i, (_, (_, blocks)) in enumerate(ordered))
        self._holders: dict | None = None

    @classmethod
    def ranked(cls, index: UseIndex, position: Mapping[str, float],
               owners: Mapping[str, Sequence[Hashable]] | None = None) -> "TraceFuture":
        """The oracle of ``TraceFuture({rid: (position[rid], keys)}, owners)`` for the requests of
        ``index`` (in its order, which breaks ties of position as the mapping's order does)."""
        self = cls.__new__(cls)
        rank = sorted(range(len(index.ids)), key=lambda j: position[index.ids[j]])
        self._setup([index.ids[j] for j in rank], [position[index.ids[j]] for j in rank], owners)
        self._rank = [0] * len(rank)
        for i, j in enumerate(rank):
            self._rank[j] = i
        self._uses = {}
        self._holders = index.holders
        return self

    def _setup(self, ordered: list[str], position: list[float], owners) -> None:
        self._index = {rid: i for i, rid in enumerate(ordered)}
        self._position = position
        self._consumed = bytearray(len(ordered))
        self._cursor: dict[Hashable, int] = {}
        owners = owners or {}
        self._calls = _uses((i, owners.get(rid, ())) for i, rid in enumerate(ordered))
        self._call_cursor: dict[Hashable, int] = {}
        self._bound: dict[int, str] = {}

    def bind(self, submission_index: int, request_id: str) -> None:
        """Tell the oracle that the engine's request number ``submission_index`` is ``request_id``."""
        self._bound[submission_index] = request_id

    def consume(self, request_id: str) -> None:
        """Mark a request as served (its blocks' use at that request is now past). Unknown ids are ignored."""
        i = self._index.get(request_id)
        if i is not None:
            self._consumed[i] = 1

    def serve(self, now_index: int) -> float | None:
        """Consume the request bound to submission index ``now_index`` (:meth:`bind`), as
        :meth:`next_use` does first; returns its reference position, or ``None`` when none is bound
        (any longer). A unit whose next use was another request's keeps it (``opt`` skips it)."""
        rid = self._bound.pop(now_index, None)
        if rid is None:
            return None
        self.consume(rid)
        i = self._index.get(rid)
        return self._position[i] if i is not None else None

    def next_use(self, key: Hashable, now_index: int = -1) -> float:
        """Reference position of the earliest unserved request whose prompt holds ``key``; ``math.inf`` if none.

        ``now_index`` is the engine's submission index of the request being served now; if it was
        bound (:meth:`bind`), that request is consumed first, so its own use does not count.
        """
        rid = self._bound.pop(now_index, None)
        if rid is not None:
            self.consume(rid)
        if self._holders is not None and key not in self._uses:  # ranked(): sort its uses now
            held = self._holders.get(key)
            if held is None:
                return math.inf
            rank = self._rank
            self._uses[key] = sorted([rank[j] for run in held for j in run])
        return self._first(self._uses, self._cursor, key)

    def next_call(self, owner: Hashable) -> float:
        """Reference position of ``owner``'s earliest unserved request (a request counts as served
        from its first token on: one waiting or in prefill is still ahead); ``math.inf`` if it
        has none left (or is unknown). Consumes nothing."""
        return self._first(self._calls, self._call_cursor, owner)

    def _first(self, uses: dict, cursor: dict, key: Hashable) -> float:
        lst = uses.get(key)
        if lst is None:
            return math.inf
        i = cursor.get(key, 0)
        n = len(lst)
        consumed = self._consumed
        while i < n and consumed[lst[i]]:
            i += 1
        cursor[key] = i
        return self._position[lst[i]] if i < n else math.inf


def _uses(items) -> dict[Hashable, array]:
    """``key -> indices (ascending) of the requests that hold it`` from ``(index, keys)`` pairs in
    ascending index order (a key listed twice by one request counts once)."""
    uses: dict[Hashable, array] = {}
    for i, keys in items:
        for key in set(keys):
            lst = uses.get(key)
            if lst is None:
                uses[key] = lst = array("l")
            lst.append(i)
    return uses


def _held_ranges(requests: Iterable[Sequence[Hashable]]) -> dict[Hashable, list[range]]:
    """``key -> ranges`` (ascending) of the positions in ``requests`` (each a list of keys) that
    hold it; a key listed twice by one request counts once.

    A run of a key opens at the first request of a row that holds it and closes at the first one
    after that does not: each request is compared with the one before, which it mostly extends
    (all keys but the last, a partial block's, and more after them: one comparison made in C),
    and only the keys that come or go are handled, in C too (``map``, ``zip``), not each of its
    keys as one Python step."""
    opened: dict[Hashable, int] = {}  # key -> first position of its open run
    closed: list[tuple[Hashable, range]] = []  # (key, run) in the order the runs close
    prev: Sequence[Hashable] = ()
    held: set = set()  # the keys of prev
    i = -1
    for i, keys in enumerate(requests):
        p = len(prev) - 1
        if p >= 0 and len(keys) > p and keys[:p] == prev[:p]:  # prev's keys but its last, then more
            tail = set(keys[p:])
            new = tail - held
            last = prev[-1]
            gone = () if last in tail or prev.index(last) < p else (last,)
            held |= new
            held.difference_update(gone)
        else:
            now = set(keys)
            new, gone, held = now - held, held - now, now
        if gone:
            closed.extend(zip(gone, map(range, map(opened.pop, gone), repeat(i))))
        opened.update(zip(new, repeat(i)))
        prev = keys
    closed.extend(zip(opened, map(range, opened.values(), repeat(i + 1))))
    holders: dict[Hashable, list[range]] = {}
    for key, run in closed:  # a key's runs close in ascending order
        runs = holders.get(key)
        if runs is None:
            holders[key] = [run]
        else:
            runs.append(run)
    return holders


def reference_order(
    durations: Sequence[Sequence[float]],
    gaps: Sequence[Sequence[float]],
    concurrency: int,
) -> list[list[float]]:
    """Submission times of every invocation in a timing-only closed-loop replay.

    Workflow ``w`` has invocations of recorded ``durations[w][j]`` seconds separated by tool gaps
    ``gaps[w][j]`` (gap after invocation j; the last entry is the trailing gap before its end). At
    most ``concurrency`` workflows run at once; the next workflow (in list order) starts when one
    ends.

    Returns:
        ``times[w][j]``, seconds from the replay start.

    Raises:
        ValueError: ``concurrency`` < 1.
    """
    if concurrency < 1:
        raise ValueError("concurrency must be >= 1")
    times: list[list[float]] = [[0.0] * len(d) for d in durations]
    slots = [0.0] * min(concurrency, len(durations))
    heapq.heapify(slots)
    for w, durs in enumerate(durations):
        t = heapq.heappop(slots)
        for j, d in enumerate(durs):
            times[w][j] = t
            t += max(0.0, d) + max(0.0, gaps[w][j])
        heapq.heappush(slots, t)
    return times
