"""Regression cases 1, 2, 4 and 5 of docs/regressions.md (bugs reported in neighbouring radix-cache projects), on the
engine core's cache.

1. a lock walk that skips the matched node lets a running request's KV be evicted;
2. page size > 1: partial pages, empty nodes, token accounting;
4. eviction that rebuilds the heap or walks the tree (checked here for the victims: identical to a
   brute-force scan; the timing is printed by ``benchmarks/eviction_scaling.py``);
5. the host tier under pressure: a demotion without host room, and a prefetch whose room-making
   demotion needs the host room its own source occupies.
"""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pbkv_contract.hints import END_AGENT, Hints
from pbkv_server.engine import AcquireRequest, Engine, EngineConfig, EngineRequest, EngineStats, PrefixCache, ScoreBoard
from pbkv_server.engine.pages import to_units
from pbkv_server.engine.radix import DEVICE, HOST
from pbkv_server.engine.workflows import WorkflowTable

from .engine_helpers import PROFILE, TablePredictor

POLICIES = ("lru", "lae", "he", "pbkv", "kvflow")


def make_cache(policy: str, device: int, host: int = 0, **kw) -> PrefixCache:
    config = EngineConfig(profile=PROFILE, policy=policy, device_tokens=device, host_tokens=host, **kw)
    return PrefixCache(config, ScoreBoard(config.gamma, config.horizon), EngineStats())


def acquire_tokens(cache: PrefixCache, tokens: list[int], now: float = 0.0, page_size: int | None = None,
                   workflow=None, agent=None):
    """Acquire a token-id prompt (one block per token), in pages of ``page_size`` if given."""
    units = to_units(tokens, [1] * len(tokens), page_size)
    cum = [0, *itertools.accumulate(units.toks)]
    return cache.acquire(AcquireRequest(units.keys, units.toks, cum, units.tail, now, workflow, agent,
                                        uncached=units.tail))


def check_accounting(cache: PrefixCache) -> None:
    """Cached = evictable + protected on the device; tier totals; capacities; prefix closure."""
    nodes = list(cache.tree.nodes())
    device = sum(n.tokens for n in nodes if n.tier == DEVICE)
    host = sum(n.tokens for n in nodes if n.tier == HOST)
    protected = sum(n.tokens for n in nodes if n.tier == DEVICE and n.lock)
    evictable = sum(n.tokens for n in nodes if n.tier == DEVICE and not n.lock)
    assert (cache.tree.device_tokens, cache.tree.host_tokens) == (device, host)
    assert cache.locked_device_tokens == protected and evictable + protected == device
    assert device + cache.reserved_tokens <= cache.device_capacity and host <= cache.host_capacity
    assert all(n.lock >= 0 and n.tokens > 0 for n in nodes)
    assert all(n.parent.tier == DEVICE for n in nodes if n.tier == DEVICE)


# --------------------------------------------------------------------------- case 1


@pytest.mark.parametrize("policy", POLICIES)
def test_case1_a_locked_prefix_is_never_evicted_and_its_split_halves_are_released(policy):
    cache = make_cache(policy, device=1000)
    a = acquire_tokens(cache, list(range(1, 9)))
    cache.release(a.end, 0)
    b = acquire_tokens(cache, [1, 2, 3, 4, 9, 10, 11, 12])  # splits A: [1..4] -> [5..8], [9..12]
    cache.release(b.end, 0)
    a = acquire_tokens(cache, list(range(1, 9)))  # match A and lock it
    assert [n.keys for n in a.path] == [[1, 2, 3, 4], [5, 6, 7, 8]] and all(n.lock == 1 for n in a.path)
    assert cache.evict_device(1000) == 4  # only [9..12] can go
    assert [n.lock for n in a.path] == [1, 1] and all(n.tier == DEVICE for n in a.path)
    check_accounting(cache)
    cache.release(a.end, 0)
    assert all(n.lock == 0 for n in cache.tree.nodes())
    check_accounting(cache)


