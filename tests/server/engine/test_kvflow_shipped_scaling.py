"""``kvflow-shipped`` re-files the nodes of an agent whose steps changed when the cache next reads
its heaps, not at every change (issue 27, item 14: re-filing at once made filling a tree
quadratic). The decisions must be those of the old implementation, kept here as the reference:
identical victims, tree and counters on seeded random workloads."""

from __future__ import annotations

import random

import pytest

from pbkv_contract.hints import Hints
from pbkv_server.engine import Engine, EngineConfig, EngineRequest
from pbkv_server.engine.policies import register_policy, unregister_policy
from pbkv_server.engine.policies.kvflow_shipped import ShippedKVFlowPolicy

from .engine_helpers import PROFILE

REFERENCE = "kvflow-shipped-reference"
GRAPH = {"A": ["B"], "B": ["C", "D"], "C": ["A"], "D": []}


class _Reference(ShippedKVFlowPolicy):
    """The old implementation: every change of an agent's steps re-files all nodes tagged with it
    at once (in the order they were tagged), each node ranked alone (no groups: issue 35 item 8),
    and nothing is pending when the cache reads its heaps."""

    summary = "kvflow-shipped before issue 27 (test reference)"

    def __init__(self, context) -> None:
        super().__init__(context)
        self._tagged: dict = {}  # (app, agent) -> {node: None}, in tagging order

    def group(self, node):
        return None

    def _tag(self, node, key) -> None:
        if key not in self._tags.get(node, ()):
            self._tagged.setdefault(key, {})[node] = None
        super()._tag(node, key)

    def on_drop(self, node) -> None:
        for key in self._tags.get(node, ()):
            self._tagged[key].pop(node, None)
        super().on_drop(node)

    def _steps_changed(self, key) -> None:
        for node in self._tagged.get(key, ()):
            self.context.reorder(node)

    def settle(self) -> None:
        pass


@pytest.fixture(scope="module", autouse=True)
def _reference_registered():
    register_policy(REFERENCE)(_Reference)
    yield
    unregister_policy(REFERENCE)


def _workload(seed: int, n: int = 300) -> list[tuple]:
    """Seeded operations: submit (workflows walking GRAPH with growing histories on shared system
    prompts, anonymous requests), run a few steps, end a workflow, force an eviction."""
    rng = random.Random(seed)
    at: dict[str, str] = {}
    history: dict[str, list] = {}
    turn: dict[str, int] = {}
    gen: dict[int, int] = {}
    ops = []
    for i in range(n):
        r = rng.random()
        if r < 0.55:
            if rng.random() < 0.15:
                blocks = [f"sys-{rng.choice('ABCD')}-{j}" for j in range(rng.randint(0, 2))]
                blocks += [f"anon{i}-{j}" for j in range(rng.randint(1, 3))]
                ops.append(("submit", f"r{i}", blocks, rng.randint(1, 12), None))
                continue
            slot = rng.randrange(6)
            wf = f"w{slot}.{gen.get(slot, 0)}"  # an ended workflow's slot starts a new id
            nexts = GRAPH[at[wf]] if wf in at else []
            agent = rng.choice(nexts) if nexts else "A"
            if not nexts:
                history[wf], turn[wf] = [], 0
            at[wf] = agent
            own = history.setdefault(wf, [])
            grow = [f"{wf}-{turn.get(wf, 0)}-{i}-{j}" for j in range(rng.randint(1, 3))]
            blocks = [f"sys-{agent}-{j}" for j in range(3)] + own + grow
            if rng.random() < 0.6:
                own.extend(grow)
            ops.append(("submit", f"r{i}", blocks, rng.randint(1, 12), Hints(wf, agent, turn.get(wf, 0), "app")))
            turn[wf] = turn.get(wf, 0) + 1
        elif r < 0.85:
            ops.append(("step", rng.randint(1, 4)))
        elif r < 0.93:
            slot = rng.randrange(6)
            wf = f"w{slot}.{gen.get(slot, 0)}"
            gen[slot] = gen.get(slot, 0) + 1
            at.pop(wf, None)
            ops.append(("end", wf))
        else:
            ops.append(("evict", rng.randint(10, 120)))
    return ops


