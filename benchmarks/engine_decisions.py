"""Decision latencies of the engine core at 72 concurrent workflows (PBKV Table 4 targets).

Drives one :class:`~pbkv_server.engine.Engine` (policy ``pbkv`` by default) with a closed loop of
72 workflows walking a coding-agent graph (planner -> coder -> tester -> (analyzer -> coder ->
tester)* -> END) with shared system prompts, per-workflow history that grows every step and tool
gaps, under memory pressure so that every admission evicts. The predictor returns the graph's
true K-step distributions. Prints mean and p99 of:

- eviction decision: one ``evict_device`` call (choose victims, demote/drop them), ms;
- score update: incremental rescoring per node after a workflow's new prediction, us (and,
  node-weighted, the time to re-file the changed nodes in the eviction/prefetch heaps);
- prefetch decision: one prefetch round on a decode-only step, ms;
- predictor call, us;
- robustness guard per admission (ghost LRU replay, window, re-filing at a switch), us;

plus the tree size and the number of samples. Targets (paper Table 4, CPython): eviction
<= 0.44 ms mean, prefetch <= 0.64 ms mean, score update <= 5 us per node.

Usage: python benchmarks/engine_decisions.py [--workflows 72] [--invocations 4000] [--policy pbkv] [--device-tokens N] [--cpu-time]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import statistics
import time

from pbkv_contract.hints import END_AGENT, Hints
from pbkv_server.engine import Engine, EngineConfig, EngineRequest, HardwareProfile
from pbkv_server.engine.policies import DEFAULT_POLICY
from pbkv_contract.prediction import Prediction, Predictor

#: Transition probabilities of the benchmark's agent graph.
GRAPH = {
    "planner": {"coder": 1.0},
    "coder": {"tester": 1.0},
    "tester": {"analyzer": 0.55, END_AGENT: 0.45},
    "analyzer": {"coder": 0.8, "planner": 0.2},
}
#: System prompt + tool description tokens of each agent.
ROLE_TOKENS = {"planner": 1200, "coder": 2400, "tester": 1600, "analyzer": 900}
BLOCK_TOKENS = 16

#: Modelled on one A6000 serving Qwen3-14B: 160 KiB of KV per token (40 layers x 8 KV heads x
#: 128 dims x 2 x bf16), PCIe 4.0 x16 at ~25 GB/s effective, decode ~48 ms + 1.1 ms/seq.
PROFILE = HardwareProfile(
    name="bench-a6000-qwen3-14b", description="benchmark stand-in for one A6000 with Qwen3-14B",
    source="Qwen3-14B config.json (40 layers, 8 KV heads, head dim 128); PCIe 4.0 x16 ~25 GB/s",
    prefill_tokens_per_s=2400.0, decode_base_s=0.048, decode_per_seq_s=0.0011,
    pcie_bytes_per_s=25e9, kv_bytes_per_token=163840, device_kv_tokens=240_000, host_kv_tokens=480_000,
)


class GraphPredictor(Predictor):
    """The graph's exact K-step next-agent distributions, each conditional on the workflow still
    running (the convention of PBKV Eq. 2, which multiplies by the survival probability)."""

    horizon = 3

    def predict(self, queries):
        out = []
        for q in queries:
            alive, dists = {q.agent: 1.0}, []
            for _ in range(self.horizon):
                if not alive:
                    dists.append({END_AGENT: 1.0})
                    continue
                nxt: dict[str, float] = {}
                for a, p in alive.items():
                    for b, t in GRAPH.get(a, {END_AGENT: 1.0}).items():
                        nxt[b] = nxt.get(b, 0.0) + p * t
                dists.append(nxt)
                running = 1.0 - nxt.get(END_AGENT, 0.0)
                alive = {a: p / running for a, p in nxt.items() if a != END_AGENT} if running > 1e-12 else {}
            out.append(Prediction(dists))
        return out


def _blocks(label: str, tokens: int) -> list[str]:
    return [f"{label}/{i}" for i in range(max(1, tokens // BLOCK_TOKENS))]


class _Workflow:
    def __init__(self, wid: str, rng: random.Random) -> None:
        self.wid, self.rng, self.step, self.agent = wid, rng, 0, "planner"
        self.history: list[str] = _blocks(f"{wid}/task", rng.randint(300, 900))

    def request(self) -> EngineRequest:
        labels = _blocks(f"role/{self.agent}", ROLE_TOKENS[self.agent]) + self.history
        keys, h = [], b""
        for label in labels:  # chained block keys, as the engine requires
            h = hashlib.blake2b(h + label.encode(), digest_size=8).digest()
            keys.append(h)
        out = self.rng.randint(60, 400)
        return EngineRequest(f"{self.wid}#{self.step}", keys, [BLOCK_TOKENS] * len(keys), out,
                             Hints(self.wid, self.agent, self.step, "codegen"))

    def advance(self) -> bool:
        """Append this step's output to the history and pick the next agent; False at END."""
        self.history += _blocks(f"{self.wid}/out{self.step}", self.rng.randint(200, 800))
        self.step += 1
        choices = GRAPH[self.agent]
        self.agent = self.rng.choices(list(choices), weights=list(choices.values()))[0]
        return self.agent != END_AGENT and self.step < 14