@pytest.mark.parametrize("policy", POLICIES)
def test_case1_variant_a_split_while_locked_releases_both_halves(policy):
    cache = make_cache(policy, device=1000)
    a = acquire_tokens(cache, list(range(1, 9)))  # locked while C arrives
    c = acquire_tokens(cache, [1, 2, 3, 4, 5, 6, 13, 14])  # splits A's node into [1..6] and [7, 8]
    keys = {tuple(n.keys): n.lock for n in cache.tree.nodes()}
    assert keys == {(1, 2, 3, 4, 5, 6): 2, (7, 8): 1, (13, 14): 1}
    cache.release(a.end, 0)  # A's original handle: its end node, now the lower half
    assert {tuple(n.keys): n.lock for n in cache.tree.nodes()} == {(1, 2, 3, 4, 5, 6): 1, (7, 8): 0, (13, 14): 1}
    cache.release(c.end, 0)
    assert all(n.lock == 0 for n in cache.tree.nodes())
    check_accounting(cache)


# --------------------------------------------------------------------------- case 2


def test_case2_pages_of_16_tokens_match_and_split_only_at_page_boundaries():
    cache = make_cache("lru", device=10_000)
    first = list(range(1000, 1040))  # 40 tokens: 2 whole pages + an 8-token tail
    got = acquire_tokens(cache, first, page_size=16)
    assert (got.new_tokens, cache.tree.device_tokens, cache.reserved_tokens) == (40, 32, 8)
    cache.release(got.end, 8)

    def matched(n_tokens: int) -> int:
        units = to_units(first[:n_tokens], [1] * n_tokens, 16)
        return sum(n.tokens for n in cache.tree.match(units.keys).path)

    assert [matched(n) for n in (0, 15, 16, 33)] == [0, 0, 16, 32]
    second = first[:20] + list(range(5000, 5030))  # shares 20 tokens with the first
    got = acquire_tokens(cache, second, page_size=16)
    assert got.device_hit == 16  # the shared page; the 4 shared tokens after it are not a page
    assert sorted(n.tokens for n in cache.tree.nodes()) == [16, 16, 32]  # split at 16, not at 20
    cache.release(got.end, got.new_tokens - 48 + 50 % 16)  # its tail: 50 % 16 = 2 tokens
    check_accounting(cache)


@pytest.mark.slow
@pytest.mark.parametrize("policy", POLICIES)
def test_case2_ten_thousand_random_operations_keep_whole_pages(policy):
    rng = random.Random(2)
    cache = make_cache(policy, device=2048, host=512)
    held: list = []
    pinned: list = []
    evicted_before = 0
    for _ in range(10_000):
        op = rng.random()
        if op < 0.4:
            n = rng.randint(0, 200)
            base = rng.choice([0, 0, 1000, 2000])  # shared prefixes
            prompt = [base + i for i in range(rng.randint(0, n))] + [rng.randint(10_000, 99_999) for _ in range(n)]
            units = to_units(prompt, [1] * len(prompt), 16)
            need = sum(units.toks) + units.tail
            if need > cache.device_capacity:
                continue
            got = acquire_tokens(cache, prompt, page_size=16)
            if got is not None:
                held.append((got, units.tail))
        elif op < 0.65 and held:
            got, tail = held.pop(rng.randrange(len(held)))
            cache.release(got.end, tail)
        elif op < 0.75:
            nodes = [n for n in cache.tree.nodes() if n.tier == DEVICE]  # a matched prefix to hold
            if nodes:
                node = rng.choice(nodes)
                cache.lock(node)
                pinned.append((node, node.tier))
        elif op < 0.85 and pinned:
            node, tier = pinned.pop(rng.randrange(len(pinned)))
            assert node.tier == tier and node.attached, "a pinned node moved"
            cache.unlock(node)
        else:
            cache.evict_device(rng.randint(1, 300))
            freed = cache.stats.evicted_tokens - evicted_before
            assert freed % 16 == 0, "only whole pages are evicted"
        evicted_before = cache.stats.evicted_tokens
        assert all(n.tokens % 16 == 0 and n.tokens > 0 for n in cache.tree.nodes())
        for node, tier in pinned:
            assert node.attached and node.tier == tier, "a pinned node moved"
        check_accounting(cache)


def test_case2_block_granularity_never_builds_zero_token_nodes():
    """A trace that spreads 3 tokens over 8 blocks: the 0-token blocks carry no node."""
    eng = Engine(EngineConfig(profile=PROFILE, policy="lru", device_tokens=100))
    eng.submit(EngineRequest("r", [f"h{i}" for i in range(8)], [0, 1, 0, 0, 1, 0, 0, 1], 1))
    while eng.busy:
        eng.step()
    assert [n.toks for n in eng.cache.tree.nodes()] == [[1, 1, 1]] and eng.stats.prompt_tokens == 3


# --------------------------------------------------------------------------- case 4


