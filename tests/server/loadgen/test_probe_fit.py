"""The probe fit recovers a cost model from hand-made probes (pbkv_server/loadgen/probe_fit.py)."""

from __future__ import annotations

import pytest

from pbkv_server.loadgen.probe_fit import DecodeProbe, PrefillProbe, fit_cached, fit_decode, fit_prefill, fit_probes


def _cold(n: int) -> float:
    # 20 ms fixed, 1,000 tok/s, 1e-7 s per attention pair (n^2 / 2 pairs)
    return 0.02 + n / 1000 + 1e-7 * n * n / 2


def test_exact_probes_give_back_their_terms_and_the_cached_share():
    cold = [PrefillProbe(n, 0, _cold(n)) for n in (256, 1024, 4096)]
    # 1,023 cached + 1 new token, measured at 30% of the 1,024-token cold prefill (fixed cost apart):
    # 0.3 x (1.024 + 0.0524288) = 0.32292864 s
    cached = [PrefillProbe(1, 1023, 0.02 + 0.32292864)]
    decode = [DecodeProbe(b, ctx, 0.01 + 0.001 * b + 1e-6 * ctx) for b, ctx in ((1, 500), (4, 2000), (4, 8000), (8, 4000))]
    fit = fit_probes(cold + cached, decode)
    assert fit.fixed_s == pytest.approx(0.02) and fit.prefill_tokens_per_s == pytest.approx(1000)
    assert fit.attn_pair_s == pytest.approx(1e-7) and fit.cold_rel_err == pytest.approx(0, abs=1e-9)
    assert (fit.decode_base_s, fit.decode_per_seq_s, fit.decode_per_token_s) == pytest.approx((0.01, 0.001, 1e-6))
    assert fit.cached_share == pytest.approx((0.3,))
    # raw: 0.34292864 s against the cold 1,024-token probe's 0.02 + 1.024 + 0.0524288 = 1.0964288 s
    assert fit.cached_ratio == pytest.approx((0.34292864 / 1.0964288,))
    # one cached probe: all that the cold terms leave over is per cached token:
    # 0.34292864 - (0.02 + 0.001 + 1e-7 x 1,023.5) = 0.32182629 s over 1,023 tokens
    assert fit.cached_token_s == pytest.approx(0.32182629 / 1023) and fit.cached_pair_s == 0
    assert fit.cached_rel_err == pytest.approx(0, abs=1e-9) and fit.held_out_rel_err == 0
    p = fit.profile(device_tokens=5000)
    # the profile gives back the cold probe, fixed cost included: 0.02 + 1.024 + 0.0524288
    assert p.prefill_time_at(1024) == pytest.approx(1.0964288) and p.device_kv_tokens == 5000
    assert p.prefill_request_s == pytest.approx(0.02)


def _cached(n: int, c: int) -> float:
    # _cold's terms for n new tokens after c cached, plus 2e-5 s per cached token and 5e-8 s per
    # pair of cached tokens (c^2 / 2 of them)
    return 0.02 + n / 1000 + 1e-7 * n * (c + n / 2) + 2e-5 * c + 5e-8 * c * c / 2


def test_cached_terms_are_fitted_and_a_held_out_probe_checks_them():
    # by hand: 1 new after 1,023 cached = 0.02 + 0.001 + 1e-7 x 1,023.5 + 2e-5 x 1,023
    #   + 5e-8 x 1,023^2 / 2 = 0.02 + 0.001 + 0.00010235 + 0.02046 + 0.026163225 = 0.067725575 s
    assert _cached(1, 1023) == pytest.approx(0.067725575)
    cold = [PrefillProbe(n, 0, _cold(n)) for n in (256, 1024, 4096)]
    cached = [PrefillProbe(1, n - 1, _cached(1, n - 1)) for n in (256, 1024, 4096)]
    # held out: 10% slower than the terms say, and not fitted (else the terms would move)
    mixed = [PrefillProbe(512, 1024, 1.1 * _cached(512, 1024), held_out=True)]
    decode = [DecodeProbe(b, ctx, 0.01 + 0.001 * b + 1e-6 * ctx) for b, ctx in ((1, 500), (4, 2000), (8, 4000))]
    fit = fit_probes(cold + cached + mixed, decode)
    assert fit.fixed_s == pytest.approx(0.02) and fit.attn_pair_s == pytest.approx(1e-7)
    assert (fit.cached_token_s, fit.cached_pair_s) == pytest.approx((2e-5, 5e-8))
    assert fit.cached_rel_err == pytest.approx(0, abs=1e-9)
    assert fit.held_out_rel_err == pytest.approx(1 - 1 / 1.1)  # |pred / measured - 1|
    assert fit.predict(1, 1023) == pytest.approx(0.067725575)
    p = fit.profile(5000)
    assert p.prefill_time_at(1, 1023) == pytest.approx(0.067725575)  # the simulator charges what was probed
    assert p.cached_time(1023) == pytest.approx(0.02046 + 0.026163225)


def test_cached_probes_that_cost_nothing_extra_give_zero_terms():
    # cached probes exactly at the cold terms' prediction: nothing left to fit, never negative
    cold = [PrefillProbe(n, 0, _cold(n)) for n in (256, 1024, 4096)]
    cached = [PrefillProbe(1, n - 1, 0.02 + 0.001 + 1e-7 * (n - 0.5) - 1e-4) for n in (256, 1024)]
    fixed, rate, pair_s, _ = fit_prefill(cold)
    assert fit_cached(cached, fixed, rate, pair_s) == (0.0, 0.0)
    assert fit_cached([], fixed, rate, pair_s) == (0.0, 0.0)


