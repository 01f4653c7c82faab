"""Hardware profiles: figures derived from model configs and datasheets, checked by hand."""

from __future__ import annotations

import pytest

from pbkv_server.hardware.profiles import PROFILES, get_profile, profile_names


def test_one_profile_per_reference_testbed():
    assert profile_names() == ["a6000-qwen3-14b", "a6000x2-qwen3-32b-tp2", "a6000x8-qwen3-32b-tp8", "h100-qwen2.5-32b"]
    for p in PROFILES.values():
        assert "config.json" in p.source and "datasheet" in p.source
        assert p.host_kv_tokens == 2 * p.device_kv_tokens  # SGLang HiCache default ratio 2.0


def test_kv_bytes_per_token_from_model_configs():
    # 2 (K, V) x layers x KV heads x head_dim x 2 bytes (bf16)
    assert get_profile("a6000-qwen3-14b").kv_bytes_per_token == 2 * 40 * 8 * 128 * 2 == 163_840
    assert get_profile("a6000x2-qwen3-32b-tp2").kv_bytes_per_token == 2 * 64 * 8 * 128 * 2 == 262_144
    assert get_profile("h100-qwen2.5-32b").kv_bytes_per_token == 262_144


def test_device_capacity_is_memory_minus_weights_over_kv_bytes():
    # A6000: 49140 MiB x 0.88 - 14.8e9 params x 2 bytes, over 163,840 bytes per token.
    expected = int((49140 * 2**20 * 0.88 - 29.6e9) // 163_840)
    assert get_profile("a6000-qwen3-14b").device_kv_tokens == expected
    # TP2 halves both the weights and the KV bytes each GPU holds per token.
    expected_tp2 = int((49140 * 2**20 * 0.88 - 32.8e9) // 131_072)
    assert get_profile("a6000x2-qwen3-32b-tp2").device_kv_tokens == expected_tp2
    # the paper's eight-GPU testbed: each GPU holds 1/8 of the weights and of a token's KV
    expected_tp8 = int((49140 * 2**20 * 0.88 - 65.6e9 / 8) // 32_768)
    assert get_profile("a6000x8-qwen3-32b-tp8").device_kv_tokens == expected_tp8


def test_rates_by_hand():
    p = get_profile("h100-qwen2.5-32b")
    assert p.prefill_tokens_per_s == pytest.approx(989e12 * 0.45 / (2 * 32.5e9))
    assert p.decode_base_s == pytest.approx(65e9 / (3.35e12 * 0.8))
    # a decode step reads each running sequence's KV: 262,144 bytes per context token at 80% of HBM
    assert p.decode_per_token_s == pytest.approx(262_144 / (3.35e12 * 0.8)) and p.decode_per_seq_s == 0
    assert p.decode_step_time(72, 72 * 1000) == pytest.approx(p.decode_base_s + 72_000 * 262_144 / 2.68e12)
    assert p.pcie_bytes_per_s == pytest.approx(64e9 * 0.78)
    assert p.load_time(1000) == pytest.approx(1000 * 262_144 / (64e9 * 0.78))


def test_unknown_profile_error_lists_the_names():
    with pytest.raises(KeyError) as err:
        get_profile("tpu-v5")
    assert "a6000-qwen3-14b" in str(err.value) and "h100-qwen2.5-32b" in str(err.value)
