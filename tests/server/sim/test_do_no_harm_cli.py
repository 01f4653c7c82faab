"""``benchmarks/do_no_harm.py --json``: only an earlier grid of this script is replaced, and any other
JSON (a replay or sweep result) is refused in one line before minutes of replays."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from .sim_fixtures import load_benchmark

COMMITTED = Path(__file__).resolve().parents[3] / "docs" / "study" / "do-no-harm" / "sweep.json"


@pytest.fixture(scope="module")
def harm():
    return load_benchmark("do_no_harm")


@pytest.mark.parametrize("held", [
    {"lru": {"hit_rate": 0.5}},  # a pbkv-bench replay result
    {"pbkv": [{"device": 1, "speedup": 1.0, "per_app": {}, "fallback": None}]},  # a device_size_sweep result
    {"settings": {}, "commit": "abc"},  # no cells
])
def test_another_json_is_refused_before_any_replay(harm, tmp_path, capsys, monkeypatch, held):
    out = tmp_path / "grid.json"
    out.write_text(json.dumps(held))
    before = out.read_bytes()
    monkeypatch.setattr(harm, "run_grid", lambda tmp: pytest.fail("replayed before refusing --json"))
    with pytest.raises(SystemExit) as stop:
        harm.run_script(harm.main, ["--json", str(out)])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --json {out}: holds JSON that is not an earlier result") and err.count("\n") == 1
    assert out.read_bytes() == before


def test_an_earlier_grid_is_replaced(harm, tmp_path, monkeypatch):
    out = tmp_path / "grid.json"
    shutil.copy(COMMITTED, out)
    new = {"settings": {"profile": "p"}, "commit": "new", "cells": []}
    monkeypatch.setattr(harm, "run_grid", lambda tmp: new)
    assert harm.run_script(harm.main, ["--json", str(out)]) == 0
    assert json.loads(out.read_text()) == new
