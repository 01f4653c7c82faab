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
from dataclasses import replace
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pbkv_contract.hints import Hints
from pbkv_server.engine import EngineRequest, HardwareProfile
from pbkv_server.engine.policies import REPLAY, available_policies, policy_info
from pbkv_server.predictors import make_predictor
from pbkv_server.sim.offline_bound import demand_bound
from pbkv_server.sim.simulator import ReplayConfig, ReplayOptions, ReplayUnit, Workload, load_workload, simulate
from pbkv_server.sim.synth.agents import generate

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
    result = simulate(workload, ReplayConfig("opt", PROFILE, device_tokens=capacity, host_tokens=0),
                      ReplayOptions(concurrency=1))
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
        bound = simulate(workload, ReplayConfig("opt", PROFILE, device_tokens=capacity, host_tokens=host),
                         ReplayOptions(concurrency=1))
        for policy in online:
            other = simulate(workload, ReplayConfig(policy, PROFILE, device_tokens=capacity, host_tokens=host),
                             ReplayOptions(concurrency=1, predictor=make_predictor("markov", 3)))
            assert other.summary["hit_rate"] <= bound.summary["hit_rate"] + 1e-12, (seed, policy)


@pytest.mark.slow
def test_at_concurrency_16_the_bound_runs_on_its_own_stable_order_and_is_not_beaten():
    records = list(generate("codegen", 40, seed=5))
    workload = load_workload(records)
    kw = dict(device_tokens=120_000, host_tokens=0)
    bound = simulate(workload, ReplayConfig("opt", PROFILE, **kw), ReplayOptions(concurrency=16))
    assert bound.summary["order_stable"] and bound.summary["order_runs"] >= 2
    for policy in ("lru", "lae", "he", "belady"):
        other = simulate(workload, ReplayConfig(policy, PROFILE, **kw),
                         ReplayOptions(concurrency=16, predictor=make_predictor("oracle", 3, records)))
        assert other.summary["hit_rate"] <= bound.summary["hit_rate"] + 1e-12, policy


# --------------------------------------------------------------------------- the host tier's order
# A hand-computed trace (concurrency 1, one-block prompts of UNIT tokens, 1 output token): prompts
# A B C D E A. A device of 2 * UNIT + 1 tokens keeps one block between requests (the next prompt
# needs UNIT + 1), a host of 2 * UNIT holds two. Under LRU on both tiers: C demotes A, D demotes B
# (host {A, B}), E demotes C and the full host drops its least recent leaf, A: the last A misses.
# With MIN on the host (opt-host), E's demotion drops B (never used again) instead, and the last
# A is a host hit; device order is LRU's, so device hits stay 0. opt (MIN on both tiers) keeps A
# on the device (C demotes B, D demotes C): a device hit.
HOST_TRACE = ["A", "B", "C", "D", "E", "A"]
HOST_DEVICE, HOST_HOST = 2 * UNIT + 1, 2 * UNIT


def _workload(labels: list[str]) -> Workload:
    units = []
    for i, label in enumerate(labels):
        keys = _chain([label])
        req = EngineRequest(f"w{i}#0", keys, [UNIT], 1, Hints(f"w{i}", "a", 0, "app"))
        units.append(ReplayUnit(f"w{i}", [req], [f"w{i}"], ["app"], ["a"], [0.0], [1.0],
                                [(f"w{i}", 0.0, "completed")]))
    return Workload(units)


@pytest.mark.parametrize("policy, device_hits, host_hits", [
    ("lru", 0, 0), ("opt-host", 0, 1), ("opt", 1, 0), ("opt-device", 1, 0)])
def test_host_order_hand_computed(policy, device_hits, host_hits):
    result = simulate(_workload(HOST_TRACE), ReplayConfig(policy, PROFILE, device_tokens=HOST_DEVICE,
                                                          host_tokens=HOST_HOST),
                      ReplayOptions(concurrency=1))
    n = len(HOST_TRACE)
    assert result.summary["hit_rate"] == pytest.approx(device_hits / n)
    assert result.summary["host_hit_rate"] == pytest.approx(host_hits / n)


def test_the_host_tier_drops_in_host_priority_order_not_device_order():
    # a policy that is LRU on the device and most-recent-first on the host: at E's demotion the host
    # drops B (the more recent of A, B), so the last A is a host hit; were the host filed by
    # priority() (LRU), A would be dropped and missed
    from pbkv_server.engine.policies import register_policy, unregister_policy
    from pbkv_server.engine.policies.lru import LRUPolicy

    @register_policy("test-mru-host")
    class MRUHost(LRUPolicy):
        def host_priority(self, node) -> tuple:
            return (-node.last_access,)

    try:
        result = simulate(_workload(HOST_TRACE), ReplayConfig("test-mru-host", PROFILE, device_tokens=HOST_DEVICE,
                                                              host_tokens=HOST_HOST),
                          ReplayOptions(concurrency=1))
    finally:
        unregister_policy("test-mru-host")
    assert result.summary["hit_rate"] == 0
    assert result.summary["host_hit_rate"] == pytest.approx(1 / len(HOST_TRACE))


