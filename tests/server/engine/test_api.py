"""Engine API contract: bad input gets clear errors and loses nothing, predictor plumbing,
workflow lifecycle (end, idle retirement), stats and the policy registry."""

from __future__ import annotations

import dataclasses
import re

import pytest

from pbkv_contract.hints import Hints
from pbkv_server.engine import (Engine, EngineConfig, EngineRequest, Finished, FirstToken, HardwareProfile,
                                available_policies)

from .engine_helpers import PROFILE, TablePredictor, chain, make_engine, request, run


def test_registry_lists_every_builtin_policy_and_rejects_unknown_names():
    assert available_policies() == ["lru", "lae", "he", "pbkv-paper", "pbkv", "pbkv-aggressive", "kvflow", "sglang-session",
                                    "sglang-priority", "ttl-pin", "continuum", "spec-prefill", "kvflow-shipped",
                                    "tlru", "slru", "opt", "belady", "opt-device", "opt-host", "opt-ref",
                                    "pbkv-nextuse", "pbkv-survival"]
    with pytest.raises(ValueError, match="unknown policy 'fifo'.*lru"):
        make_engine("fifo")


def test_config_is_keyword_only_and_capacity_overrides_profile():
    with pytest.raises(TypeError):
        EngineConfig(PROFILE)  # type: ignore[misc]
    eng = Engine(EngineConfig(profile=PROFILE))
    assert (eng.cache.device_capacity, eng.cache.host_capacity) == (PROFILE.device_kv_tokens, PROFILE.host_kv_tokens)
    assert make_engine(device=77, host=5).cache.device_capacity == 77
    with pytest.raises(ValueError):
        make_engine(device=0)


def test_profile_cost_functions_and_validation():
    """prefill 250 tokens at 1000 tok/s = 0.25 s; decode batch 4 = 0.01 + 4 * 0.001 = 0.014 s;
    load 500 tokens * 1000 B / 1e6 B/s = 0.5 s; 0.5 s of PCIe moves 500 tokens."""
    assert PROFILE.prefill_time(250) == pytest.approx(0.25)
    assert PROFILE.decode_step_time(4) == pytest.approx(0.014)
    assert PROFILE.load_time(500) == pytest.approx(0.5)
    assert PROFILE.load_tokens(0.5) == 500
    with pytest.raises(ValueError, match="positive"):
        HardwareProfile("bad", "", "", 0.0, 0.01, 0.001, 1e9, 10, 100, 0)


def test_malformed_requests_are_rejected_and_leave_the_engine_unchanged():
    eng = make_engine("lru", device=100)
    eng.submit(request("ok", ["a"], output=3))
    with pytest.raises(ValueError, match="2 blocks but 1 token counts"):
        eng.submit(EngineRequest("bad1", chain("ab"), [5], 1))
    with pytest.raises(ValueError, match="negative"):
        eng.submit(EngineRequest("bad2", chain("a"), [-1], 1))
    with pytest.raises(ValueError, match="already waiting or running"):
        eng.submit(request("ok", ["b"]))
    with pytest.raises(ValueError, match="needs 101 tokens"):
        eng.submit(EngineRequest("big", chain("z"), [100], 1))
    events = run(eng)
    assert [e.request_id for e in events] == ["ok", "ok"]
    assert eng.stats.prompt_tokens == 10
    eng.submit(request("ok", ["a"]))  # the id is free again once finished
    assert run(eng)[0].device_cached_tokens == 10


def test_block_token_counts_of_any_numeric_sequence_are_read_as_ints():
    """A list of ints is read as it is; a tuple, integral floats (a JSON writer's 4.0) and NumPy
    integers are converted: the same prompt tokens and hits each way."""
    import numpy as np

    prompts = []
    from fractions import Fraction

    for rid, toks in (("ints", [4, 3]), ("tuple", (4, 3)), ("floats", [4.0, 3.0]),
                      ("numpy", np.array([4, 3])), ("np-list", [np.int64(4), np.int32(3)]),
                      ("np-floats", np.array([4.0, 3.0], dtype=np.float32)), ("fractions", [Fraction(4), 3])):
        eng = make_engine("lru", device=100)
        eng.submit(EngineRequest(rid, chain("ab"), toks, 1))
        eng.submit(EngineRequest(rid + "2", chain("ab"), [4, 3], 1))
        run(eng)
        prompts.append(eng.stats.prompt_tokens)
        units = eng.cache.tree.root.children[chain("a")[0]].toks
        assert all(type(t) is int for t in units), rid
    assert prompts == [14] * 7


