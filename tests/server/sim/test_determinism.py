"""Replays are reproducible: the same trace gives the same eviction stats every time.

Engine ties (equal priority in the eviction or prefetch heap) are broken by the order in which
nodes were re-filed; that order must not depend on memory addresses (sets of objects) or on
string hashing (sets of strings, which vary with PYTHONHASHSEED). The markov predictor on a
tight device makes many equal scores, so an address-ordered rescoring shows up in the counts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from pbkv_server.engine.policies import BASELINE_POLICY, DEFAULT_POLICY, REPLAY, available_policies, policy_info
from pbkv_server.predictors import make_predictor
from pbkv_server.hardware.profiles import get_profile
from pbkv_server.sim.simulator import ReplayConfig, ReplayOptions, load_workload, simulate
from pbkv_server.sim.synth.agents import generate

WORKFLOWS, SEED, DEVICE_TOKENS, CONCURRENCY = 60, 3, 50_000, 8
# The offline references replay with the whole future at every eviction (about 10 s of CPU a
# replay at 60 workflows): a third of the trace, on a device as tight relative to it (it still
# evicts tens of thousands of times), checks their tie order in a seventh of the time.
OFFLINE_WORKFLOWS, OFFLINE_DEVICE_TOKENS = 20, 25_000


def replay_stats(records, workload, policy: str, device_tokens: int = DEVICE_TOKENS) -> tuple[int, int, int, int, int]:
    """(evictions, evicted tokens, device hit tokens, host hit tokens, prefetched tokens) of one replay."""
    result = simulate(workload, ReplayConfig(policy, get_profile("h100-qwen2.5-32b"), device_tokens=device_tokens),
                      ReplayOptions(concurrency=CONCURRENCY, predictor=make_predictor("markov", 3, records)))
    s = result.engine.stats
    return (s.evictions, s.evicted_tokens, s.device_hit_tokens, s.host_hit_tokens, s.prefetched_tokens)


@pytest.fixture(scope="module")
def trace():
    records = list(generate("codegen", WORKFLOWS, seed=SEED))
    return records, load_workload(records)


@pytest.fixture(scope="module")
def offline_trace():
    records = list(generate("codegen", OFFLINE_WORKFLOWS, seed=SEED))
    return records, load_workload(records)


# The baseline and the default policy in the fast lane; the others slow (seconds each; the
# offline reference, which replays with the whole future at every eviction, minutes).
@pytest.mark.parametrize("policy", [p if p in (BASELINE_POLICY, DEFAULT_POLICY) else pytest.param(p, marks=pytest.mark.slow)
                                    for p in available_policies(REPLAY)])
def test_three_replays_in_one_process_give_identical_stats(request, policy):
    offline = policy_info(policy).offline
    records, workload = request.getfixturevalue("offline_trace" if offline else "trace")
    device_tokens = OFFLINE_DEVICE_TOKENS if offline else DEVICE_TOKENS
    runs, ballast = [], []
    for i in range(3):
        # Allocations between runs move the next run's nodes and score records to other
        # addresses, which reorders any set of them (the bug this test guards against).
        ballast.append([object() for _ in range(2000 * (i + 1))])
        runs.append(replay_stats(records, workload, policy, device_tokens))
    assert runs[0][0] > 0, "the device must be tight enough to evict, or the test checks nothing"
    assert runs[1] == runs[0] and runs[2] == runs[0]


_CHILD = """
import json, sys
sys.path.insert(0, sys.argv[1])
from test_determinism import replay_stats, WORKFLOWS, SEED
from pbkv_server.sim.simulator import load_workload
from pbkv_server.sim.synth.agents import generate
records = list(generate("codegen", WORKFLOWS, seed=SEED))
workload = load_workload(records)
print(json.dumps({p: replay_stats(records, workload, p) for p in ("pbkv", "kvflow")}))
"""


@pytest.mark.slow
def test_replays_under_different_string_hash_seeds_give_identical_stats():
    here = os.path.dirname(os.path.abspath(__file__))
    outs = []
    for hash_seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=hash_seed)
        proc = subprocess.run([sys.executable, "-c", _CHILD, here], env=env, capture_output=True, text=True,
                              timeout=600)
        assert proc.returncode == 0, proc.stderr
        outs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    assert outs[0]["pbkv"][0] > 0
    assert outs[0] == outs[1]
