"""``benchmarks/policy_matrix.py --json F --resume``: a long grid that was stopped keeps what it
finished and runs only the (cell, policy) pairs its JSON lacks."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[3] / "benchmarks"


@pytest.fixture(scope="module")
def matrix():
    sys.path.insert(0, str(BENCH))  # the script imports its sibling _cli
    try:
        spec = importlib.util.spec_from_file_location("policy_matrix", BENCH / "policy_matrix.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCH))
    return module


ARGS = ["--graph", "codegen", "--workflows", "6", "--policy", "lru,pbkv", "--concurrency", "2,4", "--device", "30000"]


def test_resume_runs_only_what_the_json_lacks(matrix, tmp_path, capsys):
    out = tmp_path / "m.json"
    assert matrix.main([*ARGS, "--json", str(out)]) == 0
    full = json.loads(out.read_text())
    assert len(full) == 2 and all(set(row) == {"lru", "pbkv"} for row in full.values())
    # a run stopped in its second cell, after lru; lru's figure marked to show it is kept, not rerun
    c2, c4 = sorted(full, key=lambda k: "C=4" in k)
    stopped = {c2: full[c2], c4: {"lru": {**full[c4]["lru"], "mean_latency_s": 123.0}}}
    out.write_text(json.dumps(stopped))
    capsys.readouterr()
    assert matrix.main([*ARGS, "--json", str(out), "--resume"]) == 0
    resumed = json.loads(out.read_text())
    assert resumed[c2] == full[c2]
    assert resumed[c4]["lru"]["mean_latency_s"] == 123.0
    assert resumed[c4]["pbkv"] == full[c4]["pbkv"]  # replayed now, as in the whole run
    assert not (tmp_path / "m.json.tmp").exists()


def test_resume_of_a_file_that_is_not_a_matrix_is_one_line(matrix, tmp_path, capsys):
    out = tmp_path / "m.json"
    out.write_text("[1, 2]")
    with pytest.raises(SystemExit) as stop:
        matrix.main([*ARGS, "--json", str(out), "--resume"])
    assert stop.value.code == 2
    assert "is not a policy_matrix --json" in capsys.readouterr().err
    assert out.read_text() == "[1, 2]"
