"""The calibration workload (KVFlow Section 4.1) and its replay, checked by hand on small sizes."""

from __future__ import annotations

import dataclasses

import pytest

from pbkv_contract.trace import InvocationRecord, WorkflowEndRecord
from pbkv_server.sim.calibration import CalibrationRow, KVFLOW_SPEEDUPS, kvflow_latencies, kvflow_records

from ..engine.engine_helpers import PROFILE


def test_kvflow_workload_shares_each_agents_fixed_prompt_across_runs_only():
    records = kvflow_records(fixed=256, dynamic=32, output=8, stages=3, runs=2, warmup_runs=1)
    invs = [r for r in records if isinstance(r, InvocationRecord)]
    assert len(invs) == 9 and sum(isinstance(r, WorkflowEndRecord) for r in records) == 3
    assert all(r.prompt_tokens == 288 and sum(r.block_tokens) == 288 and r.completion_tokens == 8 for r in invs)
    by = {(r.workflow_id, r.agent): r.prefix_hashes for r in invs}
    # 256 fixed tokens = 4 blocks of 64 tokens, then one 32-token block of the run's dynamic part
    assert by[("run0", "agent1")][:4] == by[("run2", "agent1")][:4]
    assert by[("run0", "agent1")][4] != by[("run2", "agent1")][4]
    assert by[("run0", "agent0")][0] != by[("run0", "agent1")][0]


def test_without_misses_every_system_runs_the_same_hand_computed_latency():
    # Test profile: prefill 1000 tok/s, decode 0.01 s + 0.001 s per sequence, batch 1. A stage after
    # the warm-up prefills its 32 dynamic tokens (0.032 s), then 31 decode steps of 0.011 s.
    records = kvflow_records(fixed=256, dynamic=32, output=32, stages=10, runs=2)
    big = dataclasses.replace(PROFILE, device_kv_tokens=10_000)
    lat = kvflow_latencies(big, records)
    assert lat == pytest.approx({"graph": 3.73, "hicache": 3.73, "gpu_only": 3.73})


def test_a_device_smaller_than_the_fixed_prompts_orders_recompute_load_and_prefetch():
    # 10 fixed prompts of 256 tokens do not fit 2,400 tokens: LRU misses on every stage; a host
    # load (0.1 ms per token here) is cheaper than a prefill (1 ms per token).
    records = kvflow_records(fixed=256, dynamic=32, output=32, stages=10, runs=3)
    tight = dataclasses.replace(PROFILE, device_kv_tokens=2_400, pcie_bytes_per_s=1e7)
    lat = kvflow_latencies(tight, records)
    assert lat["gpu_only"] > lat["hicache"] >= lat["graph"] > 3.73
    # relative error against the published 1.42x, by hand: 1.30 / 1.42 - 1 = -0.0845, within the 15% tolerance
    row = CalibrationRow(KVFLOW_SPEEDUPS["gpu_only"], 1.30, "test")
    assert row.error == pytest.approx(-0.084507, abs=1e-6) and row.agrees


def test_itl_rows_are_the_decode_step_by_hand():
    # Qwen3-14B on one H100: 29.6 GB of weights and 163,840 KV bytes per token at 80% of 3.35 TB/s,
    # 8 sequences of 1,000 tokens each (the stated context assumption)
    from pbkv_server.sim.calibration import ITL_CONTEXT, MLENERGY_ITL, itl_rows

    rows = itl_rows()
    assert [r.published.value for r in rows] == list(MLENERGY_ITL.values())
    first = rows[0]
    assert ITL_CONTEXT == 1000
    assert first.ours == pytest.approx(1e3 * (29.6e9 + 8 * 1000 * 163_840) / (3.35e12 * 0.8))


def test_prefill_rows_are_the_two_prefill_terms_by_hand():
    # Llama-3.3-70B (70.6B parameters; 80 layers x 64 query heads x head_dim 128) on two H100 at
    # the dense FP8 peak 1,979 TFLOPS: linear rate = 1979e12 x 0.45 (MFU) x 1.8 (TP2 at 90%)
    # / (2 x 70.6e9) = 11,352.6 tok/s; attention = 4 x 64 x 128 x 80 = 2,621,440 FLOPs per pair
    # at 1979e12 x 0.5 x 1.8, over n^2 / 2 pairs for a cold prompt of n tokens.
    from pbkv_server.sim.calibration import NIM_TTFT, prefill_rows

    rate = 1979e12 * 0.45 * 1.8 / (2 * 70.6e9)
    pair_s = 2_621_440 / (1979e12 * 0.5 * 1.8)
    rows = {(r.model, r.published.value): r for r in prefill_rows()}
    assert len(rows) == 4 and {v for v, _ in NIM_TTFT.values()} == {47.77, 406.77}
    assert rows[("legacy", 406.77)].ours == pytest.approx(1e3 * 5000 / rate)  # 440.4 ms
    assert rows[("legacy", 47.77)].ours == pytest.approx(1e3 * 500 / rate)  # 44.0 ms
    assert rows[("attention+sglang", 406.77)].ours == pytest.approx(1e3 * (5000 / rate + pair_s * 5000**2 / 2))
    assert rows[("attention+sglang", 406.77)].ours == pytest.approx(458.82, abs=0.01)
    # 458.82 / 406.77 - 1 = +12.8%: within the 15% tolerance
    assert rows[("attention+sglang", 406.77)].error == pytest.approx(0.128, abs=0.001)


def test_single_request_ttft_is_the_prefill_alone():
    # Test profile: 1,000 tok/s and no attention term; 300 cold tokens alone -> 0.3 s to the first token
    from pbkv_server.sim.calibration import single_request_ttft

    big = dataclasses.replace(PROFILE, device_kv_tokens=10_000)
    assert single_request_ttft(big, 300, 5) == pytest.approx(0.3)
    with pytest.raises(ValueError):
        single_request_ttft(big, 0)


def test_qwen_speed_rows_are_prefill_plus_decode_by_hand():
    # Qwen3-32B (32.8B parameters, 64 layers x 64 query heads x head_dim 128, 262,144 KV bytes per
    # token) on one H20 (148 TFLOPS, 4.0 TB/s): linear rate 148e12 x 0.45 / (2 x 32.8e9) tok/s,
    # attention 4 x 64 x 128 x 64 FLOPs per pair at 148e12 x 0.5; decode step k (k = 1..2,047)
    # reads the weights and the n + k tokens of KV at 80% of 4.0 TB/s.
    from pbkv_server.sim.calibration import QWEN_GENERATED, qwen_speed_rows

    n, out = 30720, QWEN_GENERATED
    rate = 148e12 * 0.45 / (2 * 32.8e9)
    attention = 2_097_152 / (148e12 * 0.5) * n * n / 2  # 13.37 s
    steps = out - 1
    decode = steps * 2 * 32.8e9 / 3.2e12 + 262_144 / 3.2e12 * (steps * n + steps * (steps + 1) / 2)
    rows = {(r.model, r.published.value): r for r in qwen_speed_rows()}
    assert len(rows) == 12
    assert rows[("legacy", 240.75)].ours == pytest.approx((n + out) / (n / rate + decode), rel=1e-6)
    assert rows[("attention+sglang", 240.75)].ours == pytest.approx((n + out) / (n / rate + attention + decode),
                                                                   rel=1e-6)
    # the 129,042-token row needs two GPUs: on one, Qwen3-32B leaves room for about 72,000 tokens of KV
    from pbkv_server.sim.calibration import h20_profile

    assert h20_profile(1).device_kv_tokens == int((96e9 * 0.88 - 32.8e9 * 2) // 262_144) < 129_042
