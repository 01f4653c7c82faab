"""The engine core's cache on its own (no scheduler): acquire/release accounting, policy-ordered
eviction and demotion, refusal without side effects, and the one prefetch planner ``run_round``.

Every expected figure is worked out by hand from the capacities and block sizes in the test.
"""

from __future__ import annotations

import itertools

from pbkv_server.engine import AcquireRequest, EngineConfig, EngineStats, PrefixCache, ScoreBoard
from pbkv_server.engine.prefetch import run_round
from pbkv_server.engine.radix import DEVICE, HOST

from .engine_helpers import PROFILE, chain


def make_cache(policy: str = "lru", device: int = 100, host: int = 0) -> PrefixCache:
    config = EngineConfig(profile=PROFILE, policy=policy, device_tokens=device, host_tokens=host)
    return PrefixCache(config, ScoreBoard(config.gamma, config.horizon), EngineStats())


def acquire(cache: PrefixCache, labels, tokens: int = 10, reserve: int = 1, now: float = 0.0, index: int = 0):
    keys = chain(labels)
    toks = [tokens] * len(keys)
    cum = [0, *itertools.accumulate(toks)]
    return cache.acquire(AcquireRequest(keys, toks, cum, reserve, now, index=index))


def test_acquire_locks_the_prefix_and_release_frees_it():
    cache = make_cache(device=100)
    got = acquire(cache, "abc", reserve=5)
    assert (got.device_hit, got.host_hit, got.load, got.new_tokens) == (0, 0, 0, 30)
    assert cache.tree.device_tokens == 30 and cache.reserved_tokens == 5 and cache.locked_device_tokens == 30
    assert cache.device_free() == 100 - 30 - 5
    again = acquire(cache, "abd", reserve=5, now=1.0)  # shares "ab": 20 tokens hit, the node splits
    assert (again.device_hit, again.new_tokens) == (20, 10)
    assert cache.locked_device_tokens == 40 and cache.stats.device_hit_tokens == 20
    cache.release(got.end, 5)
    cache.release(again.end, 5)
    assert cache.locked_device_tokens == 0 and cache.reserved_tokens == 0
    assert all(n.lock == 0 for n in cache.tree.nodes())


def test_a_prompt_that_does_not_fit_beside_locked_cache_is_refused_without_change():
    cache = make_cache(device=100)
    first = acquire(cache, "abcdefgh", reserve=1)  # 80 tokens locked + 1 reserved
    before = (cache.tree.device_tokens, cache.reserved_tokens, cache.locked_device_tokens, cache.stats.prompt_tokens)
    assert acquire(cache, "xyz", reserve=1) is None  # needs 31, only 19 can be freed
    assert (cache.tree.device_tokens, cache.reserved_tokens, cache.locked_device_tokens,
            cache.stats.prompt_tokens) == before
    cache.release(first.end, 1)
    assert acquire(cache, "xyz", reserve=1) is not None  # now the unlocked 80 tokens can go


def test_lru_evicts_the_least_recently_used_leaf_and_demotes_it_to_the_host():
    cache = make_cache("lru", device=60, host=100)
    # three 20-token prompts at t = 0, 1, 2; "ef" needs 21 with 20 free: the tail block of "ab" goes
    for t, labels in enumerate(("ab", "cd", "ef")):
        cache.release(acquire(cache, labels, now=float(t)).end, 1)
    assert cache.stats.evictions == 1 and cache.stats.evicted_tokens == 10
    got = acquire(cache, "gh", now=3.0)  # needs 21 with 10 free: "a" (10), then one block of "cd"
    assert got is not None and cache.stats.evictions == 3 and cache.stats.evicted_tokens == 30
    tiers = {k: n.tier for n in cache.tree.nodes() for k in n.keys}
    ab, cd, ef = chain("ab"), chain("cd"), chain("ef")
    assert [tiers[k] for k in ab] == [HOST, HOST] and [tiers[k] for k in cd] == [DEVICE, HOST]
    assert [tiers[k] for k in ef] == [DEVICE, DEVICE]
    assert cache.tree.host_tokens == 30 and cache.stats.dropped_tokens == 0
    cache.release(got.end, 1)
    back = acquire(cache, "ab", now=4.0)  # found on the host: loaded back at admission
    assert (back.device_hit, back.host_hit, back.load) == (0, 20, 20)


