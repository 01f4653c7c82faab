"""Prefetch from the host tier into idle device space (PBKV section 4): the one planner.

Prefetch runs only on decode-only steps, when PCIe is otherwise idle. Candidates are host nodes
whose parent is on the device (so the device tier stays prefix-closed), offered best first by the
policy's prefetch value (one-step value ``sum_w A_w(c) . P_w^(1)`` for pbkv). The budget is
S = min(S_a, S_bw):

- S_bw = PCIe bandwidth x the decode time of the stretch (tokens the link can move meanwhile);
- S_a = free device space + retired device cache + the rest of device nodes an eviction already
  took the tail of (``PrefixCache.condemned``: eviction is page-granular and frees only what an
  admission needs, where SGLang's whole-node eviction would have freed the rest): the
  conservative variant may evict these only, so no other active cache is displaced;
- the aggressive variant may in addition displace active cache whose Score(c) is below the
  candidate's, within a displacement budget (``rho`` x device capacity per window, kept by the
  ``pbkv-aggressive`` policy) and never cache it prefetched itself within the window.

:func:`run_round` is that greedy rule, written once: the engine core drives it over its live
prefetch heap with a room that evicts (:func:`conservative_prefetch`, :func:`aggressive_prefetch`),
and an engine backend drives it over the candidates it scanned with a room it counted (the SGLang
plugin's ``load_back`` rounds). See ``docs/architecture.md``, "Prefetch".

A policy never runs a round: it hands the cache a plan (:mod:`.policies.plan`), and
:func:`run_plan` carries it out, here, where the cache is driven: a :class:`~.policies.plan.HeapPlan`
(the greedy rule above) or a :class:`~.policies.plan.ChainPlan` (KVFlow's loads of whole paths).
"""

from __future__ import annotations

import sys
from operator import attrgetter
from dataclasses import dataclass
from typing import Callable, Generic, Iterator, NamedTuple, Protocol, Sequence, TypeVar

from .policies.base import EvictionOrder
from .policies.plan import ChainPlan, HeapPlan, PrefetchPlan, VictimLimit
from .radix import HOST, Node

__all__ = ["run_plan", "run_round", "RoundResult", "PrefetchRoom", "PrefetchOutcome", "conservative_prefetch",
           "aggressive_prefetch", "MAX_CANDIDATES"]

#: Most candidates examined per engine round (bounds the decision time; skipped ones stay queued).
MAX_CANDIDATES = 64

C = TypeVar("C")


class PrefetchCandidates(Protocol):
    """The prefetch heap of the cache (:class:`~pbkv_server.engine.heaps.EvictionHeaps`)."""

    def take_prefetch(self) -> Node | None: ...

    def take_prefetches(self) -> Iterator[Node]: ...

    def return_prefetch(self, unused: Sequence[Node]) -> None: ...


class LoadingCache(Protocol):
    """What a prefetch round drives: the prefix cache's loading and eviction primitives (the
    :class:`~pbkv_server.engine.cache.PrefixCache` provides them; declared here so that this
    module needs no import of the cache, which imports it)."""

    policy: EvictionOrder
    heaps: PrefetchCandidates

    def device_free(self) -> int: ...

    def load_tokens(self, seconds: float) -> int: ...

    def load(self, node: Node) -> bool: ...

    def evict_for(self, node: Node, tokens: int, limit: VictimLimit | None = None, loads: bool = False) -> int: ...

    def condemned(self, node: Node) -> bool: ...


class PrefetchRoom(Protocol[C]):
    """Device room for one prefetch round.

    ``free()`` is what a candidate may use without evicting, tokens; ``make_room(short, c)`` may
    evict (within the round's rules) to free ``short`` more tokens for candidate ``c``. The
    planner checks ``free()`` again afterwards.
    """

    def free(self) -> int: ...

    def make_room(self, short: int, candidate: C) -> None: ...