def run(workflows: int, invocations: int, policy: str, seed: int, device_tokens: int | None = None) -> Engine:
    """Closed-loop replay: ``workflows`` in flight until ``invocations`` requests were served."""
    rng = random.Random(seed)
    host = None if device_tokens is None else 2 * device_tokens
    engine = Engine(EngineConfig(profile=PROFILE, policy=policy, predictor=GraphPredictor(),
                                 device_tokens=device_tokens, host_tokens=host))
    engine.set_app_graph("codegen", {a: [b for b in nxt if b != END_AGENT] for a, nxt in GRAPH.items()})
    started = served = 0
    pending: list[tuple[float, _Workflow]] = []  # (submit time, workflow)
    by_id: dict[str, _Workflow] = {}

    def start(t: float) -> None:
        nonlocal started
        wf = _Workflow(f"wf{started}", random.Random(rng.random()))
        started += 1
        by_id[wf.wid] = wf
        pending.append((t, wf))

    for _ in range(workflows):
        start(0.0)
    while served < invocations and (pending or engine.busy):
        pending.sort(key=lambda x: x[0])
        while pending and pending[0][0] <= engine.clock:
            engine.submit(pending.pop(0)[1].request())
        if not engine.busy:
            engine.advance_to(pending[0][0])
            continue
        for ev in engine.step(until=pending[0][0] if pending else None):
            if type(ev).__name__ != "Finished":
                continue
            served += 1
            wf = by_id[ev.request_id.split("#")[0]]
            if wf.advance():
                pending.append((ev.time + rng.uniform(0.5, 4.0), wf))  # tool time
            else:
                engine.end_workflow(wf.wid)
                start(ev.time)
    return engine


def _summary(samples, scale: float) -> tuple[float, float, int]:
    xs = sorted(samples)
    if not xs:
        return float("nan"), float("nan"), 0
    p99 = xs[min(len(xs) - 1, int(0.99 * len(xs)))]
    return statistics.fmean(xs) * scale, p99 * scale, len(xs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workflows", type=int, default=72)
    parser.add_argument("--invocations", type=int, default=4000)
    parser.add_argument("--policy", default=DEFAULT_POLICY)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device-tokens", type=int, default=None,
                        help="device KV capacity (host = 2x); default: the profile's 240k/480k")
    parser.add_argument("--cpu-time", action="store_true",
                        help="time decisions in thread CPU time (other processes' load on a shared machine "
                             "inflates wall-clock samples)")
    args = parser.parse_args()
    if args.cpu_time:
        Engine.latency_clock = staticmethod(time.thread_time)
    t0 = time.perf_counter()
    engine = run(args.workflows, args.invocations, args.policy, args.seed, args.device_tokens)
    wall = time.perf_counter() - t0
    s = engine.stats
    clock = "thread CPU time" if args.cpu_time else "wall-clock time"
    print(f"policy {args.policy}, {args.workflows} concurrent workflows, {s.requests_finished} requests, "
          f"wall {wall:.1f} s, engine time {engine.clock:.0f} s; latencies in {clock}, "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    cache = engine.cache
    print(f"tree: {cache.tree.n_nodes} nodes, device {cache.tree.device_tokens} / {cache.device_capacity} tokens, "
          f"host {cache.tree.host_tokens} / {cache.host_capacity}; hit rate {s.hit_rate:.3f}, "
          f"host hit rate {s.host_hit_rate:.3f}, evictions {s.evictions}, prefetched {s.prefetched_tokens} tokens")
    if engine.cache.guard is not None:
        guard = engine.cache.guard
        print(f"lru guard: {s.guard_switches} switches, {s.guard_fallback_evictions} evictions in LRU order, "
              f"ghost {len(guard.ghost)} units / {guard.ghost.used} tokens")
    rows = [("eviction decision", s.eviction_decision_s, 1e3, "ms", 0.44),
            ("score update / node", s.score_update_s, 1e6, "us", 5.0),
            ("prefetch decision", s.prefetch_decision_s, 1e3, "ms", 0.64),
            ("predictor call", s.predictor_call_s, 1e6, "us", None),
            ("lru guard / admission", s.guard_decision_s, 1e6, "us", None)]
    print(f"{'measure':22s} {'mean':>10s} {'p99':>10s} {'unit':>5s} {'samples':>8s}  target (mean)")
    for name, samples, scale, unit, target in rows:
        mean, p99, n = _summary(samples, scale)
        verdict = "" if target is None else f"<= {target} {unit}: {'met' if mean <= target else 'MISSED'}"
        print(f"{name:22s} {mean:10.4f} {p99:10.4f} {unit:>5s} {n:8d}  {verdict}")
    if s.score_update_nodes:
        n = s.score_update_nodes
        print(f"node-weighted means over {n} rescored nodes: score update {s.score_update_total_s / n * 1e6:.3f} us, "
              f"heap re-filing {s.score_refile_total_s / n * 1e6:.3f} us, "
              f"both {(s.score_update_total_s + s.score_refile_total_s) / n * 1e6:.3f} us")


if __name__ == "__main__":
    main()
