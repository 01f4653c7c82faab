"""The exact offline bound ``opt``: MIN over the replay's own order.

At concurrency 1 the replay's order is the trace's, and ``opt`` must equal an independent
brute-force MIN written here (a set of cached units, the farthest-next-use unit evicted, deeper
first among equals); on 1,000 random traces no policy without prefetch may get more device hits.
At higher concurrency the simulator iterates the replay until the submission order is stable.
"""

from __future__ import annotations

import hashlib
import random

import pytest

from pbkv_contract.hints import Hints
from pbkv_server.engine import EngineRequest, HardwareProfile
from pbkv_server.engine.policies import REPLAY, available_policies, policy_info
from pbkv_server.predictors import make_predictor
from pbkv_server.sim.simulator import ReplayUnit, Workload, load_workload, simulate
from pbkv_server.sim.synth import generate

UNIT = 4  # tokens per block: equal units, where MIN is optimal
PROFILE = HardwareProfile(name="bound", description="test", source="tests", prefill_tokens_per_s=1000.0,
                          decode_base_s=0.01, decode_per_seq_s=0.001, pcie_bytes_per_s=1e6,
                          kv_bytes_per_token=1000, device_kv_tokens=1000, host_kv_tokens=0)


def _chain(labels: list[str]) -> list[str]:
    out, h = [], b""
    for label in labels:
        h = hashlib.blake2b(h + label.encode(), digest_size=8).digest()
        out.append(h.hex())
    return out


def random_workload(rng: random.Random, n_requests: int) -> tuple[Workload, list[tuple[list[str], int]]]:
    """Single-request workflows in sequence: prompts from a few shared prefixes plus fresh blocks."""
    units, prompts = [], []
    for i in range(n_requests):
        base = rng.randrange(4)
        labels = [f"p{base}-{j}" for j in range(rng.randint(0, 6))] + [f"r{i}-{j}" for j in range(rng.randint(0, 3))]
        labels += [f"s{rng.randrange(6)}"] if rng.random() < 0.5 else []
        keys = _chain(labels or [f"e{i}"])
        out = rng.randint(1, 4)
        prompts.append((keys, out))
        req = EngineRequest(f"w{i}#0", keys, [UNIT] * len(keys), out, Hints(f"w{i}", "a", 0, "app"))
        units.append(ReplayUnit(f"w{i}", [req], [f"w{i}"], ["app"], ["a"], [0.0], [1.0],
                                [(f"w{i}", 0.0, "completed")]))
    return Workload(units), prompts


def brute_force_min(prompts: list[tuple[list[str], int]], capacity: int) -> float:
    """Device hit rate of MIN on a set of cached units, one request at a time (an independent
    reference: no tree, no heaps)."""
    cached: set[str] = set()
    depth = {k: d for keys, _ in prompts for d, k in enumerate(keys)}
    hits = total = 0
    for i, (keys, out) in enumerate(prompts):
        m = 0
        while m < len(keys) and keys[m] in cached:
            m += 1
        hits += m * UNIT
        total += len(keys) * UNIT
        need = (len(keys) - m) * UNIT + out

        def next_use(key: str) -> float:
            return next((j for j in range(i + 1, len(prompts)) if key in prompts[j][0]), float("inf"))

        in_use = set(keys[:m])
        while len(cached) * UNIT + need > capacity:
            victim = max(cached - in_use, key=lambda k: (next_use(k), depth[k]))
            cached.remove(victim)
        cached |= set(keys)
    return hits / total if total else 0.0


@pytest.mark.parametrize("seed", range(12))
def test_opt_equals_an_independent_brute_force_min_at_concurrency_1(seed):
    rng = random.Random(seed)
    workload, prompts = random_workload(rng, 40)
    capacity = rng.choice([48, 64, 96])
    result = simulate(workload, "opt", PROFILE, concurrency=1, device_tokens=capacity, host_tokens=0)
    assert result.summary["hit_rate"] == pytest.approx(brute_force_min(prompts, capacity), abs=1e-12)


@pytest.mark.slow
def test_no_policy_without_prefetch_beats_opt_on_1000_random_traces():
    # demand paging only: prefetch and speculative prefill (which computes a reply's KV before any
    # request asks for it) bring in cache that MIN, by definition, never loads ahead of a use
    online = [p for p in available_policies(REPLAY) if not policy_info(p).offline and not policy_info(p).prefetches
              and not policy_info(p).speculative_prefill]
    assert {"lru", "lae", "he"} <= set(online)
    for seed in range(1000):
        rng = random.Random(10_000 + seed)
        workload, _ = random_workload(rng, 12)
        capacity, host = rng.choice([48, 56, 80]), rng.choice([0, 40])
        bound = simulate(workload, "opt", PROFILE, concurrency=1, device_tokens=capacity, host_tokens=host)
        for policy in online:
            other = simulate(workload, policy, PROFILE, concurrency=1, device_tokens=capacity, host_tokens=host,
                             predictor=make_predictor("markov", 3))
            assert other.summary["hit_rate"] <= bound.summary["hit_rate"] + 1e-12, (seed, policy)


@pytest.mark.slow
def test_at_concurrency_16_the_bound_runs_on_its_own_stable_order_and_is_not_beaten():
    records = list(generate("codegen", 40, seed=5))
    workload = load_workload(records)
    kw = dict(concurrency=16, device_tokens=120_000, host_tokens=0)
    bound = simulate(workload, "opt", PROFILE, **kw)
    assert bound.summary["order_stable"] and bound.summary["order_runs"] >= 2
    for policy in ("lru", "lae", "he", "belady"):
        other = simulate(workload, policy, PROFILE, predictor=make_predictor("oracle", 3, records), **kw)
        assert other.summary["hit_rate"] <= bound.summary["hit_rate"] + 1e-12, policy
