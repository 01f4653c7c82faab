"""One-unit eviction taken in runs (``Eviction._evict_run``) replays exactly as one unit at a time.

``opt`` ranks a node by its last unit and evicts one unit per step. The cache takes the units that
those steps would take next at once and keeps them as one host node (``Node.frag``), or, without a
host tier, drops them as one node (``Eviction._drop_run``), or, through a full host, moves them in
one step (``Eviction._pass_run``); switching that off (``_evict_run`` taking nothing) leaves the
one-unit steps. Every replay figure must be
the same either way, on tight and loose tiers, with and without a host tier, for both tiers'
orders (``opt``; ``opt-device``, LRU on the host).
"""

from __future__ import annotations

import pytest

from pbkv_server.engine.eviction import Eviction
from pbkv_server.hardware.profiles import get_profile
from pbkv_server.predictors import make_predictor
from pbkv_server.sim.simulator import ReplayConfig, ReplayOptions, load_workload, simulate
from pbkv_server.sim.synth.agents import generate

KEPT = ("hit_rate", "host_hit_rate", "evictions", "evicted_tokens", "mean_latency_s", "p99_latency_s",
        "mean_ttft_s", "requests", "timeline", "order_runs")


def _replay(workload, records, policy: str, device: int, host: int, concurrency: int) -> dict:
    result = simulate(workload, ReplayConfig(policy, get_profile("h100-qwen2.5-32b"), device_tokens=device,
                                             host_tokens=host),
                      ReplayOptions(concurrency=concurrency, predictor=make_predictor("markov", 3, records)))
    return {k: result.summary.get(k) for k in KEPT}


@pytest.mark.parametrize("policy", ["opt", "opt-device"])
@pytest.mark.parametrize("device,host,concurrency", [(40_000, 40_000, 8), (60_000, 20_000, 16), (30_000, 0, 4),
                                                      (50_000, 150_000, 16)])
def test_runs_of_units_replay_as_one_unit_at_a_time(monkeypatch, policy, device, host, concurrency):
    records = list(generate("codegen", 24, seed=device + host))
    workload = load_workload(records)
    runs = _replay(workload, records, policy, device, host, concurrency)
    monkeypatch.setattr(Eviction, "_evict_run", lambda self, moved, tokens: 0)
    one_by_one = _replay(workload, records, policy, device, host, concurrency)
    assert runs["evictions"] > 0
    assert runs == one_by_one


@pytest.mark.parametrize("policy", ["opt", "opt-device"])
@pytest.mark.parametrize("device,host,concurrency", [(40_000, 40_000, 8), (60_000, 4_000, 16)])
def test_units_passed_through_a_full_host_replay_as_one_unit_at_a_time(monkeypatch, policy, device, host,
                                                                        concurrency):
    """``Eviction._pass_run`` (a full host whose next victim is the one-unit leaf below the device
    victim: each unit moves up and drops the one before) against its steps one unit at a time, the
    other runs kept; the replays must take it, and report the same figures without it."""
    records = list(generate("codegen", 24, seed=device + host))
    workload = load_workload(records)
    taken = []
    pass_run = Eviction._pass_run

    def counted(self, *args):
        got = pass_run(self, *args)
        taken.append(got)
        return got

    monkeypatch.setattr(Eviction, "_pass_run", counted)
    passed = _replay(workload, records, policy, device, host, concurrency)
    assert sum(1 for got in taken if got) > 50
    monkeypatch.setattr(Eviction, "_pass_run", lambda self, top, chain, tokens, free: 0)
    stepped = _replay(workload, records, policy, device, host, concurrency)
    assert passed == stepped