@pytest.mark.slow
def test_opt_ref_runs_once_on_the_timing_only_order_and_opt_iterates():
    records = list(generate("codegen", 40, seed=5))
    workload = load_workload(records)
    kw = dict(device_tokens=120_000, host_tokens=0)
    ref = simulate(workload, ReplayConfig("opt-ref", PROFILE, **kw), ReplayOptions(concurrency=16))
    assert "order_runs" not in ref.summary  # one run on build_future's timing-only order
    assert policy_info("opt-ref").offline and not policy_info("opt-ref").iterates_order
    opt = simulate(workload, ReplayConfig("opt", PROFILE, **kw), ReplayOptions(concurrency=16))
    assert opt.summary["order_runs"] >= 2


# --------------------------------------------------------------------------- the two-tier demand bound
FAST_PCIE = replace(PROFILE, pcie_bytes_per_s=2e7)  # a host hit saves 95% of a prefill (host_value 0.95)


def test_demand_bound_hand_computed():
    # HOST_TRACE on device 9 / host 8: MIN on the device alone keeps A (1 hit of 6); one tier of 17
    # tokens keeps 3 blocks between requests, so it keeps A too (1 of 6); v = 0.95
    bound = demand_bound(_workload(HOST_TRACE), FAST_PCIE, HOST_DEVICE, HOST_HOST)
    assert bound.value_of_host_hit == pytest.approx(0.95)
    assert bound.device_hit_rate == pytest.approx(1 / 6)
    assert bound.cached_hit_rate == pytest.approx(1 / 6)
    assert bound.prefill_saved == pytest.approx(1 / 6)
    # A B A C B on device 9 / host 4: the second A finds A and B on the device (a hit); C must
    # evict one of them and MIN evicts A (never used again), so the last B hits too: 2 of 5. One
    # tier of 13 tokens holds 2 blocks between requests: the same 2 hits, and nothing more to gain.
    bound = demand_bound(_workload(["A", "B", "A", "C", "B"]), FAST_PCIE, HOST_DEVICE, UNIT)
    assert bound.device_hit_rate == pytest.approx(2 / 5)
    assert bound.cached_hit_rate == pytest.approx(2 / 5)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), capacity=st.sampled_from([48, 56, 80]), host=st.sampled_from([8, 20, 40]))
def test_no_policy_beats_the_demand_bound_at_concurrency_1(seed, capacity, host):
    workload, _ = random_workload(random.Random(seed), 12)
    bound = demand_bound(workload, FAST_PCIE, capacity, host)
    v = bound.value_of_host_hit
    for policy in available_policies(REPLAY):
        info = policy_info(policy)
        if info.speculative_prefill:
            continue  # computes KV before any request asks for it: not demand loading
        s = simulate(workload, ReplayConfig(policy, FAST_PCIE, device_tokens=capacity, host_tokens=host),
                     ReplayOptions(concurrency=1, predictor=make_predictor("markov", 3))).summary
        assert s["hit_rate"] + s["host_hit_rate"] <= bound.cached_hit_rate + 1e-12, policy
        if not info.prefetches:
            assert s["hit_rate"] <= bound.device_hit_rate + 1e-12, policy
            assert s["hit_rate"] + v * s["host_hit_rate"] <= bound.prefill_saved + 1e-12, policy


def test_opt_is_not_the_two_tier_optimum_for_cached_hits():
    # A B Y Z A B on device 9 / host 4 (one block on each tier between requests). opt: Y demotes B
    # (A comes back first), Z demotes Y, never used again, and the full host drops B for it (a
    # victim always enters the host): the last B misses, 1 device hit of 6. Keeping B on the host
    # and dropping Y would give 1 device + 1 host hit, which the demand bound counts (one tier of
    # 13 tokens keeps A and B): opt bounds device hits, not device + host hits.
    trace = ["A", "B", "Y", "Z", "A", "B"]
    opt = simulate(_workload(trace), ReplayConfig("opt", FAST_PCIE, device_tokens=HOST_DEVICE, host_tokens=UNIT),
                   ReplayOptions(concurrency=1)).summary
    assert (opt["hit_rate"], opt["host_hit_rate"]) == (pytest.approx(1 / 6), 0)
    bound = demand_bound(_workload(trace), FAST_PCIE, HOST_DEVICE, UNIT)
    assert bound.device_hit_rate == pytest.approx(1 / 6)
    assert bound.cached_hit_rate == pytest.approx(2 / 6)