# lru stays in the fast lane; the other policies' full scans are slow (seconds each)
@pytest.mark.parametrize("policy", ["lru", *(pytest.param(p, marks=pytest.mark.slow) for p in ["lae", "he", "pbkv", "kvflow"])])
def test_case4_every_victim_is_the_lowest_priority_leaf_of_a_full_scan(policy):
    """Fill the device with 2,000 leaves of 64 tokens (distinct prefixes, 40 workflows), then 300
    rounds of "evict 64 tokens, insert a new 64-token sequence"; for he/pbkv, 1 % of the workflows
    get a new prediction before each round, so heap entries go stale. Every victim must be the
    evictable leaf a brute-force scan finds lowest by the policy's priority (last access times are
    distinct, so priorities never tie)."""
    rng = random.Random(4)
    predictor = TablePredictor()
    cache = make_cache(policy, device=2000 * 64 + 64)
    table = WorkflowTable(cache.board, predictor, predict=cache.policy.uses_predictions,
                          on_end=lambda wf, recs, status, reason: cache.rescore(recs), on_changed=cache.rescore)
    clock = itertools.count()
    workflows = [f"w{i}" for i in range(40)]

    def insert(i: int) -> None:
        wf_id = workflows[i % len(workflows)]
        wf = table.workflows.get(wf_id) or table.invocation(Hints(wf_id, "a", 0, "app"), (), 0.0)
        keys = [f"seq{i}-{j}" for j in range(64)]
        got = cache.acquire(AcquireRequest(keys, [1] * 64, list(range(65)), 0, float(next(clock)), wf, "a", index=i))
        cache.release(got.end, 0)

    for i in range(2000):
        insert(i)
    for round_ in range(300):
        if cache.policy.uses_predictions:
            for wf_id in rng.sample(workflows, max(1, len(workflows) // 100)):
                p = rng.random()
                predictor.table[wf_id] = [{"a": p, END_AGENT: 1 - p}] * 3
                table.invocation(Hints(wf_id, "a", round_ + 1, "app"), (), 0.0)
        leaves = [n for n in cache.tree.nodes() if n.tier == DEVICE and n.lock == 0 and n.n_dev_children == 0]
        expected = min(leaves, key=cache.policy.priority)
        assert cache.peek_victim() is expected
        assert cache.evict_device(64) == 64
        assert not expected.attached or expected.tier != DEVICE
        insert(2000 + round_)


# --------------------------------------------------------------------------- case 5


@pytest.mark.parametrize("policy", POLICIES)
def test_case5a_a_leaf_that_the_full_host_cannot_take_is_dropped_not_half_demoted(policy):
    cache = make_cache(policy, device=200, host=100)
    for i in range(9):  # host: nine 10-token nodes, all locked (in-flight loads)
        got = acquire_tokens(cache, list(range(100 * (i + 1), 100 * (i + 1) + 10)))
        cache.release(got.end, 0)
    cache.evict_device(90)
    host_nodes = [n for n in cache.tree.nodes() if n.tier == HOST]
    assert sum(n.tokens for n in host_nodes) == 90
    for n in host_nodes:
        cache.lock(n)
    got = acquire_tokens(cache, list(range(5000, 5040)))  # the unlocked 40-token device leaf L
    cache.release(got.end, 0)
    leaf = got.end
    fill = acquire_tokens(cache, list(range(7000, 7200)))  # 200 tokens: all 40 of L must go
    assert fill is not None
    assert not leaf.attached, "L is dropped from both tiers (the host has 10 free, 90 pinned)"
    assert all(n.tier == HOST and n.attached for n in host_nodes) and cache.tree.host_tokens == 90
    check_accounting(cache)


def test_case5b_a_prefetch_keeps_its_source_pinned_while_room_is_made():
    """Host 64 holds X (64 tokens, the top prefetch candidate) and has no free room. Device 138:
    after Y (64, anonymous, score 0) finished, Z (1 token, 20 outputs reserved) decodes with
    138 - 64 - 1 - 20 = 53 free, so X needs 11 more: the aggressive round displaces Y's last 11
    tokens, whose demotion needs host room that only X occupies. X is pinned by its own prefetch,
    so Y's tail is dropped instead of X, and X lands on the device. The room is computed with Z's
    whole output reserved at admission: the legacy engine model, pinned."""
    eng = Engine(EngineConfig(profile=PROFILE, policy="pbkv-aggressive", device_tokens=138, host_tokens=64,
                              rho=1.0, predictor=TablePredictor({"wx": [{"x": 1.0}] * 3}),
                              prefill_cost="linear", engine_model="legacy"))
    eng.submit(EngineRequest("x", [f"x{i}" for i in range(64)], [1] * 64, 1, Hints("wx", "x", 0, "app")))
    while eng.busy:
        eng.step()
    eng.cache.evict_device(64)  # X to the host, which is now full
    eng.submit(EngineRequest("y", [f"y{i}" for i in range(64)], [1] * 64, 1))  # Y: anonymous, score 0
    eng.submit(EngineRequest("z", ["z"], [1], 20))  # a long decode: prefetch rounds run
    while eng.busy:
        eng.step()
    nodes = {(n.keys[0], n.keys[-1]): n.tier for n in eng.cache.tree.nodes()}
    assert nodes == {("x0", "x63"): DEVICE, ("y0", "y52"): DEVICE, ("z", "z"): DEVICE}
    assert eng.stats.prefetched_tokens == 64 and eng.stats.dropped_tokens == 11 and eng.cache.tree.host_tokens == 0
    check_accounting(eng.cache)


_ops = st.lists(st.one_of(
    st.tuples(st.just("acquire"), st.integers(0, 5), st.integers(0, 3)),
    st.tuples(st.just("release"), st.integers(0, 50)),
    st.tuples(st.just("pin"), st.integers(0, 50)),
    st.tuples(st.just("unpin"), st.integers(0, 50)),
    st.tuples(st.just("evict"), st.integers(1, 80)),
    st.tuples(st.just("prefetch"), st.integers(1, 100)),
    st.tuples(st.just("end"), st.integers(0, 2)),
), min_size=10, max_size=60)


@pytest.mark.parametrize("policy", ["pbkv", "pbkv-aggressive", "kvflow", "he"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=_ops, host=st.sampled_from([0, 40, 120]))
def test_case5_interleaved_lock_unlock_prefetch_demote_evict_keep_every_count_exact(policy, ops, host):
    """Random interleavings on a 100-token device: acquiring prompts (shared prefixes, three
    workflows with predictions), releasing them, pinning and unpinning nodes of either tier,
    evicting, prefetch rounds and workflow ends. After every operation the tier and lock counts
    are exact, capacities hold, a pinned node is never dropped, and a pinned node is moved
    between tiers only by an admission that uses it (never by eviction or prefetch)."""
    predictor = TablePredictor({f"w{i}": [{"a": 0.6, "b": 0.3, END_AGENT: 0.1}] * 3 for i in range(3)})
    cache = make_cache(policy, device=100, host=host, rho=0.5)
    table = WorkflowTable(cache.board, predictor, predict=cache.policy.uses_predictions,
                          on_end=lambda wf, recs, status, reason: cache.rescore(recs), on_changed=cache.rescore)
    held, pins = [], []
    for n, op in enumerate(ops):
        if op[0] == "acquire":
            _, prompt, wf_i = op
            keys = [f"sys{j}" for j in range(3)] + [f"p{prompt}-{j}" for j in range(prompt % 4 + 1)]
            toks = [5] * len(keys)
            wf = None
            if wf_i < 3:
                wf = table.invocation(Hints(f"w{wf_i}", "a", n, "app"), (), float(n))
            cum = list(itertools.accumulate([0] + toks))
            got = cache.acquire(AcquireRequest(keys, toks, cum, 2, float(n), wf, "a", index=n))
            if got is not None:
                held.append(got)
                for i, (node, tier) in enumerate(pins):
                    if node in got.path:
                        pins[i] = (node, DEVICE)  # an admission may load a pinned host node
        elif op[0] == "release" and held:
            got = held.pop(op[1] % len(held))
            cache.release(got.end, 2)
        elif op[0] == "pin":
            nodes = list(cache.tree.nodes())
            if nodes:
                node = nodes[op[1] % len(nodes)]
                cache.lock(node)
                pins.append((node, node.tier))
        elif op[0] == "unpin" and pins:
            node, _ = pins.pop(op[1] % len(pins))
            cache.unlock(node)
        elif op[0] == "evict":
            cache.evict_device(op[1])
        elif op[0] == "prefetch":
            cache.now = float(n)
            cache.prefetch(op[1] / 1000)
        elif op[0] == "end":
            table.end(f"w{op[1]}")  # on_end re-files the workflow's nodes
        for node, tier in pins:
            assert node.attached and node.tier == tier, "a pinned node was dropped or moved"
        check_accounting(cache)