@dataclass(slots=True)
class RoundResult(Generic[C]):
    """What one round did.

    Attributes:
        loads: candidates loaded; loaded_tokens: their tokens.
        examined: candidates taken from the iterator.
        skipped: examined candidates not loaded (the caller may offer them again later).
    """

    loads: int
    loaded_tokens: int
    examined: int
    skipped: list


def run_round(candidates: Iterator[C], *, size: Callable[[C], int], bandwidth_tokens: int,
              room: PrefetchRoom[C], load: Callable[[C], bool], max_examined: int = MAX_CANDIDATES,
              max_loads: int | None = None) -> RoundResult[C]:
    """Greedy prefetch: take candidates best first while the budget ``min(S_a, S_bw)`` lasts.

    A candidate larger than the bandwidth left is skipped (smaller ones may follow). One that does
    not fit the free room asks the room to make space; once that fails, later candidates use free
    room only (the room's victims come in eviction order, so a refusal means none is left).

    Args:
        candidates: best first; may grow while the round runs (a loaded node's host children).
        size: tokens of a candidate.
        bandwidth_tokens: S_bw, tokens PCIe can move in this round.
        room: the round's device room (S_a).
        load: loads a candidate; returns False if it could not (it then counts as skipped).
        max_examined: most candidates taken from ``candidates``.
        max_loads: most candidates loaded (``None`` = no limit).
    """
    budget = bandwidth_tokens
    loads = loaded = examined = 0
    skipped: list = []
    skip = skipped.append
    exhausted = False
    if max_loads is None:
        max_loads = sys.maxsize
    # The room changes only by a load or by making room, so ``free`` is read again only after
    # those: once room is exhausted most candidates of a round are skipped, and each costs only
    # this loop's few steps.
    free = room.free()
    for cand in candidates:
        examined += 1
        n = size(cand)
        if n > budget:
            skip(cand)
        elif n > free and (exhausted or (free := _make_room(room, n, cand)) < n):
            exhausted = True
            skip(cand)
        else:
            ok = load(cand)
            free = room.free()
            if ok:
                loads += 1
                loaded += n
                budget -= n
            else:
                skip(cand)
        if examined >= max_examined or budget <= 0 or loads >= max_loads:
            break
    return RoundResult(loads, loaded, examined, skipped)


class PrefetchOutcome(NamedTuple):
    """What an engine prefetch round did: ``loaded`` tokens brought to the device, ``displaced``
    tokens of active cache evicted to make room (retired cache freed is not counted)."""

    loaded: int
    displaced: int


def conservative_prefetch(cache: LoadingCache, seconds: float) -> int:
    """Prefetch for a decode-only stretch of ``seconds``; never evicts active cache.

    Returns:
        Tokens loaded to the device.
    """
    return _engine_round(cache, cache.load_tokens(seconds), _EvictingRoom(cache, 0)).loaded


def aggressive_prefetch(cache: LoadingCache, seconds: float, displace_tokens: int,
                        protected: Callable[[Node], bool] = lambda node: False,
                        on_load: Callable[[Node], None] | None = None) -> PrefetchOutcome:
    """Like :func:`conservative_prefetch`, but may also displace lower-score active cache.

    Args:
        cache: the engine's cache.
        seconds: length of the decode-only stretch (sets S_bw).
        displace_tokens: most tokens of active cache this round may evict (>= 0).
        protected: active nodes that must not be displaced (the policy's own recent prefetches).
        on_load: called with each node loaded.
    """
    return _engine_round(cache, cache.load_tokens(seconds), _EvictingRoom(cache, max(0, displace_tokens), protected),
                         on_load)


def run_plan(cache: LoadingCache, seconds: float, plan: PrefetchPlan) -> None:
    """Carry out a policy's prefetch plan for a decode-only stretch of ``seconds`` on ``cache``."""
    if isinstance(plan, HeapPlan):
        outcome = aggressive_prefetch(cache, seconds, plan.displace_tokens, plan.protected, plan.on_load)
        if plan.on_done is not None:
            plan.on_done(outcome.displaced)
    elif plan.evicts:
        _evicting_chains(cache, cache.load_tokens(seconds), plan)
    else:
        _free_chains(cache, cache.load_tokens(seconds), plan)


