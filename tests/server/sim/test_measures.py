"""Measures that see both tiers (speedup vs LRU, latency capture, prefill saved) by hand, the
"no eviction order can differ" verdict, and the replay CLI's titles naming the host tier and the convention."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pbkv_server.cli.bench import app
from pbkv_server.engine.guard import host_value
from pbkv_server.sim.measures import (MIN_DIFFERENCE, add_measures, latency_capture, latency_speedup,
                                      no_difference_verdict, prefill_saved, trace_block_tokens)
from pbkv_server.hardware.profiles import get_profile

runner = CliRunner()
PROFILE = "h100-qwen2.5-32b"


def _profile_with_host_value_three_quarters():
    # prefill 1e-4 s per token; load 1000 B / 4e7 B/s = 2.5e-5 s per token: a host hit saves 3/4
    return dataclasses.replace(get_profile(PROFILE), prefill_tokens_per_s=10_000, kv_bytes_per_token=1000,
                               pcie_bytes_per_s=4e7)


def test_capture_speedup_and_saved_tokens_on_a_hand_computed_case():
    v = host_value(_profile_with_host_value_three_quarters())
    assert v == pytest.approx(0.75)
    # lru 100 s, pbkv 90 s, he 105 s (slower than lru), opt 80 s; hits (device, host) by hand
    results = {"lru": {"mean_latency_s": 100.0, "hit_rate": 0.20, "host_hit_rate": 0.40},
               "pbkv": {"mean_latency_s": 90.0, "hit_rate": 0.30, "host_hit_rate": 0.20},
               "he": {"mean_latency_s": 105.0, "hit_rate": 0.10, "host_hit_rate": 0.0},
               "opt": {"mean_latency_s": 80.0, "hit_rate": 0.50, "host_hit_rate": 0.10}}
    add_measures(results, results["lru"], results["opt"], v)
    # capture = (100 - L) / (100 - 80)
    assert [results[p]["latency_capture"] for p in ("lru", "pbkv", "he", "opt")] == pytest.approx([0, 0.5, -0.25, 1])
    # speedup = 100 / L
    assert [results[p]["latency_speedup"] for p in ("lru", "pbkv", "he", "opt")] == pytest.approx(
        [1.0, 100 / 90, 100 / 105, 1.25])
    # saved = device + 0.75 x host: lru 0.2 + 0.3, pbkv 0.3 + 0.15, he 0.1, opt 0.5 + 0.075
    assert [results[p]["prefill_saved"] for p in ("lru", "pbkv", "he", "opt")] == pytest.approx(
        [0.5, 0.45, 0.1, 0.575])
    assert all(s["host_value"] == v for s in results.values())


def test_capture_is_undefined_unless_the_reference_is_half_a_percent_faster():
    assert MIN_DIFFERENCE == 0.005
    assert latency_capture(99.9, 100.0, 99.6) is None  # opt 100/99.6 = 1.004x: no gap to capture
    assert latency_capture(99.75, 100.0, 99.5) == pytest.approx(0.5)  # 100/99.5 = 1.005x is a gap
    assert latency_capture(90.0, 100.0, 110.0) is None  # the reference slower than the baseline
    assert latency_capture(90.0, None, 80.0) is None and latency_capture(90.0, 100.0, None) is None
    assert latency_speedup(100.0, 0.0) is None and latency_speedup(None, 1.0) is None
    assert prefill_saved(0.2, 0.4, 0.0) == pytest.approx(0.2)  # a host hit worth nothing saves nothing
    # no baseline replayed: speedup and capture are None, prefill saved is still known
    results = {"pbkv": {"mean_latency_s": 90.0, "hit_rate": 0.3, "host_hit_rate": 0.2}}
    add_measures(results, None, None, 0.5)
    assert results["pbkv"]["latency_speedup"] is None and results["pbkv"]["latency_capture"] is None
    assert results["pbkv"]["prefill_saved"] == pytest.approx(0.4)


def test_verdict_says_why_no_policy_can_differ_and_nothing_when_one_does():
    base = {"hit_rate": 0.40, "mean_latency_s": 100.0, "evictions": 0}
    fits = no_difference_verdict({"lru": base, "pbkv": dict(base)}, "lru", 5000, 30_000, 30_000)
    assert fits == ("the trace fits in device memory (distinct prompt blocks F = 5000 tok, device 30000 tok; "
                    "lru evicted nothing): no eviction order can differ; try --device-tokens 2500")
    # spec-prefill changes what is prefilled, not what is evicted: it differs where nothing is evicted
    assert no_difference_verdict({"lru": base, "spec-prefill": dict(base, mean_latency_s=90.0)}, "lru", 5000,
                                 30_000, 30_000) is None
    assert no_difference_verdict({"lru": base, "spec-prefill": dict(base, hit_rate=0.45)}, "lru", 5000,
                                 30_000, 30_000) is None
    evicting = dict(base, evictions=10)
    same = {"lru": evicting, "pbkv": dict(evicting, hit_rate=0.404, mean_latency_s=100.4)}  # 0.4 pt, 0.4%
    line = no_difference_verdict(same, "lru", 50_000, 30_000, 30_000)
    # device + host = 60000 >= F: a device of 50000 / (2 x 2) = 12500 with the same ratio holds F/2
    assert line == ("the trace fits in device + host memory (distinct prompt blocks F = 50000 tok <= device 30000 + "
                    "host 30000 tok): "
                    "no replayed policy differs from lru by 0.5% or more in device hit rate or mean latency; "
                    "try --host-ratio 0 or --device-tokens 12500")
    assert no_difference_verdict(same, "lru", 90_000, 30_000, 30_000).startswith("no replayed policy differs")
    assert no_difference_verdict({"lru": evicting, "pbkv": dict(evicting, hit_rate=0.405)}, "lru", 50_000,
                                 30_000, 30_000) is None  # half a point of device hit rate is a difference
    assert no_difference_verdict({"lru": evicting, "pbkv": dict(evicting, mean_latency_s=99.0)}, "lru", 50_000,
                                 30_000, 30_000) is None  # 1.0101x faster
    assert no_difference_verdict({"pbkv": evicting}, "lru", 50_000, 30_000, 30_000) is None  # no baseline


def test_footprint_in_pages_counts_whole_pages_of_distinct_prefixes():
    from pbkv_server.engine.pages import to_units

    from .sim_fixtures import make_end, make_inv

    records = [make_inv("w1", 0, "a", ["a", "b", "c"], [100, 50, 30]), make_inv("w2", 0, "a", ["a", "d"], [100, 70]),
               make_inv("w3", 0, "a", ["e"], [40]), make_end("w3", 2.0)]
    assert trace_block_tokens(records) == 100 + 50 + 30 + 70 + 40
    # pages of 64: w1 holds 2 (closed in a and in b; its last 52 tokens are a tail), w2 holds 2 (the first
    # is w1's, the second closed in d), w3 none (40 < 64): 3 distinct pages
    assert trace_block_tokens(records, 64) == 3 * 64
    assert trace_block_tokens(records, 1) == 290  # one page per token: the blocks' tokens
    assert trace_block_tokens(records, 181) == 0  # no prompt fills a page
    # the engine's own units (to_units), another way to count them
    for page in (1, 7, 64, 100, 150, 181):
        keys = {k for r in records[:3] for k in to_units(r.prefix_hashes, r.tokens_per_block(), page).keys}
        assert trace_block_tokens(records, page) == page * len(keys), page


def test_verdict_with_pages_names_them_and_says_when_nothing_is_cached():
    # replay --page-size 100000000 said "the trace fits in device memory (... lru evicted nothing)"
    # with every hit rate 0: no prompt filled a page, so nothing was cached to evict
    base = {"hit_rate": 0.0, "mean_latency_s": 100.0, "evictions": 0}
    same = {"lru": base, "pbkv": dict(base)}
    assert no_difference_verdict(same, "lru", 0, 30_000, 30_000, 5000, page_size=6000) == (
        "nothing is cached: no prompt fills one page of 6000 tok (only whole pages are cached, as in SGLang), so "
        "every policy prefills every prompt; give a smaller --page-size")
    assert no_difference_verdict(same, "lru", 12_000, 30_000, 30_000, 5000, page_size=6000) == (
        "the trace fits in device memory (distinct prompt pages (--page-size 6000) F = 12000 tok, device 30000 tok; "
        "lru evicted nothing): no eviction order can differ; try --device-tokens 6000")
    assert no_difference_verdict(same, "lru", 0, 30_000, 30_000, 5000).startswith(
        "the trace fits in device memory (distinct prompt blocks F = 0 tok")  # blocks: as before


def test_a_suggested_device_still_holds_the_largest_request():
    # found by a new-user check: the line said "try --device-tokens 9052" and the replay of that
    # refused a request of 18,208 tokens; a suggestion is never below the largest request
    base = {"hit_rate": 0.40, "mean_latency_s": 100.0, "evictions": 0}
    fits = {"lru": base, "pbkv": dict(base)}
    assert no_difference_verdict(fits, "lru", 5000, 30_000, 30_000, 4000).endswith("try --device-tokens 4000")
    assert no_difference_verdict(fits, "lru", 5000, 30_000, 30_000, 30_000).endswith(
        "no eviction order can differ, and no smaller device holds its largest request (30000 tok)")
    evicting = dict(base, evictions=10)
    same = {"lru": evicting, "pbkv": dict(evicting, hit_rate=0.404)}
    # F/2 over (1 + host ratio) is 12,500: raised to the 18,208-token request
    assert no_difference_verdict(same, "lru", 50_000, 30_000, 30_000, 18_208).endswith(
        "try --host-ratio 0 or --device-tokens 18208")
    assert no_difference_verdict(same, "lru", 50_000, 30_000, 30_000, 30_000).endswith("try --host-ratio 0")


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("measures") / "t.jsonl"
    result = runner.invoke(app, ["synth", "--graph", "codegen", "--workflows", "12", "--seed", "5", "--out", str(path)])
    assert result.exit_code == 0, result.output
    return path


def _replay(trace: Path, tmp_path: Path, *args: str) -> tuple[dict, str]:
    out = tmp_path / "r.json"
    result = runner.invoke(app, ["replay", str(trace), "--profile", PROFILE, "--concurrency", "4", "--predictor",
                                 "oracle", "--json", str(out), *args])
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text()), " ".join(result.output.split())


@pytest.mark.slow
def test_replay_titles_name_the_host_tier_and_the_speedup_convention(trace, tmp_path):
    data, output = _replay(trace, tmp_path, "--policy", "pbkv", "--device-tokens", "20000")
    tier = "device 20000 tok, host 20000 tok (1x)"
    assert output.count(tier) == 4  # the cache table, the latency table, the breakdown, TTFT and TPOT
    assert output.count("speedup vs lru = lru mean latency / policy mean latency (x, >1 faster)") == 2
    assert "device-hit gap closed: 0 = lru" in output and "latency capture = (L_lru - L) / (L_lru - L_opt)" in output
    s = data["pbkv"]
    # lru and opt ran for the scales: the figures follow from their latencies and the profile
    base = s["mean_latency_s"] * s["latency_speedup"]
    assert s["host_value"] == host_value(get_profile(PROFILE))
    assert s["prefill_saved"] == pytest.approx(s["hit_rate"] + s["host_value"] * s["host_hit_rate"], rel=1e-12)
    full, _ = _replay(trace, tmp_path, "--policy", "lru,pbkv,opt", "--device-tokens", "20000")
    lru, opt = full["lru"]["mean_latency_s"], full["opt"]["mean_latency_s"]
    assert base == pytest.approx(lru, rel=1e-12)
    assert lru / opt >= 1 + MIN_DIFFERENCE  # this setup has a latency gap to capture
    assert s["latency_capture"] == pytest.approx((lru - s["mean_latency_s"]) / (lru - opt), rel=1e-9)
    assert full["pbkv"]["latency_capture"] == s["latency_capture"]
    assert full["lru"]["latency_speedup"] == 1.0 and full["lru"]["latency_capture"] == 0.0
    assert full["opt"]["latency_capture"] == 1.0
    assert "no eviction order can differ" not in output and "no replayed policy differs" not in output


def test_replay_of_a_trace_that_fits_in_device_memory_says_so_in_one_line(trace, tmp_path):
    from pbkv_contract.trace import InvocationRecord, read_trace

    blocks = {}
    for rec in read_trace(trace):
        if isinstance(rec, InvocationRecord):
            blocks.update({k: n for k, n in zip(rec.prefix_hashes, rec.tokens_per_block()) if k not in blocks})
    w = sum(blocks.values())
    data, output = _replay(trace, tmp_path, "--policy", "lru,pbkv", "--device-tokens", "5000000", "--no-gap")
    assert data["lru"]["evictions"] == 0
    assert (f"the trace fits in device memory (distinct prompt blocks F = {w} tok, device 5000000 tok; lru "
            f"evicted nothing): no eviction order can differ; try --device-tokens {w // 2}") in output
