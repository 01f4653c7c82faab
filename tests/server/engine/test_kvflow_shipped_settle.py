"""``kvflow-shipped`` re-ranks agent groups, not nodes, when the plan moves (issue 35 item 8).

Every node an agent tagged shares the agent's eviction pass, so a plan change used to re-file
every such node inside the next eviction (O(n): 70 ms p99 at 40k leaves). The nodes are now filed
by group (their set of agents) and a plan change re-ranks the groups. Counted, not timed: the
policy's re-filing requests during one eviction after a plan change stay a handful, and the
victims are still the smallest priority of all evictable nodes.
"""

from __future__ import annotations

import itertools
import random
import time

from pbkv_contract.hints import Hints
from pbkv_server.engine import AcquireRequest, EngineConfig, EngineStats, PrefixCache, ScoreBoard
from pbkv_server.engine.radix import DEVICE
from pbkv_server.engine.workflows import WorkflowTable
from pbkv_server.hardware.profiles import get_profile

AGENTS = "ABCDE"


class _Bench:
    """``leaves`` 8-token leaves of agents A..E (leaf i: agent i mod 5) under an app graph that is a
    cycle A -> B -> C -> D -> E -> A, and one walker workflow whose move changes every agent's
    steps (``benchmarks/eviction_scaling.py --plan`` at a small size)."""

    def __init__(self, leaves: int, host: int = 0) -> None:
        config = EngineConfig(profile=get_profile("h100-qwen2.5-32b"), policy="kvflow-shipped",
                              device_tokens=leaves * 8 + 8, host_tokens=host)
        self.cache = cache = PrefixCache(config, ScoreBoard(config.gamma, config.horizon), EngineStats(),
                                         time.perf_counter)
        self.table = WorkflowTable(cache.board, None, on_changed=cache.rescore)
        cache.set_app_graph("app", {a: [b] for a, b in zip(AGENTS, AGENTS[1:] + AGENTS[0])})
        self.walker = self.table.invocation(Hints("walker", "A", 0, "app"), (), 0.0)
        cache.hooks.on_invocation(self.walker, None)
        self.clock = itertools.count(1)
        self.step = 0
        for i in range(leaves):
            self.insert(i)

    def insert(self, i: int) -> None:
        wf = self.table.get(f"w{i % 7}") or self.table.invocation(Hints(f"w{i % 7}", "A", 0, "app"), (), 0.0)
        keys = [f"s{i}-{j}" for j in range(8)]
        got = self.cache.acquire(AcquireRequest(keys, [1] * 8, list(range(9)), 0, float(next(self.clock)), wf,
                                                AGENTS[i % 5], index=i))
        self.cache.release(got.end, 0)

    def walk(self) -> None:
        previous = self.walker.agent
        self.step += 1
        self.table.invocation(Hints("walker", AGENTS[self.step % 5], self.step, "app"), (), 0.0)
        self.cache.hooks.on_invocation(self.walker, previous)


def test_a_plan_change_re_files_a_handful_of_entries_not_every_node_of_an_agent():
    bench = _Bench(500)
    cache = bench.cache
    refiled = []
    reorder = cache.context.reorder

    def counting(node) -> None:
        refiled.append(node)
        reorder(node)

    cache.context.reorder = counting  # the policy's re-filing requests (the cache's own are not counted)
    counts = []
    for r in range(10):
        bench.walk()  # every agent's steps change: 100 nodes each
        refiled.clear()
        cache.evict_device(8)
        counts.append(len(refiled))
        bench.insert(500 + r)
    # re-filing every node of a changed agent was ~400-500 per eviction here; now only the nodes of
    # creation order 0 (the first leaf) are re-filed one by one
    assert max(counts) <= 2, counts


def test_victims_are_still_the_smallest_priority_while_the_plan_moves():
    rng = random.Random(3)
    bench = _Bench(300, host=300 * 8)
    cache, policy = bench.cache, bench.cache.policy
    for r in range(60):
        if rng.random() < 0.7:
            bench.walk()
        cache.policy.settle()
        leaves = [n for n in cache.tree.nodes() if n.tier == DEVICE and n.lock == 0 and n.n_dev_children == 0]
        victim = cache.peek_victim()
        assert policy.priority(victim) == min(policy.priority(n) for n in leaves)
        cache.evict_device(8 * rng.randint(1, 3))
        for i in range(rng.randint(1, 3)):
            bench.insert(1000 + 10 * r + i)
    assert cache.tree.host_tokens > 0  # the host tier was filled and evicted from on the way