def test_without_a_host_tier_eviction_drops_the_node():
    cache = make_cache("lru", device=40, host=0)
    cache.release(acquire(cache, "ab").end, 1)
    cache.release(acquire(cache, "cd", now=1.0).end, 1)
    assert acquire(cache, "e", now=2.0) is not None
    assert cache.stats.dropped_tokens == 20 and cache.tree.host_tokens == 0


class _Room:
    def __init__(self, free: int, extra: int = 0) -> None:
        self.left, self.extra, self.asked = free, extra, []

    def free(self) -> int:
        return self.left

    def make_room(self, short: int, candidate) -> None:
        self.asked.append((candidate, short))
        freed = min(short, self.extra)
        self.extra -= freed
        self.left += freed


def _run(sizes: dict, bandwidth: int, room: _Room, **kw):
    loaded = []

    def load(c) -> bool:
        loaded.append(c)
        room.left -= sizes[c]
        return True

    result = run_round(iter(sizes), size=sizes.get, bandwidth_tokens=bandwidth, room=room, load=load, **kw)
    return loaded, result


def test_run_round_takes_candidates_best_first_within_bandwidth_and_room():
    # bandwidth 50: a (30) fits; b (30) exceeds the 20 left; c (15) fits; d (10) exceeds the 5 left
    loaded, result = _run({"a": 30, "b": 30, "c": 15, "d": 10}, 50, _Room(100))
    assert loaded == ["a", "c"] and result.loaded_tokens == 45 and result.skipped == ["b", "d"]


def test_run_round_asks_for_room_once_then_uses_free_room_only():
    room = _Room(free=10, extra=25)
    # a (30): short 20, the room frees 20 -> loaded, room 0 left; b (20): short 20 but only 5 more
    # can be freed -> refused, the round is exhausted; c (5) fits the 5 now free; d (8) would need
    # room again -> skipped without asking
    loaded, result = _run({"a": 30, "b": 20, "c": 5, "d": 8}, 1000, room)
    assert loaded == ["a", "c"] and result.skipped == ["b", "d"]
    assert room.asked == [("a", 20), ("b", 20)]  # no third request after the refusal


def test_run_round_stops_at_its_limits():
    sizes = {i: 1 for i in range(100)}
    assert _run(sizes, 1000, _Room(1000), max_loads=16)[1].loads == 16
    assert _run(sizes, 1000, _Room(1000), max_examined=10)[1].examined == 10
    assert _run(sizes, 3, _Room(1000))[1].loads == 3  # bandwidth used up



def _reference_round(sizes: dict, bandwidth: int, room: _Room, refuse: set, max_examined: int, max_loads):
    """The greedy rule as the module docstring states it, reading the room at every candidate."""
    loaded, skipped, examined, budget, exhausted = [], [], 0, bandwidth, False
    for c in sizes:
        examined += 1
        n = sizes[c]
        if n > budget:
            skipped.append(c)
        elif n > room.free() and (exhausted or (room.make_room(n - room.free(), c), room.free())[1] < n):
            exhausted = True
            skipped.append(c)
        elif c in refuse:
            skipped.append(c)
        else:
            loaded.append(c)
            room.left -= n
            budget -= n
        if examined >= max_examined or budget <= 0 or (max_loads is not None and len(loaded) >= max_loads):
            break
    return loaded, skipped, examined


