"""docs/design/cost-model.md's profile table is what ``scripts/make_profile_docs.py`` renders from
the profiles (issue 32: figures come from code or runs, not typing)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("make_profile_docs", ROOT / "scripts" / "make_profile_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_page_is_the_rendered_profiles():
    script = _script()
    page = script.PAGE.read_text(encoding="utf-8")
    assert script.render(page) == page, "docs/design/cost-model.md is stale: run scripts/make_profile_docs.py"


def test_the_default_row_and_example_by_hand():
    from pbkv_server.hardware.profiles import PROFILES

    body = _script().block()
    d = PROFILES["a6000-qwen3-14b"]
    # KV bytes per token of Qwen3-14B: 2 (K, V) x 40 layers x 8 KV heads x 128 dims x 2 bytes
    assert d.kv_bytes_per_token == 2 * 40 * 8 * 128 * 2
    assert f"| `a6000-qwen3-14b` (default) | {d.prefill_tokens_per_s:,.0f} |" in body
    assert "| 163,840 |" in body
    # 1,000 tokens of prefill: 1000 / prefill rate, in ms
    assert f"1,000 tokens take {1000 / d.prefill_tokens_per_s * 1e3:.0f} ms to prefill" in body