# --------------------------------------------------------------------------- engine glue


def _host_path(target: "Node | None") -> list:
    """The host-tier nodes on the path from ``target`` up to its first device ancestor, root side first."""
    chain = []
    node = target
    while node is not None and node.parent is not None and node.tier == HOST:
        chain.append(node)
        node = node.parent
    chain.reverse()
    return chain


def _free_chains(cache: LoadingCache, bandwidth: int, plan: ChainPlan) -> None:
    """A :class:`ChainPlan` into free room only: a load that does not fit ends its target's path."""
    budget = min(bandwidth, cache.device_free())
    for target, _ in plan.targets:
        if budget <= 0:
            continue
        for node in _host_path(target):
            if node.tokens > budget or not cache.load(node):  # no budget, or pinned
                break
            budget -= node.tokens


def _evicting_chains(cache: LoadingCache, budget: int, plan: ChainPlan) -> None:
    """A :class:`ChainPlan` that may evict what each target's limit allows; the round ends at the
    first load that does not fit (the fork's ``to_break``)."""
    if budget <= 0:
        return
    for target, limit in plan.targets:
        for node in _host_path(target):
            if not node.attached:
                break  # dropped from a full host tier while room was made for its parent
            if node.tokens > budget:
                return  # the stretch's PCIe time is spent
            if not _room_for(cache, node, limit) or not cache.load(node):
                return
            budget -= node.tokens


def _room_for(cache: LoadingCache, node: Node, limit: VictimLimit | None) -> bool:
    """Free device room for host node ``node``, evicting only victims ``limit`` allows."""
    short = node.tokens - cache.device_free()
    if short <= 0:
        return True
    if limit is None:
        return False
    cache.evict_for(node, short, limit)
    return cache.device_free() >= node.tokens



def _make_room(room: PrefetchRoom, n: int, cand) -> int:
    room.make_room(n - room.free(), cand)
    return room.free()


class _EvictingRoom:
    """The engine cache's room: free device tokens, plus victims the round's rule allows. For
    :func:`run_round` only, which loads a candidate next once its room is made (so the cache
    files neither it nor its parent when it unlocks them: ``PrefixCache.evict_for``'s ``loads``)."""

    def __init__(self, cache: LoadingCache, displace_tokens: int,
                 protected: Callable[[Node], bool] = lambda node: False) -> None:
        self.cache = cache
        self.displace_tokens = displace_tokens
        self.protected = protected
        self.displaced = 0

    def free(self) -> int:
        return self.cache.device_free()

    def make_room(self, short: int, node: Node) -> None:
        cache = self.cache
        score = node.sc.score if node.sc is not None else 0.0
        policy = cache.policy

        def may_evict(victim: Node, tokens: int) -> bool:
            if policy.is_retired(victim) or cache.condemned(victim):
                return True
            victim_score = victim.sc.score if victim.sc is not None else 0.0
            if (self.displaced + tokens <= self.displace_tokens and victim_score < score
                    and not self.protected(victim)):
                self.displaced += tokens
                return True
            return False

        # run_round loads the node next once its room is made (its test: free room >= its size)
        cache.evict_for(node, short, may_evict, loads=True)


def _engine_round(cache: LoadingCache, budget: int, room: _EvictingRoom,
                  on_load: Callable[[Node], None] | None = None) -> PrefetchOutcome:
    """One round over the cache's prefetch heap; skipped candidates go back to the heap."""
    if budget <= 0:
        return PrefetchOutcome(0, 0)

    def load(node: Node) -> bool:
        if not cache.load(node):  # pinned: refused by the cache, stays queued
            return False
        if on_load is not None:
            on_load(node)
        return True

    heaps = cache.heaps
    result = run_round(heaps.take_prefetches(), size=_tokens, bandwidth_tokens=budget, room=room, load=load)
    heaps.return_prefetch(result.skipped)
    return PrefetchOutcome(result.loaded_tokens, room.displaced)


_tokens = attrgetter("tokens")  # a node's tokens (in C: read for every candidate of a round)
