"""The runners' failure paths: output paths checked first, bad data named by file and row, no stale results.

All fast: nothing here starts an app run (a failing fake example stands in for one).
"""

from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path

import pytest
from .examples_fixtures import finance_rows, hover_rows, swe_rows
from typer.testing import CliRunner

from examples.common import integration as integ
from examples.common import pipeline
from examples.common.cli import make_app
from examples.common.data import DataError, workflow_id_for
from examples.common.pipeline import ExampleSpec, RunOptions, run_example
from examples.finance_crewai import run as finance_run
from examples.finance_crewai.data import load_financebench
from examples.hover_langchain import run as hover_run
from examples.hover_langchain.data import load_hover
from examples.swe_autogen import run as swe_run
from examples.swe_autogen.data import load_swebench
from pbkv_contract.hints import validate_workflow_id
from pbkv_contract.trace import InvocationRecord, TraceWriter, WorkflowEndRecord, read_trace

SPECS = {"hover_langchain": hover_run.spec, "swe_autogen": swe_run.spec, "finance_crewai": finance_run.spec}
HOVER_FILE = "hover/hover_dev_release_v1.1.json"


def _invoke(example: str, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(make_app(SPECS[example], "test"), list(args))
    return result.exit_code, result.output


def _write_hover(root: Path, rows: list[dict]) -> Path:
    path = root / HOVER_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rows), encoding="utf-8")
    return path


# ----------------------------------------------------------------------------- checked before the run


def test_json_pointing_at_a_directory_exits_2_before_any_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # An empty data dir: had the run started, the message would be the data error instead.
    monkeypatch.setenv("PBKV_DATA_DIR", str(tmp_path / "no-data"))
    (tmp_path / "outjson").mkdir()
    code, out = _invoke("hover_langchain", "--quick", "--json", str(tmp_path / "outjson"), "--out-dir", str(tmp_path / "runs"))
    assert code == 2
    assert "--json" in out and "is a directory" in out and "PBKV_DATA_DIR" not in out
    assert not (tmp_path / "runs").exists()


def test_json_on_a_fifo_exits_2_and_leaves_the_fifo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a new-user check: an output on a named pipe or a device node was replaced by a regular file
    import os
    import stat

    monkeypatch.setenv("PBKV_DATA_DIR", str(tmp_path / "no-data"))
    os.mkfifo(tmp_path / "pipe")
    code, out = _invoke("hover_langchain", "--quick", "--json", str(tmp_path / "pipe"), "--out-dir", str(tmp_path / "runs"))
    assert code == 2 and "--json" in out and "is a named pipe (fifo), not a regular file" in out, out
    assert stat.S_ISFIFO(os.lstat(tmp_path / "pipe").st_mode) and not (tmp_path / "runs").exists()


@pytest.mark.parametrize("args, line", [
    (("--host-ratio", "nan"), "error: --host-ratio must be a finite number in 0..64, got nan"),
    (("--host-ratio", "65"), "error: --host-ratio must be a finite number in 0..64, got 65"),
    (("--pressure", "0"), "error: --pressure must be a finite number in 0.01..1, got 0"),
    (("--slo-tpot", "inf"), "error: --slo-tpot must be a positive number of milliseconds, got inf"),
])
def test_a_bad_number_is_one_line_that_says_what_is_allowed(args, line, tmp_path, monkeypatch):
    # found by a new-user check: --host-ratio nan was refused as "should be <= 64"
    monkeypatch.setenv("PBKV_DATA_DIR", str(tmp_path / "no-data"))
    code, out = _invoke("hover_langchain", "--quick", *args, "--out-dir", str(tmp_path / "runs"))
    assert code == 2 and out.strip().splitlines() == [line], out
    assert not (tmp_path / "runs").exists()


def test_a_usage_error_of_the_module_is_one_line():
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "examples.hover_langchain", "--concurrency", "0"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "python -m examples.hover_langchain: Invalid value for '--concurrency': Input should be greater than or "
        "equal to 1 (see: python -m examples.hover_langchain --help)"], result.stderr


def test_out_dir_that_is_a_file_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PBKV_DATA_DIR", str(tmp_path / "no-data"))
    (tmp_path / "runs").write_text("not a folder")
    code, out = _invoke("swe_autogen", "--quick", "--out-dir", str(tmp_path / "runs"))
    assert code == 2 and "--out-dir" in out and "is not a directory" in out


def test_result_file_name_taken_by_a_directory_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PBKV_DATA_DIR", str(tmp_path / "no-data"))
    (tmp_path / "runs" / "finance_crewai" / "predictor.pt").mkdir(parents=True)
    code, out = _invoke("finance_crewai", "--quick", "--out-dir", str(tmp_path / "runs"))
    assert code == 2 and "predictor.pt is a directory" in out


