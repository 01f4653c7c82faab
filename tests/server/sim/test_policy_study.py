"""The policy-order study of issue 2 at a small size (120 synthetic codegen workflows, C = 8).

At a device capacity where LRU's token hit rate is in the paper's 20-35 % regime:
with the oracle predictor, belady >= he >= lae >= lru, pbkv >= he and pbkv / lru >= 2;
with pure-noise predictions (lambda = 1), pbkv still >= lae (graceful degradation).
``belady`` here is the earlier heuristic offline reference (farthest next use of a node's first
block in a timing-only order), not the offline bound ``opt`` (``REFERENCE_POLICY``) that gap
closed is measured against; the test checks the order against it, not optimality.
"""

from __future__ import annotations

import pytest

from pbkv_server.predictors import make_predictor
from pbkv_server.hardware.profiles import get_profile
from pbkv_server.sim.simulator import ReplayConfig, ReplayOptions, load_workload, simulate
from pbkv_server.sim.synth.agents import generate

DEVICE_TOKENS = 120_000
CONCURRENCY = 8


@pytest.fixture(scope="module")
def trace():
    records = list(generate("codegen", 120, seed=1))
    return records, load_workload(records)


def run(trace, policies, predictor):
    records, workload = trace
    profile = get_profile("h100-qwen2.5-32b")
    return {
        p: simulate(workload, ReplayConfig(p, profile, device_tokens=DEVICE_TOKENS),
                    ReplayOptions(concurrency=CONCURRENCY,
                                  predictor=make_predictor(predictor, 3, records))).summary["hit_rate"]
        for p in policies
    }


@pytest.mark.slow
def test_oracle_policy_order_and_pbkv_doubles_lru(trace):
    hit = run(trace, ["lru", "lae", "he", "pbkv", "belady"], "oracle")
    assert 0.20 <= hit["lru"] <= 0.35, hit  # the paper's pressure regime
    assert hit["belady"] >= hit["he"] >= hit["lae"] >= hit["lru"], hit
    assert hit["pbkv"] >= hit["he"], hit
    assert hit["pbkv"] / hit["lru"] >= 2.0, hit


def test_pbkv_degrades_gracefully_under_pure_noise(trace):
    hit = run(trace, ["lae", "pbkv"], "noise:1.0")
    assert hit["pbkv"] >= hit["lae"], hit