@pytest.mark.parametrize("toks, named", [
    ([4, 3.9], "block_tokens[1] must be a whole number, got 3.9"),
    ([4, True], "block_tokens[1] must be a whole number, got True"),
    ([float("nan"), 4], "block_tokens[0] must be a whole number, got nan"),
    ([4, float("inf")], "block_tokens[1] must be a whole number, got inf"),
    (["4", 3], "block_tokens[0] must be a whole number, got '4'"),
    ([4, None], "block_tokens[1] must be a whole number, got None"),
    (None, "block_tokens must be a sequence of token counts, got NoneType"),
    ("ab", "block_tokens must be a sequence of token counts, got str"),
    ((t for t in [4, 3]), "block_tokens must be a sequence of token counts, got generator"),
    ({4, 3}, "block_tokens must be a sequence of token counts, got set"),  # no order
])
def test_counts_that_are_not_whole_numbers_are_refused_by_name(toks, named):
    eng = make_engine("lru", device=100)
    with pytest.raises(ValueError, match=re.escape(f"request bad: {named}")):
        eng.submit(EngineRequest("bad", chain("ab"), toks, 1))
    assert eng.submitted == 0 and not eng.busy


@pytest.mark.parametrize("change, named", [
    ({"output_tokens": float("nan")}, "output_tokens must be a whole number"),
    ({"output_tokens": "x"}, "output_tokens must be a whole number"),
    ({"blocks": [["a"], ["b"]]}, "blocks must be a sequence of hashable keys, got list"),
    ({"blocks": (k for k in chain("ab"))}, "blocks must be a sequence of hashable keys, got generator"),
    ({"blocks": "ab"}, "blocks must be a sequence of hashable keys, got str"),
    ({"blocks": {"a": 1, "b": 2}}, "blocks must be a sequence of hashable keys, got dict"),
    ({"features": (1.0, float("nan"))}, "features[1] must be a finite number, got nan"),
    ({"last_step": "no"}, "last_step must be true or false, got 'no'"),
    ({"speculative_next": "x"}, "speculative_next must be None or (blocks, block_tokens) of one length"),
    ({"speculative_next": (["x", "y"], [1])}, "speculative_next must be None or (blocks, block_tokens) of one length"),
    ({"hints": Hints(workflow_id="w1", agent="a", step=-1)}, "hints.step must be a whole number >= 0, got -1"),
    ({"hints": Hints(workflow_id=5, agent="a", step=1)}, "hints need a non-empty workflow_id and an agent"),
    ({"hints": "w1"}, "hints must be pbkv_contract.hints.Hints or None, got str"),
    ({"features": None}, "features must be a sequence of numbers"),
    ({"features": ("a",)}, "features[0] must be a finite number, got 'a'"),
    ({"session_id": ["s"]}, "session_id must be a string or None, got list"),
    ({"priority": 1.5}, "priority must be a whole number"),
    ({"cache_ttl_s": float("inf")}, "cache_ttl_s must be a finite number >= 0 or None"),
    ({"cache_ttl_s": -1}, "cache_ttl_s must be a finite number >= 0 or None"),
])
def test_bad_fields_are_refused_before_the_engine_records_anything(change, named):
    # (a bad request id is named as such: test_a_request_id_must_be_a_non_empty_string)
    """Each bad field is one ValueError naming the request, and the engine is as it was: no
    submission index used, no workflow started, and a good request served after it."""
    eng = make_engine("pbkv", device=100)
    good = dict(request_id="bad", blocks=chain("ab"), block_tokens=[4, 3], output_tokens=1,
                hints=Hints(workflow_id="w1", agent="a", step=1))
    with pytest.raises(ValueError, match=re.escape(f"request bad: {named}")):
        eng.submit(EngineRequest(**{**good, **change}))
    assert eng.submitted == 0 and not eng.active_workflows() and not eng.busy
    eng.submit(EngineRequest(**good))
    assert [type(e).__name__ for e in run(eng)] == ["FirstToken", "Finished"]


def test_empty_prompt_and_zero_output_are_served():
    """A request without blocks still produces its first (and only) token after a 0 s prefill."""
    eng = make_engine("lru")
    eng.submit(EngineRequest("e", [], [], 0))
    events = run(eng)
    assert events == [FirstToken("e", 0.0, 0, 0, 0, admitted_at=0.0), Finished("e", 0.0, 1)]


class _Broken(TablePredictor):
    def predict(self, queries):
        raise RuntimeError("model file corrupt")


def test_predictor_failure_never_breaks_a_request():
    eng = make_engine("pbkv", predictor=_Broken())
    eng.submit(request("r", ["a"], hints=Hints("w", "a", 0, "app")))
    assert [type(e) for e in run(eng)] == [FirstToken, Finished]


def test_predictor_sees_every_invocation_with_history_and_learns_workflow_ends():
    """observe() gets (app, workflow, step, earlier agents, agent, features) per invocation;
    workflow_ended() once per ended workflow (a second end is a no-op)."""
    pred = TablePredictor()
    eng = make_engine("pbkv", predictor=pred)
    for step, agent in enumerate(["plan", "code", "test"]):
        req = request(f"r{step}", ["sys", agent], hints=Hints("w", agent, step, "app"))
        req.features = (0.5, 0.5)
        eng.submit(req)
        run(eng)
    eng.end_workflow("w", "failed")
    eng.end_workflow("w")
    q = pred.observed[-1]
    assert (q.app, q.workflow_id, q.step, q.history, q.agent, q.features) == (
        "app", "w", 2, ("plan", "code"), "test", (0.5, 0.5))
    assert pred.ended == ["w"]
    assert len(eng.stats.predictor_call_s) == 3 and len(eng.stats.score_update_s) >= 2


