"""``scripts/probe_pbkv_variants.py``: its variants are pbkv with one rule swapped, checked by what
the swapped rule leaves in a replay's own counters."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from pbkv_contract.trace import read_trace
from pbkv_server.engine.policies.base import unregister_policy
from pbkv_server.hardware.profiles import get_profile
from pbkv_server.predictors import make_predictor
from pbkv_server.sim.simulator import ReplayConfig, ReplayOptions, load_workload, simulate
from pbkv_server.sim.synth.agents import write_trace

ROOT = Path(__file__).resolve().parents[3]
VARIANTS = ("pbkv-nosel", "pbkv-nopf", "pbkv-minhost", "pbkv-minhost-nosel", "pbkv-noq", "pbkv-qwonly", "pbkv-pfonly")


@pytest.fixture(scope="module")
def probe():
    spec = importlib.util.spec_from_file_location("probe_pbkv_variants", ROOT / "scripts" / "probe_pbkv_variants.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # registers the variants in this process
    yield module
    for name in VARIANTS:
        unregister_policy(name)


def _replay(policy: str, trace: Path) -> dict:
    records = read_trace(trace)
    # a device below the running prompts and a host as large: the cell the probes were made for
    config = ReplayConfig(policy, get_profile("h100-qwen2.5-32b"), device_tokens=40_000, host_tokens=40_000)
    return simulate(load_workload(records), config,
                    ReplayOptions(concurrency=16, predictor=make_predictor("context", 3, records))).summary


def test_the_variants_change_only_their_rule(probe, tmp_path):
    trace = tmp_path / "codegen.jsonl"
    write_trace(str(trace), graph="codegen", workflows=12, seed=1)
    pbkv, nopf = (_replay(p, trace) for p in ("pbkv", "pbkv-nopf"))
    assert pbkv["prefetched_tokens"] > 0  # the cell has something to prefetch ...
    assert nopf["prefetched_tokens"] == 0  # ... which nopf skips
    assert nopf["mean_latency_s"] != pbkv["mean_latency_s"]
    # requests queue for admission in this cell: the variants that prefetch while they wait load
    # more than the ones that skip those rounds, whatever their cycle
    noq, qwonly, pfonly = (_replay(p, trace) for p in ("pbkv-noq", "pbkv-qwonly", "pbkv-pfonly"))
    assert noq["prefetched_tokens"] > pfonly["prefetched_tokens"]
    assert qwonly["prefetched_tokens"] > pbkv["prefetched_tokens"]
    minhost = _replay("pbkv-minhost", trace)
    assert minhost["order_runs"] >= 1  # offline: iterated to its own order, as opt