def test_json_on_a_result_file_or_in_the_staging_folder_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The result files are moved in before the summary is written, so --json on test.jsonl would
    # replace the test trace; the staging folder is removed at the end, taking the summary with it.
    monkeypatch.setenv("PBKV_DATA_DIR", str(tmp_path / "no-data"))
    runs = tmp_path / "runs"
    code, out = _invoke("hover_langchain", "--quick", "--out-dir", str(runs), "--json", str(runs / "hover_langchain" / "test.jsonl"))
    assert code == 2 and "are the same file" in out and "PBKV_DATA_DIR" not in out
    code, out = _invoke("hover_langchain", "--quick", "--out-dir", str(runs), "--json", str(runs / "hover_langchain.partial" / "s.json"))
    assert code == 2 and "staging folder" in out and "PBKV_DATA_DIR" not in out
    assert not runs.exists()


def test_unknown_profile_message_has_no_extra_quotes(tmp_path: Path) -> None:
    code, out = _invoke("hover_langchain", "--quick", "--profile", "nope", "--out-dir", str(tmp_path / "runs"))
    assert code == 2
    assert "error: unknown hardware profile 'nope'; known profiles: a6000-qwen3-14b" in out
    assert "\"unknown" not in out


@pytest.mark.parametrize("example", sorted(SPECS))
def test_missing_data_creates_no_run_folder(example: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PBKV_DATA_DIR", str(tmp_path / "empty"))
    (tmp_path / "empty").mkdir()
    code, out = _invoke(example, "--quick", "--out-dir", str(tmp_path / "runs"))
    assert code == 2 and "does not hold" in out
    assert not (tmp_path / "runs").exists()


# ----------------------------------------------------------------------------- bad data


def test_too_few_rows_says_how_many_were_read_and_why_none_are_usable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write_hover(tmp_path / "data", hover_rows(1))  # 3 claims: exactly the 3 worked examples
    monkeypatch.setenv("PBKV_DATA_DIR", str(tmp_path / "data"))
    code, out = _invoke("hover_langchain", "--quick", "--out-dir", str(tmp_path / "runs"))
    flat = " ".join(out.split())
    assert code == 2
    assert "need 80 tasks" in flat and "only 0 usable" in flat
    assert "the last 3 rows are kept back as worked examples" in flat and "3 rows read, 3 usable" in flat
    assert not (tmp_path / "runs").exists()


def test_hover_skips_empty_claims_and_duplicate_uids_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    rows = hover_rows(2)  # 6 claims
    rows[1]["claim"] = "   "
    rows[4]["uid"] = rows[0]["uid"]
    path = _write_hover(tmp_path, rows)
    with caplog.at_level(logging.WARNING):
        claims = load_hover(tmp_path)
    assert [c.uid for c in claims] == [rows[i]["uid"] for i in (0, 2, 3, 5)]
    assert claims.rows_read == 6 and dict(claims.skipped) == {"empty claim": 1, "duplicate uid": 1}
    assert f"{path}: 6 rows read, 4 usable, 2 skipped (1 duplicate uid, 1 empty claim)" == claims.describe()
    assert f"{path}: row 1 skipped" in caplog.text and f"{path}: row 4 skipped" in caplog.text


def test_many_rows_skipped_for_one_reason_give_one_warning_and_a_count(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    rows = hover_rows(4)  # 12 claims; rows 6-11 repeat the uids of rows 0-5
    for i in range(6, 12):
        rows[i]["uid"] = rows[i - 6]["uid"]
    path = _write_hover(tmp_path, rows)
    with caplog.at_level(logging.WARNING):
        claims = load_hover(tmp_path)
    assert dict(claims.skipped) == {"duplicate uid": 6}
    assert len(caplog.records) == 1  # the first row only, not six lines
    assert f"{path}: row 6 skipped" in caplog.text
    assert "6 skipped (6 duplicate uid)" in claims.describe()


def test_swe_and_finance_skip_duplicate_ids_and_empty_text(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    swe = swe_rows(2)  # 4 instances
    swe[2]["instance_id"] = swe[0]["instance_id"]
    swe[3]["problem_statement"] = ""
    (tmp_path / "swebench").mkdir()
    (tmp_path / "swebench" / "swe-bench-lite.json").write_text(json.dumps(swe), encoding="utf-8")
    fin = finance_rows(4)
    fin[1]["question"] = "\n"
    fin[3]["financebench_id"] = fin[2]["financebench_id"]
    (tmp_path / "financebench").mkdir()
    (tmp_path / "financebench" / "financebench_open_source.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in fin), encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        tasks = load_swebench(tmp_path)
        questions = load_financebench(tmp_path)
    assert [t.instance_id for t in tasks] == ["acme__pkg-1", "acme__pkg-2"]
    assert dict(tasks.skipped) == {"duplicate instance_id": 1, "empty problem statement": 1}
    assert [q.qid for q in questions] == ["fb0", "fb2"]
    assert dict(questions.skipped) == {"empty question": 1, "duplicate financebench_id": 1}
    assert caplog.text.count("skipped") == 4


def test_lone_surrogate_in_data_names_file_row_and_field(tmp_path: Path) -> None:
    rows = hover_rows(1)
    rows[2]["supporting_facts"][1][0] = "Bad \ud800 title"
    path = _write_hover(tmp_path, rows)
    with pytest.raises(DataError) as err:
        load_hover(tmp_path)
    assert str(err.value).startswith(f"{path}: row 2 field supporting_facts[1][0] holds text that is not valid Unicode")


# ----------------------------------------------------------------------------- no stale results


def _failing_spec(n_tasks: int = 4) -> ExampleSpec:
    async def run_tasks(tasks, url, trace, concurrency, on_done):  # noqa: ANN001
        Path(trace).write_text("partial line\n", encoding="utf-8")
        raise RuntimeError("app crashed mid-run")

    return ExampleSpec(name="fake", app="fake", title="Fake", replay_concurrency=2,
                       load_tasks=lambda: list(range(n_tasks)),
                       split=lambda tasks, a, b, seed: (tasks[:a], tasks[a:a + b]),
                       run_tasks=run_tasks, sizes={"full": (2, 2), "quick": (2, 2)})


def test_failed_run_keeps_the_previous_complete_run_untouched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(integ, "embedded_server", lambda *a, **k: contextlib.nullcontext("http://127.0.0.1:9"))
    old = tmp_path / "runs" / "fake"
    old.mkdir(parents=True)
    previous = {name: f"previous {name}" for name in pipeline.RESULT_FILES}
    for name, text in previous.items():
        (old / name).write_text(text)
    json_out = tmp_path / "summary.json"
    with pytest.raises(RuntimeError, match="app crashed"):
        run_example(_failing_spec(), RunOptions(out_dir=tmp_path / "runs", json_out=json_out))
    assert {p.name: p.read_text() for p in old.iterdir()} == previous
    assert not (tmp_path / "runs" / "fake.partial").exists() and not json_out.exists()


def test_failed_first_run_leaves_no_result_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(integ, "embedded_server", lambda *a, **k: contextlib.nullcontext("http://127.0.0.1:9"))
    with pytest.raises(RuntimeError):
        run_example(_failing_spec(), RunOptions(out_dir=tmp_path / "runs"))
    assert list((tmp_path / "runs").iterdir()) == []


# ----------------------------------------------------------------------------- reproducible runs


def test_canonicalise_trace_groups_workflows_in_id_order_and_steps_in_order(tmp_path: Path) -> None:
    def inv(wid: str, step: int, t: float) -> InvocationRecord:
        return InvocationRecord(app="a", workflow_id=wid, step=step, agent="x", t_start=t, t_end=t + 1,
                                prompt_tokens=10, completion_tokens=2, prefix_hashes=["h"])

    path = tmp_path / "t.jsonl"
    with TraceWriter(path) as w:  # the interleaving of two concurrent workflows
        for rec in (inv("w2", 0, 1.0), inv("w1", 0, 2.0), inv("w2", 1, 3.0), WorkflowEndRecord("a", "w2", 4.0),
                    inv("w1", 1, 5.0), WorkflowEndRecord("a", "w1", 6.0)):
            w.write(rec)
    assert integ.canonicalise_trace(path) == 6
    order = [(r.workflow_id, getattr(r, "step", "end")) for r in read_trace(path)]
    assert order == [("w1", 0), ("w1", 1), ("w1", "end"), ("w2", 0), ("w2", 1), ("w2", "end")]


@pytest.mark.parametrize(("task_id", "expected"), [
    ("financebench_id_03029", "financebench_id_03029"),
    ("django__django-11099", "django__django-11099"),
    ("a b/c\u00e9", "a_b_c_"),
])
def test_workflow_id_for_is_a_valid_stable_hint_id(task_id: str, expected: str) -> None:
    assert workflow_id_for(task_id) == expected
    validate_workflow_id(workflow_id_for(task_id))


def test_unwritable_json_location_is_found_by_a_real_probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # /proc refuses new files even to root, although os.access reports it writable for root.
    monkeypatch.setenv("PBKV_DATA_DIR", str(tmp_path / "no-data"))
    code, out = _invoke("hover_langchain", "--quick", "--json", "/proc/pbkv-nope/x.json", "--out-dir", str(tmp_path / "runs"))
    assert code == 2 and "--json" in out and "cannot write under /proc" in out


@pytest.mark.parametrize("args", [["--seed", "-1"], ["--host-ratio", "inf"]])
def test_seed_and_host_ratio_are_checked_before_the_run(args: list[str], tmp_path: Path) -> None:
    code, out = _invoke("hover_langchain", "--quick", *args, "--out-dir", str(tmp_path / "runs"))
    assert code == 2 and args[0] in out


@pytest.mark.parametrize(("example", "args", "message"), [
    ("hover_langchain", ["--setup", "cloud"], "unknown setup 'cloud'"),
    ("hover_langchain", ["--messages", "gossip"], "not a message convention of hover_langchain (shared, per-agent)"),
    ("swe_autogen", ["--messages", "shared"], "this app builds its prompts one way"),
])
def test_setup_and_message_convention_are_checked_before_the_run(example: str, args: list[str], message: str,
                                                                 tmp_path: Path) -> None:
    code, out = _invoke(example, "--quick", *args, "--out-dir", str(tmp_path / "runs"))
    assert code == 2 and message in " ".join(out.split()) and not (tmp_path / "runs").exists()