def test_a_negative_attention_term_is_dropped_and_the_line_refitted():
    # concave times: the quadratic fit would give a saving per pair; without it, least squares on
    # (100, 0.10), (200, 0.20), (300, 0.25): slope 0.00075 s/token (1,333.3 tok/s), intercept 0.0333 s
    fixed, rate, pair_s, err = fit_prefill([PrefillProbe(100, 0, 0.10), PrefillProbe(200, 0, 0.20),
                                            PrefillProbe(300, 0, 0.25)])
    assert pair_s == 0 and rate == pytest.approx(1333.333, rel=1e-5) and fixed == pytest.approx(0.033333, rel=1e-4)
    # worst relative error: at 100 tokens, 0.033333 + 0.075 = 0.108333 against 0.10
    assert err == pytest.approx(0.083333, rel=1e-4)


def test_too_few_probes_is_one_clear_error():
    with pytest.raises(ValueError, match="three sizes"):
        fit_prefill([PrefillProbe(100, 0, 0.1), PrefillProbe(200, 0, 0.2), PrefillProbe(200, 0, 0.2)])
    with pytest.raises(ValueError, match="two batches"):
        fit_decode([DecodeProbe(1, 100, 0.01), DecodeProbe(1, 200, 0.02), DecodeProbe(1, 300, 0.03)])


def test_probe_prompts_are_fresh_per_tag_and_decode_gaps_are_the_second_half():
    from pbkv_server.loadgen.probe import decode_gaps, fresh_ids

    a, b = fresh_ids("cold-64-0", 64, 32000), fresh_ids("cold-64-1", 64, 32000)
    assert a == fresh_ids("cold-64-0", 64, 32000) and len(a) == 64 and a[0] != b[0]
    assert all(1000 <= t < 32000 for t in a + b)
    # 5 gaps: the last 3 (the first half of the output may still share steps with prefills)
    assert decode_gaps([0.5, 0.4, 0.01, 0.02, 0.03]) == [0.01, 0.02, 0.03]


def test_a_probe_fit_file_round_trips_and_a_bad_one_is_one_line(tmp_path):
    import json

    from pbkv_server.loadgen.live_compare import probed_fit

    cold = [PrefillProbe(n, 0, _cold(n)) for n in (256, 1024, 4096)]
    decode = [DecodeProbe(b, ctx, 0.01 + 0.001 * b + 1e-6 * ctx) for b, ctx in ((1, 500), (4, 2000), (8, 4000))]
    fit = fit_probes(cold, decode)
    path = tmp_path / "probe.json"
    path.write_text(json.dumps({"fit": vars(fit)}))
    assert probed_fit(path).profile(3000).prefill_tokens_per_s == pytest.approx(1000)
    path.write_text(json.dumps({"fit": {"fixed_s": 0.1}}))
    with pytest.raises(ValueError, match="not a probe fit") as err:
        probed_fit(path)
    assert "\n" not in str(err.value)


def test_warm_up_probes_are_discarded(monkeypatch):
    # a fake server: _cached()'s costs, but the first two requests of each prompt size take 3x as
    # long (the CPU engine's warm-up). With the default two warm-up passes none of them is kept.
    import asyncio

    from pbkv_server.loadgen import probe
    from pbkv_server.loadgen.live_replay import RequestResult

    seen_prefixes: set[tuple[int, ...]] = set()
    sizes_seen: dict[int, int] = {}

    class FakeClient:
        def __init__(self, **_):
            pass

        async def __aenter__(self):
            return self

        async def __aexit__(self, *_):
            return False

        async def post(self, path):
            seen_prefixes.clear()  # /flush_cache

    async def fake_send(client, api, rec, ids, model):
        cached = max((k for k in range(1, len(ids)) if tuple(ids[:k]) in seen_prefixes), default=0)
        cached = min(cached, len(ids) - 1)  # the server always computes the last token
        seen_prefixes.update(tuple(ids[:k]) for k in range(1, len(ids) + 1))
        sizes_seen[len(ids)] = sizes_seen.get(len(ids), 0) + 1
        slow = 3.0 if sizes_seen[len(ids)] <= 2 else 1.0
        out = RequestResult(rec.workflow_id, 0, "probe", ok=True, ttft_s=slow * _cached(len(ids) - cached, cached),
                            cached_tokens=cached)
        out.itl_s = [0.01 + 0.001 * rec.completion_tokens] * max(0, rec.completion_tokens - 1)
        return out

    monkeypatch.setattr(probe.httpx, "AsyncClient", FakeClient)
    monkeypatch.setattr(probe, "_send", fake_send)
    prefill, _ = asyncio.run(probe.run_probes("http://fake", [64, 256, 1024], 3, [1, 2], [16, 32], 8, vocab_size=8192,
                                              mixed=[(128, 64)]))
    by_shape = {(p.new_tokens, p.cached_tokens, p.held_out): p.seconds for p in prefill}
    assert by_shape[(1024, 0, False)] == pytest.approx(_cold(1024))  # not 3x: the warm-up was dropped
    assert by_shape[(1, 1023, False)] == pytest.approx(_cached(1, 1023))
    assert by_shape[(64, 128, True)] == pytest.approx(_cached(64, 128))


def test_mixed_option_parses_pairs_and_refuses_bad_ones():
    import typer

    from pbkv_server.loadgen.probe import _pairs

    assert _pairs("512+64, 1536+512") == [(512, 64), (1536, 512)] and _pairs("") == []
    for bad in ("512", "512+0", "a+b", "1+2+3"):
        with pytest.raises(typer.BadParameter, match="--mixed"):
            _pairs(bad)