def test_idle_workflows_are_retired_after_the_configured_time():
    """idle_retire_s = 10: w1 (last active at 0.01 s) is retired once the clock passes 10.01 s,
    w2 (active at 8 s) is not; w1's cache becomes retired and lae evicts it first."""
    eng = make_engine("lae", device=50, idle_retire_s=10.0)
    eng.submit(request("a", ["A1", "A2"], hints=Hints("w1", "a", 0, "app")))
    run(eng)
    eng.advance_to(8.0)
    eng.submit(request("b", ["B1", "B2"], hints=Hints("w2", "a", 0, "app")))
    run(eng)
    assert eng.stats.active_workflows == 2
    eng.advance_to(10.5)
    assert eng.stats.active_workflows == 1 and eng.workflow("w2") is not None
    eng.submit(request("c", ["C1", "C2"]))  # 21 with 10 free: one whole node must go
    run(eng)
    assert not set(chain(["A1"])) & {k for n in eng.cache.tree.nodes() for k in n.keys}


def test_max_batch_limits_running_requests():
    """max_batch 2: three one-block requests arrive at 0; the third waits for a completion."""
    eng = make_engine("lru", max_batch=2)
    for i in range(3):
        eng.submit(request(f"r{i}", [f"b{i}"], output=2))
    first = [e for e in eng.step() if isinstance(e, FirstToken)]
    assert [e.request_id for e in first] == ["r0", "r1"] and eng.stats.queue_depth == 1
    assert eng.stats.running == 2
    run(eng)
    assert eng.stats.requests_finished == 3


def test_an_ended_workflow_keeps_its_cache_active_until_its_running_request_finishes():
    """w1's second request (20 tokens, 5 output) runs when its end signal arrives: the end waits
    for the request, so its nodes are not retired while it runs, and retire right after it finishes."""
    pred = TablePredictor()
    eng = make_engine("lae", device=100, predictor=pred)
    eng.submit(request("a0", ["A1"], hints=Hints("w1", "a", 0, "app")))
    run(eng)
    eng.submit(request("a", ["A1", "A2"], output=5, hints=Hints("w1", "a", 1, "app")))
    eng.step()  # admitted, first token; still decoding
    assert eng.end_workflow("w1") is True
    assert eng.workflow("w1") is not None and pred.ended == []
    assert not any(n.sc.retired for n in eng.cache.tree.nodes())
    run(eng)
    assert eng.workflow("w1") is None and pred.ended == ["w1"]
    assert all(n.sc.retired for n in eng.cache.tree.nodes()) and eng.stats.retired_workflows == 1


def test_decode_step_reads_the_context_of_every_running_sequence():
    # 0.01 s per step + 1 ms per 1,000 context tokens: a 1,000-token prompt generating 3 tokens.
    profile = dataclasses.replace(PROFILE, decode_per_seq_s=0.0, decode_per_token_s=1e-6)
    engine = Engine(EngineConfig(profile=profile, device_tokens=5000))
    engine.submit(EngineRequest("a", chain(range(10)), [100] * 10, 3))
    (first,) = engine.step()
    assert first.time == pytest.approx(1.0)  # prefill of 1,000 tokens, nobody decoding
    (done,) = engine.step()
    # two decode steps over contexts of 1,001 and 1,002 tokens
    assert done == Finished("a", pytest.approx(1.0 + 0.01 + 1.001e-3 + 0.01 + 1.002e-3), 3)
    assert engine.stats.decode_iterations == 2
    assert profile.decode_steps_time(1, 1001, 2) == pytest.approx(0.02 + 2.003e-3)
    # a decode-only stretch stops at the first step boundary at or after ``until``
    assert profile.decode_steps_until(1, 1001, 0.011001) == 1  # exactly one step (1,001 tokens of context)
    assert profile.decode_steps_until(1, 1001, 0.012) == 2
    assert profile.decode_steps_until(1, 1001, 0.023) == 3  # 0.011001 + 0.011002 + 0.011003 = 0.033006


@pytest.mark.parametrize("rid", [None, 5, "", ["l"]])
def test_a_request_id_must_be_a_non_empty_string(rid):
    eng = make_engine("lru", device=100)
    with pytest.raises(ValueError, match=re.escape(f"request id must be a non-empty string, got {rid!r}")):
        eng.submit(EngineRequest(rid, chain("ab"), [4, 3], 1))
    assert eng.submitted == 0 and not eng.busy
