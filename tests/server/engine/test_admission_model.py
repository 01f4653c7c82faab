"""Engine model ``sglang`` and the attention prefill term on tiny hand-built cases.

Each expected figure is worked out by hand in the comments (docs/cost-model.md gives the rules).
"""

from __future__ import annotations

import dataclasses

import pytest

from pbkv_server.engine import Engine, EngineConfig, EngineRequest
from pbkv_server.engine.types import FirstToken, Finished
from pbkv_server.hardware.profiles import get_profile

# Times do not matter for the memory cases: a profile whose iterations all take 1 s.
FLAT = dataclasses.replace(get_profile("h100-qwen3-32b"), prefill_tokens_per_s=1e18, decode_base_s=1.0,
                           decode_per_token_s=0.0, attn_pair_s=0.0, attn_window_pair_s=0.0)


def run(engine: Engine, requests: list[EngineRequest]) -> list:
    for r in requests:
        engine.submit(r)
    events = []
    while engine.busy:
        events += engine.step()
    return events


def two_requests() -> list[EngineRequest]:
    # two 10-token prompts with nothing in common, 60 output tokens each
    return [EngineRequest("a", ["pa"], [10], 60), EngineRequest("b", ["pb"], [10], 60)]


def test_outputs_that_cannot_both_fit_retract_one_request():
    # Device 110 tokens. Admission (ratio 0.7): a holds 10 + 1 and sets aside ceil(59 x 0.7) = 42;
    # b needs 10 + 1 + 42 (its own) + 42 (a's) beside a's 11: 106 <= 110, so both start together.
    # Decoding adds 2 tokens a step: 22 + 2k <= 110 holds for k = 44 steps; the 45th has no room, so
    # b (equal output, equal prompt: the later one, as SGLang pops it) is retracted: once. a then
    # finishes its last 15 tokens; b (45 tokens made) waits: it needs 10 + 46 held + estimates.
    engine = Engine(EngineConfig(profile=FLAT, device_tokens=110, host_tokens=0, engine_model="sglang",
                                 chunked_prefill_size=0))
    events = run(engine, two_requests())
    assert engine.stats.retractions == 1
    assert engine.stats.retracted_tokens == 10 + 45  # b's prompt and the 45 tokens it had made
    assert engine.stats.oom_events == 0
    first = [e.request_id for e in events if isinstance(e, FirstToken)]
    done = [e.request_id for e in events if isinstance(e, Finished)]
    assert first == ["a", "b"] and done == ["a", "b"]  # b reports its first token once
    # b is prefilled again only after a finished: iterations 1 (both), 2..60 (a's 59 steps, b
    # retracted after 44 of them), 61 (b again: its prompt, a hit, and its 45 tokens), 62..75 (14 steps)
    assert engine.stats.decode_iterations == 59 + 14


def test_legacy_reserves_the_whole_output_and_never_retracts():
    # a reserves 10 + 60 = 70 of 110; b needs 70 more: it waits until a finishes
    engine = Engine(EngineConfig(profile=FLAT, device_tokens=110, host_tokens=0, engine_model="legacy"))
    events = run(engine, two_requests())
    assert engine.stats.retractions == 0
    starts = {e.request_id: e.time for e in events if isinstance(e, FirstToken)}
    ends = {e.request_id: e.time for e in events if isinstance(e, Finished)}
    assert starts["b"] >= ends["a"]


def test_room_for_both_no_retraction():
    # 140 tokens hold both prompts and outputs (2 x 70): SGLang's model admits both, retracts none
    engine = Engine(EngineConfig(profile=FLAT, device_tokens=140, host_tokens=0, engine_model="sglang"))
    run(engine, two_requests())
    assert engine.stats.retractions == 0 and engine.stats.decode_iterations == 59


def test_chunked_prefill_spreads_a_long_prompt_over_iterations():
    # 10,000 new tokens in chunks of 4,096: three prefill iterations, each with a decode step of
    # the request already running (which therefore makes 3 tokens during them)
    profile = get_profile("h100-qwen3-32b")
    engine = Engine(EngineConfig(profile=profile, device_tokens=30_000, host_tokens=0, engine_model="sglang",
                                 chunked_prefill_size=4096, prefill_cost="linear"))
    engine.submit(EngineRequest("run", ["r"], [100], 50))
    engine.step()  # "run" prefilled and running
    engine.submit(EngineRequest("long", ["l"], [10_000], 2))
    before = engine.stats.decode_iterations
    t0 = engine.clock
    events = engine.step()
    assert engine.stats.decode_iterations - before == 3
    first = next(e for e in events if isinstance(e, FirstToken))
    # prefill time is that of 10,000 tokens however chunked; three decode steps of one sequence
    # holding 101, 102, 103 tokens
    decode = sum(profile.decode_step_time(1, c) for c in (101, 102, 103))
    assert first.time - t0 == pytest.approx(profile.prefill_time(10_000) + decode)


def test_attention_term_adds_the_hand_computed_time():
    # one 8,000-token prompt on an idle engine: first token at load 0 + prefill; the attention model
    # adds 4 x 64 x 64 x 128 x 8,000 x (0 + 4,000) FLOPs at 989 TFLOPS x 0.5
    profile = get_profile("h100-qwen3-32b")
    times = {}
    for cost in ("linear", "attention"):
        engine = Engine(EngineConfig(profile=profile, prefill_cost=cost))
        events = run(engine, [EngineRequest("x", ["p"], [8000], 1)])
        times[cost] = next(e.time for e in events if isinstance(e, FirstToken))
    assert times["linear"] == pytest.approx(8000 / profile.prefill_tokens_per_s)
    assert times["attention"] - times["linear"] == pytest.approx(4 * 64 * 64 * 128 * 8000 * 4000 / (989e12 * 0.5))


def test_attention_term_uses_the_cached_context():
    # the second prompt extends the first (cached) by 1,000 tokens: they attend to 5,000 + 500 keys
    profile = get_profile("h100-qwen3-32b")
    engine = Engine(EngineConfig(profile=profile, prefill_cost="attention"))
    run(engine, [EngineRequest("a", ["p"], [5000], 1)])
    t0 = engine.clock
    events = run(engine, [EngineRequest("b", ["p", "q"], [5000, 1000], 1)])
    first = next(e for e in events if isinstance(e, FirstToken))
    assert first.device_cached_tokens == 5000
    assert first.time - t0 == pytest.approx(1000 / profile.prefill_tokens_per_s
                                            + 4 * 64 * 64 * 128 * 1000 * 5500 / (989e12 * 0.5))


@pytest.mark.parametrize(("setting", "line"), [
    ({"engine_model": "vllm"}, "engine_model must be one of legacy, sglang, got vllm"),
    ({"prefill_cost": "cubic"}, "prefill_cost must be one of linear, attention, got cubic"),
    ({"chunked_prefill_size": -1}, "chunked_prefill_size must be >= 0 tokens (0 = no chunking), got -1"),
])
def test_bad_model_settings_are_one_line(setting, line):
    with pytest.raises(ValueError) as info:
        EngineConfig(profile=FLAT, **setting)
    assert str(info.value) == line
