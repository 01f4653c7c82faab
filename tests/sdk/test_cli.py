"""`pbkv-sdk` CLI: record an unmodified app, stats, validate, import."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from typer.testing import CliRunner

from pbkv_sdk.cli import app
from pbkv_sdk.trace import InvocationRecord, TraceWriter, WorkflowEndRecord, iter_trace

from .fake_openai import FakeOpenAI

runner = CliRunner()
TARGET = Path(__file__).with_name("record_target.py")


def _inv(wid: str, step: int, agent: str, **kw) -> InvocationRecord:
    fields = dict(app="demo", t_start=float(step), t_end=step + 0.5, prompt_tokens=10, completion_tokens=2, prefix_hashes=["ab"], ttft_s=0.1)
    fields.update(kw)
    return InvocationRecord(workflow_id=wid, step=step, agent=agent, **fields)


def test_record_runs_an_app_with_recording_on_and_summarises_it(fake_llm: FakeOpenAI, tmp_path):
    out = tmp_path / "rec" / "run.jsonl"
    result = runner.invoke(
        app,
        ["record", "--out", str(out), "--app", "claims-rec", "--server-url", fake_llm.url, "--",
         sys.executable, str(TARGET), fake_llm.base_url, "2"],
    )
    assert result.exit_code == 0, result.output
    records = list(iter_trace(out, strict=True))
    invs = [r for r in records if isinstance(r, InvocationRecord)]
    assert len(invs) == 6 + 12  # claim0: 1 round of 6 calls, claim1: 2 rounds
    assert {r.app for r in invs} == {"claims-rec"}  # --app overrides the app's own name
    assert sum(isinstance(r, WorkflowEndRecord) for r in records) == 2
    assert "2 workflows (2 completed ended), 18 invocations" in " ".join(result.output.split())
    assert "summarizer" in result.output and "judge" in result.output
    assert len(fake_llm.ends) == 2  # --server-url reached the app


def test_record_passes_the_app_exit_status_through(tmp_path):
    result = runner.invoke(app, ["record", "--out", str(tmp_path / "x.jsonl"), "--", sys.executable, "-c", "raise SystemExit(3)"])
    assert result.exit_code == 3
    assert "no trace was written" in result.output


def test_stats_counts_agents_and_transitions_including_end(tmp_path):
    path = tmp_path / "t.jsonl"
    with TraceWriter(path) as w:
        for rec in (_inv("A", 0, "planner"), _inv("B", 0, "planner"), _inv("A", 1, "coder"), _inv("B", 1, "coder"),
                    _inv("A", 2, "planner", cached_tokens=4), WorkflowEndRecord(app="demo", workflow_id="A", t=9.0)):
            w.write(rec)
    result = runner.invoke(app, ["stats", str(path), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["workflows"] == 2 and data["invocations"] == 5 and data["ended"] == {"completed": 1}
    assert data["agents"] == {"planner": 3, "coder": 2}
    assert data["transitions"] == {"planner -> coder": 2, "coder -> planner": 1, "planner -> <END>": 1}
    assert (data["prompt_tokens"], data["cached_tokens"], data["steps_per_workflow"]) == (50, 4, 2.5)
    assert abs(data["mean_ttft_s"] - 0.1) < 1e-12


def test_validate_lists_each_bad_line_and_exits_nonzero(tmp_path):
    good = json.dumps(_inv("A", 0, "x").to_json())
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join([good, "{not json", json.dumps({"type": "mystery", "v": 1}), good, good[:40]]))
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 1
    assert [line.split(":")[1] for line in result.output.splitlines() if line.startswith(str(path))] == ["2", "3", "5"]
    assert "2 valid, 3 invalid" in result.output


def test_validate_accepts_a_clean_trace(tmp_path):
    path = tmp_path / "t.jsonl"
    with TraceWriter(path) as w:
        w.write(_inv("A", 0, "x"))
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 0 and "1 valid, 0 invalid" in result.output


def test_import_chatdev_reports_a_missing_importer_clearly(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pbkv_sdk.importers.chatdev", None)  # makes the import fail
    src = tmp_path / "logs"
    src.mkdir()
    result = runner.invoke(app, ["import", "chatdev", str(src), "--out", str(tmp_path / "o.jsonl")])
    assert result.exit_code == 2 and "importer is not available" in result.output


def test_import_chatdev_runs_the_importer_and_prints_its_summary(tmp_path):
    src = tmp_path / "logs"
    src.mkdir()
    (src / "empty.log").write_text("no calls here\n")
    result = runner.invoke(app, ["import", "chatdev", str(src), "--out", str(tmp_path / "o.jsonl")])
    assert result.exit_code == 0, result.output
    assert "1 log file(s): 0 workflows, 0 invocations, 1 skipped" in result.output
