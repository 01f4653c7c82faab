"""``without_hints``: a workload as a client without the SDK sends it. Requests lose every client
signal and nothing else; on that traffic the hinted policies replay exactly as ``lru`` (their
documented rule for requests without hints), while the same trace with hints replays differently
(so the comparison can fail)."""

from __future__ import annotations

import pytest

from pbkv_contract.trace import read_trace
from pbkv_server.engine.policies import BASELINE_POLICY, DEFAULT_POLICY, REPLAY, available_policies, policy_info
from pbkv_server.hardware.profiles import get_profile
from pbkv_server.predictors import make_predictor
from pbkv_server.sim.plain_client import client_signal_note, without_hints
from pbkv_server.sim.simulator import ReplayConfig, ReplayOptions, load_workload, simulate
from pbkv_server.sim.synth.agents import write_trace


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    path = tmp_path_factory.mktemp("plain") / "codegen.jsonl"
    write_trace(str(path), graph="codegen", workflows=40, seed=3)
    return read_trace(str(path))


def test_requests_lose_the_client_signals_and_keep_the_rest(records):
    hinted = load_workload(records)
    plain = without_hints(hinted)
    assert plain.hash_collisions == hinted.hash_collisions
    assert [u.unit_id for u in plain.units] == [u.unit_id for u in hinted.units]
    for before, after in zip(hinted.units, plain.units):
        assert (after.gaps_s, after.durations_s, after.ends) == (before.gaps_s, before.durations_s, before.ends)
        for a, b in zip(after.requests, before.requests):
            assert (a.hints, a.session_id, a.priority, a.cache_ttl_s, a.last_step) == (None, None, None, None, False)
            assert (a.request_id, list(a.blocks), list(a.block_tokens), a.output_tokens) == \
                (b.request_id, list(b.blocks), list(b.block_tokens), b.output_tokens)
    # the hinted workload is left as it was
    first = hinted.units[0].requests[0]
    assert first.hints is not None and first.hints.workflow_id == hinted.units[0].workflow_ids[0]
    assert any(r.last_step for u in hinted.units for r in u.requests)


def _summary(workload, records, policy: str) -> dict:
    # no host tier: with one, cache last used at the same instant (a tie in lru's order) may leave
    # in another order under a policy that files it at other times (docs/do-no-harm.md)
    config = ReplayConfig(policy, get_profile("h100-qwen2.5-32b"), device_tokens=40_000, host_tokens=0)
    return simulate(workload, config, ReplayOptions(concurrency=8, predictor=make_predictor("oracle", 3, records))).summary


@pytest.mark.parametrize("policy", [DEFAULT_POLICY, "he"])
def test_hinted_policies_replay_plain_traffic_as_lru(records, policy):
    plain = without_hints(load_workload(records))
    lru, other = _summary(plain, records, BASELINE_POLICY), _summary(plain, records, policy)
    for key in ("mean_latency_s", "hit_rate", "evictions", "mean_ttft_s"):
        assert other[key] == lru[key], key
    hinted = load_workload(records)  # with hints the policy has something to act on: not lru
    assert _summary(hinted, records, policy)["mean_latency_s"] != _summary(hinted, records, BASELINE_POLICY)["mean_latency_s"]


#: The policies whose rule reads only what the client sends (by hand: each one's docstring)
CLIENT_SIGNAL = ["continuum", "sglang-priority", "sglang-session", "ttl-pin"]


def test_the_registry_declares_the_client_signal_policies():
    assert sorted(p for p in available_policies() if policy_info(p).client_signal) == CLIENT_SIGNAL


@pytest.mark.parametrize("policy", CLIENT_SIGNAL)
def test_client_signal_policies_replay_plain_traffic_as_lru(records, policy):
    """What ``pbkv-bench replay --no-hints``'s note says of them (``client_signal_note``)."""
    assert policy in available_policies(REPLAY)
    plain = without_hints(load_workload(records))
    lru, other = _summary(plain, records, BASELINE_POLICY), _summary(plain, records, policy)
    for key in ("mean_latency_s", "hit_rate", "evictions", "mean_ttft_s"):
        assert other[key] == lru[key], key


def test_the_note_names_the_client_signal_policies_only():
    assert client_signal_note(["lru", DEFAULT_POLICY, "he", "tlru"]) is None
    assert client_signal_note(["lru", "ttl-pin"]) == (
        "--no-hints: ttl-pin (cache TTL) acts on what the client sends, which --no-hints removes; it replays as lru here")
    assert client_signal_note(["sglang-session", DEFAULT_POLICY, "sglang-priority"]) == (
        "--no-hints: sglang-session (SGLang session id), sglang-priority (request priority) act on what the client "
        "sends, which --no-hints removes; they replay as lru here")
