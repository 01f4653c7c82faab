"""Feeds the prefix cache's admissions to the LRU guard (:mod:`~pbkv_server.engine.guard`).

:class:`GuardFeed` is an :class:`~pbkv_server.engine.acquire.AcquireObserver`: the cache tells it
what it admitted and which outputs it kept, and it replays them in the guard's ghost LRU at the
room the real cache had. The guard owns the fallback state, which the policy reads as its
``order_guard``; when the guard switches between the predicted order and LRU's, the feed has the
cache re-file every node under the new order
(:meth:`~pbkv_server.engine.cache.PrefixCache.reorder`), since the heaps hold priorities of the
old one. The guard's decision is the guard's; this module only carries data to it.
"""

from __future__ import annotations

from typing import Protocol, Sequence

from .acquire import Acquired, AcquireRequest
from .guard import LRUGuard
from .types import EngineStats

__all__ = ["GuardFeed"]


class GuardedCache(Protocol):
    """What the feed reads of the cache it observes (the prefix cache provides it; declared here
    so that this module needs no import of the cache, which imports it)."""

    stats: EngineStats
    device_capacity: int

    @property
    def reserved_tokens(self) -> int: ...

    def latency_clock(self) -> float: ...

    def reorder(self) -> None: ...


class GuardFeed:
    """The LRU guard of one cache, observing its admissions and cached outputs.

    Args:
        guard: the guard (owns the ghost LRU and the fallback state).
        cache: the cache observed (its room, stats, latency clock, and re-filing at a switch).
    """

    __slots__ = ("guard", "_cache")

    def __init__(self, guard: LRUGuard, cache: GuardedCache) -> None:
        self.guard = guard
        self._cache = cache

    def admitted(self, req: AcquireRequest, got: Acquired) -> None:
        """Replay the admission in the ghost; on a mode switch, re-file the cache (timed in
        ``stats.guard_decision_s``, counted in ``stats.guard_switches``)."""
        cache = self._cache
        stats = cache.stats
        t0 = cache.latency_clock()
        guard = self.guard
        room = cache.device_capacity - cache.reserved_tokens
        wf = req.workflow
        if guard.observe(wf.app if wf is not None else None, req.blocks, req.toks, room, req.prompt_tokens,
                         got.device_hit, req.count, got.host_hit):
            stats.guard_switches += 1
            cache.reorder()
        stats.guard_ghost_hit_tokens = guard.ghost.hit_tokens
        stats.guard_ghost_host_hit_tokens = guard.ghost.host_hit_tokens
        stats.guard_decision_s.append(cache.latency_clock() - t0)

    def output_cached(self, keys: Sequence, toks: Sequence[int]) -> None:
        """The output takes room in LRU's cache too (never a hit)."""
        cache = self._cache
        self.guard.ghost.admit(keys, toks, cache.device_capacity - cache.reserved_tokens, count=False)

    def held(self, room: int) -> None:
        """The real cache made room for decoded KV (engine model ``sglang``); LRU would have
        evicted for it too, so the ghost shrinks to the same room. Under ``legacy`` the whole output
        was reserved at admission, where :meth:`admitted` already gave the ghost that room."""
        self.guard.ghost.shrink(room)

    def released(self, end) -> None:
        """The ghost unpins the request's prompt too (it pinned it in :meth:`admitted`, as the
        real cache locks a running request's path)."""
        self.guard.release(end.keys[-1])
