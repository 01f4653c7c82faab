"""Hardware profiles: figures derived from model configs and datasheets, checked by hand."""

from __future__ import annotations

import pytest

from pbkv_server.hardware.profiles import PROFILES, get_profile, profile_names


def test_one_profile_per_reference_testbed():
    assert {"a6000-qwen3-14b", "a6000x2-qwen3-32b-tp2", "a6000x8-qwen3-32b-tp8", "h100-qwen2.5-32b"} <= set(profile_names())
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


def test_2025_profiles_cover_the_issue_matrix():
    # H100 at TP1, TP4 and TP8, H200 and B200; a dense 32B, a 70B class and MoE models
    names = set(profile_names())
    assert {"h100-qwen3-32b", "h100x4-llama3.3-70b-tp4", "h100x8-llama3.3-70b-tp8", "h200-qwen3-32b",
            "b200-llama3.3-70b", "h100-qwen3-coder-30b-a3b", "h200x4-qwen3-235b-a22b-tp4", "h200-gpt-oss-120b"} <= names
    for name in names - {"a6000-qwen3-14b", "a6000x2-qwen3-32b-tp2", "a6000x8-qwen3-32b-tp8", "h100-qwen2.5-32b"}:
        src = get_profile(name).source  # the datasheet's and the config.json's addresses
        assert src.count("https://") >= 2 and "config.json" in src


def test_moe_active_params_for_flops_full_weights_for_memory():
    p = get_profile("h200x4-qwen3-235b-a22b-tp4")
    # prefill FLOPs from 22B active parameters, four GPUs at 90% scaling
    assert p.prefill_tokens_per_s == pytest.approx(989e12 * 0.45 * 4 * 0.9 / (2 * 22e9))
    # memory from all 235B parameters: 143,771 MiB x 0.88 - 470 GB / 4 per GPU, over a quarter of
    # 2 x 94 layers x 4 KV heads x 128 x 2 bytes per token
    assert p.kv_bytes_per_token == 2 * 94 * 4 * 128 * 2 == 192_512
    assert p.device_kv_tokens == int((143771 * 2**20 * 0.88 - 470e9 / 4) // (192_512 / 4))
    assert p.decode_base_s == pytest.approx(470e9 / 4 / (4.8e12 * 0.8))


def test_gpt_oss_checkpoint_bytes_and_window():
    p = get_profile("b200-gpt-oss-120b")
    assert p.kv_bytes_per_token == 2 * 36 * 8 * 64 * 2
    assert p.device_kv_tokens == int((183359 * 2**20 * 0.88 - 60.8 * 2**30) // p.kv_bytes_per_token)
    assert p.attn_window == 128 and p.chunked_prefill_size == 16384  # B200: above 160 GiB


def test_attention_term_by_hand():
    # Qwen3-32B on one H100: 4 x 64 layers x 64 heads x 128 FLOPs per (query, key) pair at
    # 989 TFLOPS x 0.5; 1,000 new tokens after 9,000 cached attend to 1,000 x (9,000 + 500) pairs
    p = get_profile("h100-qwen3-32b")
    flops = 4 * 64 * 64 * 128 * 1000 * 9500
    assert p.attention_time(1000, 9000) == pytest.approx(flops / (989e12 * 0.5))
    assert p.prefill_time_at(1000, 9000) == pytest.approx(1000 / p.prefill_tokens_per_s + flops / 494.5e12)
    assert p.prefill_time(1000) == pytest.approx(1000 / p.prefill_tokens_per_s)  # the linear term alone
    # the issue's claim: at 100k tokens of context the term is about as large as the linear one
    assert 1 < p.attention_time(1, 100_000) / p.prefill_time(1) < 4


def test_sliding_window_pairs_by_hand():
    # gpt-oss: 18 window layers of 128 tokens; 100 new tokens after 50 cached: the first 78
    # attend to 50..128 keys (ramp), the other 22 to 128 each
    p = get_profile("h200-gpt-oss-120b")
    full, windowed = p.attention_pairs(100, 50)
    assert full == 100 * (50 + 50)
    assert windowed == pytest.approx(78 * 50 + 78 * 78 / 2 + 22 * 128)
    assert p.attention_pairs(10, 500)[1] == 10 * 128  # context past the window: w per token
    per_pair = 4 * 64 * 64 / (989e12 * 0.5)  # heads x head_dim per layer
    assert p.attention_time(100, 50) == pytest.approx(per_pair * (18 * full + 18 * windowed))


def test_legacy_profiles_keep_their_rates():
    # adding the attention fields changed no legacy rate: the pre-existing profile by hand
    p = get_profile("a6000-qwen3-14b")
    assert p.prefill_tokens_per_s == pytest.approx(154.8e12 * 0.45 / (2 * 14.8e9))
    assert p.chunked_prefill_size == 4096  # 48 GB: SGLang's 4k


def test_advise_builds_a_profile_for_each_new_model():
    from pbkv_server.sim.advise import custom_profile

    # 141 GB x 4 H200 hold Qwen3-235B-A22B's 470 GB: the same capacity rule as the named profile
    p = custom_profile(143771 / 1024, "qwen3-235b-a22b", tp=4, gpu="h200")
    assert p.device_kv_tokens == get_profile("h200x4-qwen3-235b-a22b-tp4").device_kv_tokens
    for model in ("llama3.3-70b", "qwen3-coder-30b-a3b", "openai/gpt-oss-120b"):
        assert custom_profile(179.06, model, tp=1, gpu="b200").attn_pair_s > 0
    with pytest.raises(ValueError, match="unknown model"):
        custom_profile(80, "llama-9000")


def test_per_request_and_cached_token_terms_by_hand():
    # a probed CPU profile: 1,000 tok/s, 1e-7 s per pair, 20 ms per request, 20 us per cached
    # token, 5e-8 s per cached pair; 100 new tokens after 400 cached:
    #   0.1 + 1e-7 x 100 x (400 + 50) + 0.02 + 2e-5 x 400 + 5e-8 x 400^2 / 2
    #   = 0.1 + 0.0045 + 0.02 + 0.008 + 0.004 = 0.1365 s
    from dataclasses import replace

    base = get_profile("h100-qwen3-32b")
    assert (base.prefill_request_s, base.cached_token_s, base.cached_pair_s) == (0, 0, 0)
    p = replace(base, prefill_tokens_per_s=1000.0, attn_pair_s=1e-7, attn_window_pair_s=0.0, attn_window=0,
                prefill_request_s=0.02, cached_token_s=2e-5, cached_pair_s=5e-8)
    assert p.cached_time(400) == pytest.approx(0.012)
    assert p.prefill_time_at(100, 400) == pytest.approx(0.1365)
    assert p.prefill_time(100) == pytest.approx(0.1)  # the legacy linear model ignores them
    # without the new terms the figure is the attention model's alone, to the bit
    q = replace(p, prefill_request_s=0.0, cached_token_s=0.0, cached_pair_s=0.0)
    assert q.prefill_time_at(100, 400) == q.prefill_time(100) + q.attention_time(100, 400)
    with pytest.raises(ValueError, match="cached-token"):
        replace(p, cached_pair_s=-1e-9)
