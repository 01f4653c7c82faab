"""``scripts/make_alternatives_docs.py``: the tables of docs/compared-policies.md are written from
the replays' JSON, one block per workload, the others left as they are (issue 32)."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def script():
    path = ROOT / "scripts" / "make_alternatives_docs.py"
    spec = importlib.util.spec_from_file_location("make_alternatives_docs", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row(policy: str, hit: float, latency: float, capture) -> dict:
    return {"policy": policy, "predictor": "-", "hit_rate": hit, "host_hit_rate": 0.0, "gap_closed": None,
            "prefill_saved": hit, "mean_latency_s": latency, "latency_speedup": 20.0 / latency,
            "latency_capture": capture, "mean_ttft_s": 0.5}


def test_a_block_is_the_replay_table_and_others_stay(script):
    data = {"chat: C=32": [_row("lru", 0.825, 20.0, None), _row("pbkv", 0.83, 16.0, 0.5)]}
    body = script.block("chat", data, "abc1234")
    assert "commit abc1234" in body and "--graph chat" in body and "chat: C=32." in body
    # by hand: speedup 20 / 16 = 1.25x; a null measure (NaN in the replay) prints as n/a / -
    assert "| pbkv | - | 83.0% | 0.0% | n/a | 83.0% | 16.00 | 1.25x | 0.50 | 0.500 |" in body
    assert "| lru | - | 82.5% | 0.0% | n/a | 82.5% | 20.00 | 1.00x | - | 0.500 |" in body
    page = ("intro\n<!-- alternatives:chat:begin -->\nold 1.05x\n<!-- alternatives:chat:end -->\n"
            "<!-- alternatives:codegen:begin -->\nkept\n<!-- alternatives:codegen:end -->\n")
    out = script.render(page, {"chat": body})
    assert "old 1.05x" not in out and body in out and "kept" in out
    assert script.render(out, {"chat": body}) == out  # rerunning changes nothing


def test_bad_input_is_one_line_and_no_write(script, tmp_path, capsys):
    (tmp_path / "chat.json").write_text(json.dumps({"a": [], "b": []}))
    before = script.PAGE.read_text(encoding="utf-8")
    assert script.main(["--runs", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("make_alternatives_docs: chat: not one table")
    assert script.PAGE.read_text(encoding="utf-8") == before
    with pytest.raises(script.InputError, match="needs one"):
        script.render("no block here", {"chat": "x"})


def test_every_workload_has_its_command_and_its_block(script):
    page = script.PAGE.read_text(encoding="utf-8")
    for name in script.WORKLOADS:
        assert script.command(name).startswith(".venv/bin/python benchmarks/alternatives_table.py ")
        assert script.command(name).endswith(f" --json runs/alternatives/{name}.json")
        assert "--trace " in script.command(name) or "--graph " in script.command(name)
