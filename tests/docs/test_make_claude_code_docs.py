"""``scripts/make_claude_code_docs.py``: docs/claude-code-regime.md's table (issue 33) is rendered
from policy-matrix JSON, with captures and targets computed here by hand, and the committed block
is what the committed runs render."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from .scripts_loader import load_script


@pytest.fixture(scope="module")
def docs():
    return load_script("make_claude_code_docs")


def _row(**latency: float) -> dict:
    return {p: {"mean_latency_s": v, "hit_rate": 0.5, "host_hit_rate": 0.1, "mean_ttft_s": 1.0, "per_app": {}}
            for p, v in latency.items()}


def _write(tmp_path: Path) -> Path:
    d = tmp_path / "cc"
    d.mkdir()
    # C=32: opt gains 2x (100 -> 50); pbkv 70 captures 30 / 50; he 60 is faster than pbkv
    # C=16: opt gains 1.01x only (not a target cell); pbkv 100.2 is 0.998x lru (below 0.999)
    (d / "prof-h1-turn.json").write_text(json.dumps({
        "cc.jsonl C=32 device=1000 predictor=context": _row(he=60.0, lru=100.0, opt=50.0, pbkv=70.0),
        "cc.jsonl C=16 device=1000 predictor=context": _row(he=100.0, lru=100.0, opt=99.0, pbkv=100.2)}))
    # host 0: opt 80 (1.25x), pbkv 84 captures 16 / 20 = 0.80, he 90
    (d / "prof-h0-turn.json").write_text(json.dumps({
        "cc.jsonl C=16 device=1000 predictor=context": _row(he=90.0, lru=100.0, opt=80.0, pbkv=84.0)}))
    return d


@pytest.fixture
def four(docs, monkeypatch):
    """The fixtures' runs replay four policies."""
    monkeypatch.setattr(docs, "POLICIES", ("lru", "he", "pbkv", "opt"))


def test_table_captures_and_targets_by_hand(docs, tmp_path, four):
    text = docs.block(docs.load(_write(tmp_path)))
    rows = [line for line in text.splitlines() if line.startswith("| prof ")]
    # host 1x before 0x, then by concurrency; columns he, pbkv (issue order), opt, capture
    assert rows == ["| prof | turn | 1x | 16 | 100 | 1.000x | 0.998x | 1.010x | -0.20 |",
                    "| prof | turn | 1x | 32 | 100 | 1.667x | 1.429x | 2.000x | 0.60 |",
                    "| prof | turn | 0x | 16 | 100 | 1.111x | 1.190x | 1.250x | 0.80 |"]
    assert "- Cells where opt >= 1.05x lru: 2 of 3." in text
    assert "- Capture >= 0.7 in those cells: 1 of 2; below: prof turn host 1x C=32 (0.60)." in text
    # he 1.667x vs pbkv 1.429x: +16.67 %
    assert "- Online policies faster than pbkv in those cells: he at prof turn host 1x C=32 (+16.67%)." in text
    assert "- pbkv below 0.999x lru: prof turn host 1x C=16 (0.9980x) (worst 0.9980x" in text
    # 'prof' is not a grid profile: all 24 cells of the grid are missing
    assert "- Cells of the grid here: 0 of 24; not run yet: a6000x8-qwen3-32b-tp8 host 1x conversation C=16, 32, 64;" in text


def test_cells_in_progress_are_listed_not_tabled(docs, tmp_path, four, monkeypatch):
    monkeypatch.setattr(docs, "PROFILES", ("prof",))
    monkeypatch.setattr(docs, "MODES", ("turn",))
    d = _write(tmp_path)
    # a run stopped after he: its C=32 cell lacks pbkv and opt, and C=64 was not reached
    (d / "prof-h0-turn.json").write_text(json.dumps({
        "cc.jsonl C=16 device=1000 predictor=context": _row(he=90.0, lru=100.0, opt=80.0, pbkv=84.0),
        "cc.jsonl C=32 device=1000 predictor=context": _row(he=90.0, lru=100.0)}))
    text = docs.block(docs.load(d))
    assert [line for line in text.splitlines() if line.startswith("| prof ")][-1] == \
        "| prof | turn | 0x | 16 | 100 | 1.111x | 1.190x | 1.250x | 0.80 |"
    assert len([line for line in text.splitlines() if line.startswith("| prof ")]) == 3
    # grid: host 1x and 0x, C = 16, 32, 64: 6 cells, 3 complete
    assert text.rstrip().endswith(
        "- Cells of the grid here: 3 of 6; in progress: prof host 0x turn C=32 (lacks pbkv, opt); "
        "not run yet: prof host 1x turn C=64; prof host 0x turn C=64.")
    assert "- Cells where opt >= 1.05x lru: 2 of 3." in text  # targets over complete cells only


def test_another_predictors_run_of_a_cell_is_a_pbkv_column_and_counts_as_in_progress(docs, tmp_path, four,
                                                                                       monkeypatch):
    monkeypatch.setattr(docs, "PROFILES", ("prof",))
    monkeypatch.setattr(docs, "MODES", ("turn",))
    d = _write(tmp_path)
    # the host-0 run under markov too (pbkv 88: 100/88 = 1.136x), and its C=32 under markov only
    (d / "prof-h0-turn.json").write_text(json.dumps({
        "cc.jsonl C=16 device=1000 predictor=context": _row(he=90.0, lru=100.0, opt=80.0, pbkv=84.0),
        "cc.jsonl C=16 device=1000 predictor=markov": _row(he=91.0, lru=100.0, opt=80.0, pbkv=88.0),
        "cc.jsonl C=32 device=1000 predictor=markov": _row(he=90.0, lru=100.0, opt=80.0, pbkv=85.0)}))
    text = docs.block(docs.load(d))
    assert "| profile | workflow | host | C | lru mean lat s | he | pbkv | pbkv markov | opt | capture |" in text
    rows = [line for line in text.splitlines() if line.startswith("| prof ")]
    assert rows == ["| prof | turn | 1x | 16 | 100 | 1.000x | 0.998x | - | 1.010x | -0.20 |",
                    "| prof | turn | 1x | 32 | 100 | 1.667x | 1.429x | - | 2.000x | 0.60 |",
                    "| prof | turn | 0x | 16 | 100 | 1.111x | 1.190x | 1.136x | 1.250x | 0.80 |"]
    assert "prof host 0x turn C=32 (under markov only)" in text
    assert "- Cells where opt >= 1.05x lru: 2 of 3." in text  # the default predictor's cells only


def test_runs_of_other_policies_are_refused(docs, tmp_path, four):
    d = _write(tmp_path)
    (d / "prof-h1-conversation.json").write_text(json.dumps({
        "cc.jsonl C=16 device=1000 predictor=context": _row(lru=100.0, opt=99.0, pbkv=100.0, slru=100.0)}))
    with pytest.raises(ValueError, match="policies outside POLICIES: slru"):
        docs.block(docs.load(d))


def test_a_misnamed_run_is_refused(docs, tmp_path):
    d = _write(tmp_path)
    (d / "prof.json").write_text("{}")
    with pytest.raises(ValueError, match="PROFILE-hHOST"):
        docs.load(d)


def test_committed_block_is_what_the_committed_runs_render(docs):
    assert docs.main(["--check"]) == 0