def _run(policy: str, ops: list[tuple], host: int, cache_outputs: bool) -> list:
    """Apply ``ops``; returns every victim (device evictions and drops, in order) and, after every
    operation, the tree, the counters and the engine clock."""
    eng = Engine(EngineConfig(profile=PROFILE, policy=policy, device_tokens=300, host_tokens=host,
                              cache_outputs=cache_outputs))
    eng.set_app_graph("app", GRAPH)
    cache = eng.cache
    log: list = []
    count, drop = cache._count_eviction, cache._drop

    def counted(node):
        log.append(("evict", tuple(node.keys)))
        count(node)

    def dropped(node):
        log.append(("drop", tuple(node.keys)))
        drop(node)

    cache._count_eviction, cache._drop = counted, dropped
    for op in ops:
        if op[0] == "submit":
            _, rid, blocks, out, hints = op
            eng.submit(EngineRequest(rid, blocks, [10] * len(blocks), out, hints))
        elif op[0] == "step":
            for _ in range(op[1]):
                if eng.busy:
                    eng.step()
        elif op[0] == "end":
            eng.end_workflow(op[1])
        else:
            eng.cache.evict_device(op[1])
        tree = sorted((tuple(n.keys), n.tier, n.lock) for n in eng.cache.tree.nodes())
        s = eng.stats
        log.append((tree, s.evictions, s.evicted_tokens, s.dropped_tokens, s.prefetched_tokens, eng.clock))
    while eng.busy:
        eng.step()
    log.append(sorted((tuple(n.keys), n.tier) for n in eng.cache.tree.nodes()))
    return log


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("host,cache_outputs", [(0, False), (250, False), (250, True)])
def test_deferred_refiling_takes_the_same_victims_as_refiling_at_once(seed, host, cache_outputs):
    ops = _workload(seed)
    new = _run("kvflow-shipped", ops, host, cache_outputs)
    old = _run(REFERENCE, ops, host, cache_outputs)
    assert sum(1 for e in old if e[0] in ("evict", "drop")) > 20  # the workload does evict
    assert new == old


def _fill_refreshes(policy: str, leaves: int) -> int:
    """Re-filings the policy asks for (``context.reorder`` calls) while caching ``leaves`` 64-token prompts of one
    workflow walking A -> B -> C -> A: every invocation changes all three agents' steps, and
    nothing is evicted. (Counted rather than timed: deterministic on a shared machine;
    ``benchmarks/eviction_scaling.py --fill`` prints the times.)"""
    eng = Engine(EngineConfig(profile=PROFILE, policy=policy, device_tokens=64 * leaves + 64, host_tokens=0))
    eng.set_app_graph("app", {"A": ["B"], "B": ["C"], "C": ["A"]})
    calls = 0
    reorder = eng.cache.context.reorder

    def counted(node):
        nonlocal calls
        calls += 1
        reorder(node)

    eng.cache.context.reorder = counted  # the policy's re-filing requests
    for i in range(leaves):
        agent = "ABC"[i % 3]
        eng.submit(EngineRequest(f"r{i}", [f"sys-{agent}"] + [f"p{i}-{j}" for j in range(63)], [1] * 64, 1,
                                 Hints("w", agent, i, "app")))
        while eng.busy:
            eng.step()
    return calls


def test_filling_a_tree_refiles_each_node_a_bounded_number_of_times():
    """New: a fixed number of re-filings per request (admission, release, finish), the same at 200
    and 800 leaves. The reference re-files every node of an agent at each of its step changes:
    about leaves^2 / 2 (2 agents change per invocation, each tagged on a third of the nodes)."""
    per_leaf = {n: _fill_refreshes("kvflow-shipped", n) / n for n in (200, 800)}
    assert per_leaf[200] == pytest.approx(per_leaf[800], abs=0.05) and per_leaf[800] < 8, per_leaf
    assert _fill_refreshes(REFERENCE, 200) > 200 * 200 / 4
