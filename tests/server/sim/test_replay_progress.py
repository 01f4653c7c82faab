"""Replays near the device floor finish (issue 36, part 1): every request whose own KV fits an empty
device is served, whatever the cache holds when it comes.

The property test replays random traces (prefix sharing between sessions, multi-turn sessions whose
prompts grow by each reply, outputs cached or not, per-block token counts recorded or spread
evenly, blocks or pages) on a device between the floor (the largest prompt + completion) and twice
it, host tier 0, 1x or 2x, under every registered policy. The regression cases are the smallest
case it found and the host-tier case of the issue, worked out by hand.
"""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pbkv_contract.blocks import chain_hash
from pbkv_contract.trace import InvocationRecord, WorkflowEndRecord
from pbkv_server.engine import Engine, EngineConfig, EngineRequest
from pbkv_server.engine.policies import BASELINE_POLICY, DEFAULT_POLICY, REPLAY, available_policies
from pbkv_server.sim.simulator import ReplayConfig, ReplayOptions, load_workload, simulate

from ..engine.engine_helpers import PROFILE


def _keys(labels: list[str]) -> list[str]:
    out, prev = [], b"test"
    for label in labels:
        digest = chain_hash(prev, label.encode())
        out.append(digest)
        prev = digest.encode()
    return out


def _trace(sessions, seed: int, spread: bool) -> list:
    """Records of ``sessions`` (turns of calls ``(shared blocks, fresh blocks, output)``): a call
    extends the previous prompt of its session by that call's reply and its fresh blocks; a
    session's first call starts with up to 3 system blocks all sessions share. Block tokens are a
    function of the block (1-16); ``spread`` leaves them out, so replay spreads each prompt's
    tokens evenly over its hashes, and a shared block holds different counts in different prompts."""
    def tok(label: str) -> int:
        return 1 + hashlib.blake2b(f"{label}/{seed}".encode(), digest_size=1).digest()[0] % 16

    records, t = [], 0.0
    for s, turns in enumerate(sessions):
        history: list[str] = []
        for k, calls in enumerate(turns):
            wid = f"s{s}t{k}"
            for j, (shared, fresh, out) in enumerate(calls):
                labels = history or [f"sys{i}" for i in range(shared)]
                labels = labels + [f"{wid}c{j}f{i}" for i in range(fresh)] or [f"{wid}c{j}"]
                tokens = [tok(x) for x in labels]
                records.append(InvocationRecord(
                    app="app", workflow_id=wid, step=j, agent=f"a{j % 2}", t_start=t, t_end=t + 1.0,
                    prompt_tokens=sum(tokens), completion_tokens=out, prefix_hashes=_keys(labels),
                    block_tokens=None if spread else tokens, session_id=f"s{s}"))
                t += 2.0
                history = labels + [f"{wid}c{j}reply"]
            records.append(WorkflowEndRecord(app="app", workflow_id=wid, t=t))
    return records


def _floor(records) -> int:
    return max(r.prompt_tokens + max(1, r.completion_tokens) for r in records if isinstance(r, InvocationRecord))


def _replay_finishes(records, policy: str, device: int, host: int, concurrency: int, *, cache_outputs=False,
                     page_size=None) -> None:
    workload = load_workload(records)
    config = ReplayConfig(policy, PROFILE, device_tokens=device, host_tokens=host, cache_outputs=cache_outputs,
                          page_size=page_size)
    result = simulate(workload, config, ReplayOptions(concurrency=concurrency))
    # every request got its first token and finished: none waits forever
    assert result.summary["requests"] == workload.invocations
    assert not result.engine.busy


call = st.tuples(st.integers(0, 3), st.integers(0, 4), st.integers(1, 40))
sessions = st.lists(st.lists(st.lists(call, min_size=1, max_size=4), min_size=1, max_size=3), min_size=1, max_size=5)
REPLAYED = [p if p in (BASELINE_POLICY, DEFAULT_POLICY) else pytest.param(p, marks=pytest.mark.slow)
            for p in available_policies(REPLAY)]


@pytest.mark.parametrize("policy", REPLAYED)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=sessions, seed=st.integers(0, 999), spread=st.booleans(), over=st.integers(0, 100),
       host=st.sampled_from([0, 1, 2]), concurrency=st.sampled_from([1, 2, 16]), cache_outputs=st.booleans(),
       page_size=st.sampled_from([None, None, 4]))
