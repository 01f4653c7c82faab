"""Eviction cost against the number of cached leaves (regression case 4: SGLang once rebuilt its
heap on every eviction and spent 70 ms per eviction at 41k leaves).

For each leaf count N and policy: fill the device with N leaves of 64 tokens (distinct prefixes,
40 workflows), then run 300 rounds of "evict 64 tokens, insert a new 64-token sequence"; for the
predictive policies, 1 % of the workflows get a new prediction before each round, so heap entries
go stale. ``--host``: a host tier as large as the device, filled first (2N leaves are inserted,
so N sit on a full host and every eviction also drops a host leaf in the policy's host order).
Prints mean / p50 / p99 / max of the eviction call in milliseconds (CPU time of this thread,
so other processes on a shared machine do not count). Target: mean <= 0.1 ms and p99 <= 1 ms at 40k
leaves, roughly flat from 5k to 50k.

    python benchmarks/eviction_scaling.py [--leaves 5000,20000,40000,50000] [--policy lru,he,pbkv]

``--plan``: the app has a static graph of five agents in a cycle (A -> B -> C -> D -> E -> A),
leaf i is a request of agent i mod 5, and before each round one workflow moves to its next
agent, so every agent's steps-to-execution change between two evictions (``kvflow``,
``kvflow-shipped``: issue 35 item 8, ``kvflow-shipped`` re-filed every node of a changed agent
inside the next eviction).

    python benchmarks/eviction_scaling.py --plan --leaves 40000 --policy kvflow-shipped

``--fill`` times filling the tree instead: N prompts of 64 tokens (one shared block per agent,
63 own) of one workflow walking the pipeline A -> B -> C -> A, so that every invocation changes
the steps-to-execution of the agents (``kvflow``, ``kvflow-shipped``); no eviction. Prints the
CPU seconds of the whole fill (issue 27: ``kvflow-shipped`` re-filed every node of an agent at
each change, quadratic in N).

    python benchmarks/eviction_scaling.py --fill --leaves 5000,20000 --policy lru,kvflow,kvflow-shipped
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
import sys
import time

from pbkv_contract.hints import END_AGENT, Hints
from pbkv_contract.prediction import Prediction, Predictor
from pbkv_server.engine import AcquireRequest, Engine, EngineConfig, EngineRequest, EngineStats, PrefixCache, ScoreBoard
from pbkv_server.engine.workflows import WorkflowTable
from pbkv_server.hardware.profiles import get_profile


class _Table(Predictor):
    """Returns the distribution set for each workflow (END-certain until set)."""

    horizon = 3

    def __init__(self) -> None:
        self.table: dict[str, float] = {}

    def predict(self, queries):
        return [Prediction([{"a": self.table.get(q.workflow_id, 0.0), END_AGENT: 1 - self.table.get(q.workflow_id, 0.0)}] * 3)
                for q in queries]


PLAN_AGENTS = "ABCDE"


def run(policy: str, leaves: int, rounds: int, seed: int, host: bool = False, plan: bool = False) -> list[float]:
    """Eviction call times (seconds) of ``rounds`` rounds at ``leaves`` leaves (per tier with
    ``host``; ``plan``: agents on a static graph whose steps change every round)."""
    rng = random.Random(seed)
    predictor = _Table()
    config = EngineConfig(profile=get_profile("h100-qwen2.5-32b"), policy=policy,
                          device_tokens=leaves * 64 + 64, host_tokens=leaves * 64 if host else 0)
    cache = PrefixCache(config, ScoreBoard(config.gamma, config.horizon), EngineStats(), time.thread_time)
    table = WorkflowTable(cache.board, predictor, predict=cache.policy.uses_predictions, on_changed=cache.rescore)
    workflows = [f"w{i}" for i in range(40)]
    clock = itertools.count()
    walker = None
    if plan:
        cache.set_app_graph("app", {a: [b] for a, b in zip(PLAN_AGENTS, PLAN_AGENTS[1:] + PLAN_AGENTS[0])})
        walker = table.invocation(Hints("walker", PLAN_AGENTS[0], 0, "app"), (), 0.0)
        cache.hooks.on_invocation(walker, None)

    def insert(i: int) -> None:
        wf_id = workflows[i % len(workflows)]
        wf = table.workflows.get(wf_id) or table.invocation(Hints(wf_id, "a", 0, "app"), (), 0.0)
        agent = PLAN_AGENTS[i % len(PLAN_AGENTS)] if plan else "a"
        keys = [f"s{i}-{j}" for j in range(64)]
        got = cache.acquire(AcquireRequest(keys, [1] * 64, list(range(65)), 0, float(next(clock)), wf, agent, index=i))
        cache.release(got.end, 0)

    def walk(r: int) -> None:
        """The walker workflow moves to its next agent: every agent's steps change."""
        previous = walker.agent
        table.invocation(Hints("walker", PLAN_AGENTS[(r + 1) % len(PLAN_AGENTS)], r + 1, "app"), (), 0.0)
        cache.hooks.on_invocation(walker, previous)

    filled = 2 * leaves if host else leaves
    for i in range(filled):
        insert(i)
    times = []
    for r in range(rounds):
        if plan:
            walk(r)
        if cache.policy.uses_predictions:
            for wf_id in rng.sample(workflows, max(1, len(workflows) // 100)):
                predictor.table[wf_id] = rng.random()
                table.invocation(Hints(wf_id, "a", r + 1, "app"), (), 0.0)
        t0 = time.thread_time()
        cache.evict_device(64)
        times.append(time.thread_time() - t0)
        insert(filled + r)
    return times


def fill(policy: str, leaves: int) -> float:
    """CPU seconds (this thread) to cache ``leaves`` prompts through the engine (see ``--fill``)."""
    config = EngineConfig(profile=get_profile("h100-qwen2.5-32b"), policy=policy,
                          device_tokens=leaves * 64 + 64, host_tokens=0)
    engine = Engine(config)
    engine.set_app_graph("app", {"A": ["B"], "B": ["C"], "C": ["A"]})
    t0 = time.thread_time()
    for i in range(leaves):
        agent = "ABC"[i % 3]
        keys = [f"sys-{agent}"] + [f"p{i}-{j}" for j in range(63)]
        engine.submit(EngineRequest(f"r{i}", keys, [1] * 64, 1, Hints("w", agent, i, "app")))
        while engine.busy:
            engine.step()
    return time.thread_time() - t0


def main(argv: list[str] | None = None) -> int:
    """Print the table; returns the exit status."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--leaves", default="5000,20000,40000,50000")
    p.add_argument("--policy", default="lru,lae,he,pbkv,kvflow")
    p.add_argument("--rounds", type=int, default=300)
    p.add_argument("--seed", type=int, default=4)
    p.add_argument("--fill", action="store_true", help="time filling the tree (see the module docstring)")
    p.add_argument("--host", action="store_true", help="a full host tier as large as the device")
    p.add_argument("--plan", action="store_true", help="agents on a static graph, steps changing every round")
    args = p.parse_args(argv)
    if args.fill:
        print(f"{'policy':15} {'leaves':>7} {'fill s':>8} {'us/leaf':>8}")
        for policy in args.policy.split(","):
            for n in (int(x) for x in args.leaves.split(",")):
                t = fill(policy, n)
                print(f"{policy:15} {n:7d} {t:8.2f} {1e6 * t / n:8.1f}", flush=True)
        return 0
    print(f"{'policy':10} {'leaves':>7} {'mean ms':>8} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for policy in args.policy.split(","):
        for n in (int(x) for x in args.leaves.split(",")):
            t = sorted(run(policy, n, args.rounds, args.seed, args.host, args.plan))
            p99 = t[min(len(t) - 1, int(0.99 * len(t)))]
            print(f"{policy:10} {n:7d} {1e3 * statistics.fmean(t):8.3f} {1e3 * statistics.median(t):8.3f} "
                  f"{1e3 * p99:8.3f} {1e3 * t[-1]:8.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