def test_run_round_matches_the_rule_read_candidate_by_candidate():
    # run_round reads the room again only after a load or after making room: every decision must
    # be the one a round reading it at each candidate makes (random rounds, refused loads included)
    import random

    rng = random.Random(7)
    for _ in range(500):
        sizes = {i: rng.randint(0, 40) for i in range(rng.randint(0, 30))}
        refuse = {c for c in sizes if rng.random() < 0.15}
        bandwidth, free, extra = rng.randint(0, 300), rng.randint(0, 120), rng.randint(0, 80)
        max_examined, max_loads = rng.randint(1, 40), rng.choice([None, 0, 1, 3, 10])
        want_room = _Room(free, extra)
        want = _reference_round(sizes, bandwidth, want_room, refuse, max_examined, max_loads)
        room, loaded = _Room(free, extra), []

        def load(c) -> bool:
            if c in refuse:
                return False
            loaded.append(c)
            room.left -= sizes[c]
            return True

        got = run_round(iter(sizes), size=sizes.get, bandwidth_tokens=bandwidth, room=room, load=load,
                        max_examined=max_examined, max_loads=max_loads)
        assert (loaded, got.skipped, got.examined) == want
        assert got.loads == len(loaded) and got.loaded_tokens == sum(sizes[c] for c in loaded)
        assert room.asked == want_room.asked and room.left == want_room.left

def test_tail_units_take_the_fewest_last_units_that_hold_the_need():
    from types import SimpleNamespace

    def units(toks, need):
        return PrefixCache._tail_units(SimpleNamespace(toks=toks, tokens=sum(toks)), need)

    # toks 4, 3, 2 from the top: the tail 2 holds 2, 3+2 holds 5, all three hold 9
    assert [units([4, 3, 2], need) for need in (1, 2, 3, 5, 6, 9, 100)] == [1, 1, 2, 2, 3, 3, 3]
    # zero-token units at the top: the 5-token tail alone holds 5; 6 needs (and gets) the whole node
    assert units([0, 0, 5], 5) == 1 and units([0, 0, 5], 6) == 3
    # blocks of one size but the last (a trace's prompt): 5, 5+16=21, 5+32=37, 5+48=53 from the end
    assert [units([16, 16, 16, 16, 5], need) for need in (5, 6, 21, 22, 37, 38, 53)] == [1, 2, 2, 3, 3, 4, 4]
    # sizes that vary: 3, 3+1=4, 4+40=44 from the end (the guess from the unit above the last is wrong)
    assert [units([9, 1, 40, 1, 3], need) for need in (3, 4, 5, 10, 44)] == [1, 2, 3, 3, 3]
    # a zero-token unit above the last: 2, 2, 32 from the end
    assert [units([7, 30, 0, 2], need) for need in (2, 3, 32)] == [1, 3, 3]


def test_units_holding_counts_the_fewest_last_units_up_to_most():
    from pbkv_server.engine.eviction import _units_holding

    def units(toks, most, need):
        return _units_holding(toks, len(toks), most, need)

    # blocks of one size but the last: 5, 21, 37, 53 from the end (the guess is right)
    assert [units([16, 16, 16, 16, 5], 5, need) for need in (6, 21, 22, 37, 38, 53, 54)] == [2, 2, 3, 3, 4, 4, 5]
    # at most `most`: 37 is held by 3 units, 38 and anything past the last 3 units' 37 gives 3
    assert [units([16, 16, 16, 16, 5], 3, need) for need in (22, 37, 38, 1000)] == [3, 3, 3, 3]
    # sizes that vary (the guess from the unit above the last is wrong): 3, 4, 44, 53 from the end
    assert [units([9, 40, 1, 3], 4, need) for need in (4, 5, 44, 45, 53, 54)] == [2, 3, 3, 4, 4, 4]
    # a zero-token unit above the last (no guess): 2, 2, 32, 39 from the end
    assert [units([7, 30, 0, 2], 4, need) for need in (3, 32, 33, 39)] == [3, 3, 4, 4]
    # the guess says more than `most`, yet `most` units hold the need: 1, 1+1=2, 2+50=52
    assert units([50, 1, 1], 3, 40) == 3 and units([50, 50, 1, 1], 3, 40) == 3
    assert units([1, 50, 1, 1], 3, 40) == 3 and units([1, 50, 1, 1], 4, 53) == 4