def test_every_replay_between_the_floor_and_twice_it_finishes(policy, trace, seed, spread, over, host, concurrency,
                                                               cache_outputs, page_size):
    records = _trace(trace, seed, spread)
    floor = _floor(records)
    device = floor + floor * over // 100
    _replay_finishes(records, policy, device, host * device, concurrency, cache_outputs=cache_outputs,
                     page_size=page_size)


@pytest.mark.parametrize("host", [0, 1, 2])
def test_smallest_failing_case_a_shared_block_cached_larger_than_the_prompt_counts_it(host):
    """The smallest case the property test found (main 6029746 stalls on it): one workflow, two
    calls, no block_tokens. Call 0: one hash A, 10 prompt tokens, so A is cached holding 10 tokens.
    Call 1: hashes A, B and 19 tokens, spread as 9 + 10: its own KV is 19 + 1 output = 20 tokens,
    the device (the floor). Matched as cached, A costs 10, so admitting call 1 needs 10 + 10 new
    + 1 reserved = 21 > 20 even on an idle device: the engine raised "engine stalled". Call 1 must
    be served (A re-cached with call 1's 9 tokens, as if missed)."""
    a, b = _keys(["A", "B"])
    records = [
        InvocationRecord("app", "w", 0, "x", 0.0, 1.0, 10, 1, [a]),
        InvocationRecord("app", "w", 1, "x", 2.0, 3.0, 19, 1, [a, b]),
        WorkflowEndRecord("app", "w", 4.0),
    ]
    assert _floor(records) == 20
    _replay_finishes(records, BASELINE_POLICY, 20, host * 20, 1)


def test_the_issue_case_a_prefix_loaded_from_the_host_tier_counts_its_cached_size():
    """The issue's shape (host 1x stalls, host 0 runs) on the engine, by hand: device 20, host 20.
    r1 caches A (10 tokens); r2 (19 tokens, another prefix) pushes A to the host tier; r3 shares
    A but counts it as 9 tokens (+ B 10, output 1 = 20, the device). Loading A from the host moves
    its cached 10 tokens: 10 + 10 + 1 = 21 > 20 with nothing running. With host 0 A was dropped
    and r3 simply missed it. r3 must be served, prefilling all 19 of its prompt tokens."""
    a, b, c = _keys(["A", "B", "C"])
    eng = Engine(EngineConfig(profile=PROFILE, policy=BASELINE_POLICY, device_tokens=20, host_tokens=20))
    done = []
    for rid, blocks, toks in (("r1", [a], [10]), ("r2", [c], [19]), ("r3", [a, b], [9, 10])):
        eng.submit(EngineRequest(rid, blocks, toks, 1))
        while eng.busy:
            done += [e for e in eng.step() if type(e).__name__ == "FirstToken"]
    assert [e.request_id for e in done] == ["r1", "r2", "r3"]
    r3 = done[-1]
    assert (r3.prompt_tokens, r3.device_cached_tokens, r3.host_cached_tokens) == (19, 0, 0)
    assert eng.stats.device_used_tokens <= 20


def test_replay_and_advise_name_a_request_larger_than_the_device_in_one_line_before_replaying(tmp_path):
    """What no policy can serve (after the fix above, only a request whose prompt + output exceeds
    the device) is said in one line before any replay: w#1 needs 19 + 5 = 24 tokens, the device
    holds 20 (its prompt alone would fit)."""
    from typer.testing import CliRunner

    from pbkv_contract.trace import TraceWriter
    from pbkv_server.cli.bench import app as bench_app
    from pbkv_server.sim.advise import advise

    a, b = _keys(["A", "B"])
    records = [InvocationRecord("app", "w", 0, "x", 0.0, 1.0, 10, 1, [a], block_tokens=[10]),
               InvocationRecord("app", "w", 1, "x", 2.0, 3.0, 19, 5, [a, b], block_tokens=[10, 9]),
               WorkflowEndRecord("app", "w", 4.0)]
    path = tmp_path / "t.jsonl"
    with TraceWriter(path) as writer:
        for rec in records:
            writer.write(rec)
    result = CliRunner().invoke(bench_app, ["replay", str(path), "--policy", "lru", "--no-gap",
                                            "--device-tokens", "20", "--host-ratio", "0"])
    assert result.exit_code == 2
    assert ("request too large: w#1 needs 24 tokens of KV cache (prompt + output), the device holds 20"
            in " ".join(result.output.split()))
    assert "latency" not in result.output  # nothing replayed
    import dataclasses
    advice = advise(records, dataclasses.replace(PROFILE, device_kv_tokens=20), policies=("lru",))
    assert advice.regime == "request too large" and not advice.latency_s
    assert "w#1: 24 tokens of prompt + output" in advice.verdict
