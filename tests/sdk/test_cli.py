"""`pbkv-sdk` CLI: record an unmodified app, stats, validate, import."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pbkv_sdk.cli import app
from pbkv_contract.trace import InvocationRecord, TraceWriter, WorkflowEndRecord, iter_trace

from .fake_openai import FakeOpenAI

runner = CliRunner()
TARGET = Path(__file__).with_name("record_target.py")


def _inv(wid: str, step: int, agent: str, **kw) -> InvocationRecord:
    fields = dict(app="demo", t_start=float(step), t_end=step + 0.5, prompt_tokens=10, completion_tokens=2, prefix_hashes=["ab"], ttft_s=0.1)
    fields.update(kw)
    return InvocationRecord(workflow_id=wid, step=step, agent=agent, **fields)


#: framework -> (invocations of 2 tasks, agents that must appear in the summary)
RECORDED = {
    "langgraph": (6 + 12, ("summarizer", "judge")),  # task 0: 1 round of 6 calls, task 1: 2 rounds
    "autogen": (4 + 4, ("speaker_selector", "planner", "coder")),
    "crewai": (2 + 2, ("Financial Analyst", "Report Writer")),
}


@pytest.mark.slow
@pytest.mark.parametrize("framework", sorted(RECORDED))
def test_record_runs_an_app_with_recording_on_and_summarises_it(fake_llm: FakeOpenAI, tmp_path, framework, monkeypatch):
    monkeypatch.setenv("PBKV_END_TIMEOUT_S", "2")  # a loaded CI machine must not lose the end signals at exit
    out = tmp_path / "rec" / "run.jsonl"
    result = runner.invoke(
        app,
        ["record", "--out", str(out), "--app", "rec-app", "--server-url", fake_llm.url, "--",
         sys.executable, str(TARGET), framework, fake_llm.base_url, "2"],
    )
    assert result.exit_code == 0, result.output
    n_invocations, agents = RECORDED[framework]
    records = list(iter_trace(out, strict=True))
    invs = [r for r in records if isinstance(r, InvocationRecord)]
    assert len(invs) == n_invocations
    assert {r.app for r in invs} == {"rec-app"}  # --app overrides the app's own name
    assert sum(isinstance(r, WorkflowEndRecord) for r in records) == 2
    assert f"2 workflows (2 completed ended), {n_invocations} invocations" in " ".join(result.output.split())
    assert all(agent in result.output for agent in agents)
    assert sorted(w for w, _, _ in fake_llm.ends) == sorted({r.workflow_id for r in invs})  # --server-url reached the app
    assert [fake_llm.hints_of(r)[3] for r in fake_llm.requests] == ["rec-app"] * n_invocations


def test_record_passes_the_app_exit_status_through(tmp_path):
    result = runner.invoke(app, ["record", "--out", str(tmp_path / "x.jsonl"), "--", sys.executable, "-c", "raise SystemExit(3)"])
    assert result.exit_code == 3
    assert "no LLM invocation was recorded" in _one_line(result.output)


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


def test_stats_leaves_internal_selector_calls_out_of_the_agent_transitions(tmp_path):
    # A SelectorGroupChat turn: the hidden selector call, then the chosen participant's call.
    path = tmp_path / "t.jsonl"
    agents = ["speaker_selector", "planner", "speaker_selector", "critic", "speaker_selector", "planner"]
    with TraceWriter(path) as w:
        for step, agent in enumerate(agents):
            w.write(_inv("A", step, agent, internal=True if agent == "speaker_selector" else None))
        w.write(WorkflowEndRecord(app="demo", workflow_id="A", t=9.0))
    data = json.loads(runner.invoke(app, ["stats", str(path), "--json"]).output)
    assert data["transitions"] == {"planner -> critic": 1, "critic -> planner": 1, "planner -> <END>": 1}
    assert data["agents"] == {"speaker_selector": 3, "planner": 2, "critic": 1} and data["internal_invocations"] == 3
    text = _one_line(runner.invoke(app, ["stats", str(path)]).output)
    assert "(3 internal, left out of the transitions)" in text


def test_stats_shows_cached_tokens_and_ttft_that_no_record_reports_as_unknown_not_zero(tmp_path):
    path = tmp_path / "t.jsonl"
    with TraceWriter(path) as w:
        for step in range(3):
            w.write(_inv("A", step, "planner", ttft_s=None))  # cached_tokens left out: unknown
    text = _one_line(runner.invoke(app, ["stats", str(path)]).output)
    assert "tokens: 30 prompt, cached: unknown, 6 completion; mean TTFT unknown" in text
    data = json.loads(runner.invoke(app, ["stats", str(path), "--json"]).output)
    assert (data["cached_tokens"], data["cached_tokens_known"], data["mean_ttft_s"], data["ttft_known"]) == (None, 0, None, 0)


def test_stats_says_over_how_many_invocations_a_partly_reported_figure_is_computed(tmp_path):
    path = tmp_path / "t.jsonl"
    with TraceWriter(path) as w:
        w.write(_inv("A", 0, "planner", prompt_tokens=15000, cached_tokens=12000, ttft_s=None))
        w.write(_inv("A", 1, "coder", prompt_tokens=400, cached_tokens=345, ttft_s=0.25))
        w.write(_inv("A", 2, "planner", ttft_s=None))
    text = _one_line(runner.invoke(app, ["stats", str(path)]).output)
    # prompt 15,000 + 400 + 10; cached over the first two only (the reader drops cached above prompt)
    assert "15,410 prompt, 12,345 cached (of 2/3 invocations that report it), 6 completion" in text
    assert "mean TTFT 250.0 ms (of 1/3 invocations that report it)" in text
    data = json.loads(runner.invoke(app, ["stats", str(path), "--json"]).output)
    assert (data["cached_tokens"], data["cached_tokens_known"], data["mean_ttft_s"], data["ttft_known"]) == (12345, 2, 0.25, 1)


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


#: The smallest ChatDev v1 log the importer turns into a workflow: one role-play, one LLM call.
CHATDEV_LOG = """[2023-18-09 11:05:25 INFO] System: **[RolePlaying]**

| Parameter | Value |
| --- | --- |
| **assistant_role_name** | Programmer |
| **user_role_name** | Chief Technology Officer |

[2023-18-09 11:05:29 INFO] **[OpenAI_Usage_Info Send]**
num_tokens: 40

[2023-18-09 11:05:33 INFO] **[OpenAI_Usage_Info Receive]**
prompt_tokens: 40
completion_tokens: 4
"""


def test_import_chatdev_runs_the_importer_and_prints_its_summary(tmp_path):
    src = tmp_path / "logs"
    src.mkdir()
    (src / "a.log").write_text(CHATDEV_LOG)
    (src / "empty.log").write_text("no calls here\n")
    out = tmp_path / "o.jsonl"
    result = runner.invoke(app, ["import", "chatdev", str(src), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "2 log file(s): 1 workflows, 1 invocations, 1 skipped" in _one_line(result.output)
    assert [(r.agent, r.prompt_tokens) for r in iter_trace(out) if isinstance(r, InvocationRecord)] == [("Programmer", 40)]


def test_import_chatdev_without_any_usable_log_exits_2_in_one_line_and_writes_nothing(tmp_path):
    (tmp_path / "random.bin").write_bytes(bytes(range(256)) * 8)
    (tmp_path / "empty.log").write_text("")
    (tmp_path / "nologs").mkdir()
    (tmp_path / "nologs" / "readme.txt").write_text("x")
    (tmp_path / "emptydir").mkdir()
    import io
    import tarfile
    with tarfile.open(tmp_path / "nologs.tar.gz", "w:gz") as tar:
        info = tarfile.TarInfo("readme.txt")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    for src, why in (("random.bin", "none usable"), ("empty.log", "none usable (first: empty.log: "),
                     ("nologs", "no .log file found"), ("emptydir", "no .log file found"),
                     ("nologs.tar.gz", "no .log file found")):
        out = tmp_path / f"{src}.jsonl"
        result = runner.invoke(app, ["import", "chatdev", str(tmp_path / src), "--out", str(out)])
        assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
        assert "no ChatDev workflow imported" in _one_line(result.output) and why in _one_line(result.output)
        assert not out.exists() and not Path(f"{out}.partial").exists()


def test_import_of_a_missing_source_is_one_error_line_for_every_importer(tmp_path):
    for importer in ("chatdev", "kv-cache-tester", "ghcp"):
        result = runner.invoke(app, ["import", importer, str(tmp_path / "nonexist"), "--out", str(tmp_path / "o.jsonl")])
        assert result.exit_code == 2, result.output
        assert result.output.strip().splitlines() == [f"error: {tmp_path / 'nonexist'}: no such file or directory"]
    assert not (tmp_path / "o.jsonl").exists()


def test_import_chatdev_into_a_directory_is_a_clear_error_and_leaves_no_partial_file(tmp_path):
    (tmp_path / "a.log").write_text(CHATDEV_LOG)
    (tmp_path / "outdir").mkdir()
    result = runner.invoke(app, ["import", "chatdev", str(tmp_path / "a.log"), "--out", str(tmp_path / "outdir")])
    assert result.exit_code == 2 and not isinstance(result.exception, OSError)
    assert "is a directory" in _one_line(result.output)
    assert not (tmp_path / "outdir.partial").exists() and not list((tmp_path / "outdir").iterdir())


def test_import_chatdev_into_an_uncreatable_place_is_a_clear_error(tmp_path):
    (tmp_path / "a.log").write_text(CHATDEV_LOG)
    (tmp_path / "afile").write_text("x")
    result = runner.invoke(app, ["import", "chatdev", str(tmp_path / "a.log"), "--out", str(tmp_path / "afile" / "o.jsonl")])
    assert result.exit_code == 2 and not isinstance(result.exception, OSError)
    assert "cannot import" in _one_line(result.output)
    assert (tmp_path / "afile").read_text() == "x"


def test_import_chatdev_lists_each_skipped_log_once(tmp_path, caplog):
    src = tmp_path / "logs"
    src.mkdir()
    (src / "a.log").write_text(CHATDEV_LOG)
    (src / "empty.log").write_text("no calls here\n")
    result = runner.invoke(app, ["import", "chatdev", str(src), "--out", str(tmp_path / "o.jsonl")])
    assert result.exit_code == 0, result.output
    assert result.output.count("empty.log") == 1 and "skipped empty.log: no LLM calls" in _one_line(result.output)
    # a warning would reach stderr as a second line (logging's last-resort handler; pytest's capture takes its place)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and "empty.log" in r.getMessage()]


def test_import_chatdev_of_a_truncated_archive_says_the_import_is_partial(tmp_path):
    import io
    import random
    import tarfile

    rng = random.Random(1)
    archive = tmp_path / "logs.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for i in range(10):  # random padding: the archive does not compress, so a cut loses the later logs
            data = (CHATDEV_LOG + "".join(f"{rng.random()}\n" for _ in range(400))).encode()
            info = tarfile.TarInfo(f"run{i}.log")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    whole = archive.read_bytes()
    archive.write_bytes(whole[: len(whole) * 6 // 10])
    out = tmp_path / "o.jsonl"
    result = runner.invoke(app, ["import", "chatdev", str(archive), "--out", str(out)])
    assert result.exit_code == 0, result.output  # what was read is kept (documented)
    read = len({r.workflow_id for r in iter_trace(out) if isinstance(r, InvocationRecord)})
    assert 0 < read < 10
    line = _one_line(result.output)
    assert line.startswith(f"{read} log file(s): {read} workflows, {read} invocations, 0 skipped -> {out}; PARTIAL IMPORT: "
                           f"the archive logs.tar.gz is damaged or truncated (")
    assert line.endswith(f"run{read}.log and any later logs not read)")


def _one_line(output: str) -> str:
    return " ".join(output.split())  # rich wraps long messages at the terminal width


def test_record_of_a_command_that_cannot_run_is_a_clear_error(tmp_path):
    script = tmp_path / "app.py"
    script.write_text("print('hi')\n")  # not executable
    out = tmp_path / "x.jsonl"
    missing = runner.invoke(app, ["record", "--out", str(out), "--", str(tmp_path / "nope")])
    denied = runner.invoke(app, ["record", "--out", str(out), "--", str(script)])
    assert (missing.exit_code, denied.exit_code) == (127, 126)
    assert "command not found" in missing.output
    assert "cannot run" in _one_line(denied.output) and "Permission denied" in _one_line(denied.output)
    assert not isinstance(missing.exception, OSError) and not isinstance(denied.exception, OSError)


def test_record_removes_the_trace_it_created_when_the_command_cannot_run_or_the_app_fails_first(tmp_path):
    script = tmp_path / "app.py"
    script.write_text("print('hi')\n")  # not executable
    for args, code in (([str(tmp_path / "nope")], 127), ([str(script)], 126),
                       ([sys.executable, "-c", "raise RuntimeError('crashed before any LLM call')"], 1)):
        out = tmp_path / "rec.jsonl"
        result = runner.invoke(app, ["record", "--out", str(out), "--app", "demo", "--", *args])
        assert result.exit_code == code, result.output
        assert not out.exists(), args
        assert f"removed {out}" in _one_line(result.output)
    kept = tmp_path / "old.jsonl"  # --append to an earlier trace: not ours to remove
    with TraceWriter(kept) as w:
        w.write(_inv("A", 0, "x"))
    result = runner.invoke(app, ["record", "--out", str(kept), "--append", "--", str(tmp_path / "nope")])
    assert result.exit_code == 127 and len(list(iter_trace(kept))) == 1


@pytest.mark.slow
def test_record_keeps_the_trace_of_an_app_that_fails_after_its_llm_calls_and_passes_its_status_on(fake_llm: FakeOpenAI,
                                                                                                     tmp_path):
    out = tmp_path / "rec.jsonl"
    code = ("import openai, pbkv_sdk\n"
            f"client = openai.OpenAI(base_url={fake_llm.base_url!r}, api_key='x', http_client=pbkv_sdk.http_client())\n"
            f"with pbkv_sdk.workflow(app='x', server_url={fake_llm.url!r}), pbkv_sdk.agent('planner'):\n"
            "    client.chat.completions.create(model='m', messages=[{'role': 'user', 'content': 'x'}])\n"
            "raise SystemExit(3)\n")
    result = runner.invoke(app, ["record", "--out", str(out), "--", sys.executable, "-c", code])
    assert result.exit_code == 3, result.output
    assert [(r.agent, r.step) for r in iter_trace(out, strict=True) if isinstance(r, InvocationRecord)] == [("planner", 0)]
    assert "removed" not in _one_line(result.output)


def _ctrl_c_as_in_a_terminal() -> None:
    """In the child before exec: SIGINT delivered and at its default, as in a shell's foreground
    job. A test process may hand its children SIGINT ignored or blocked (both survive exec; a
    pytest-xdist worker after some libraries ran), and then no Ctrl-C would reach `record`."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _record_and_interrupt_twice(tmp_path, app_code: str) -> tuple[subprocess.CompletedProcess, Path, Path]:
    """Run ``pbkv-sdk record`` in its own process group; once the app is up, press Ctrl-C twice
    (SIGINT to the group). The second comes once ``record`` said it is waiting for the app and the
    app has written the file named by ``ACK`` (an app whose handler does so), after at least 0.3 s:
    two signals that reach a process before it handled the first count as one.
    Returns (result, trace, app pid file)."""
    out, ready, ack = tmp_path / "rec.jsonl", tmp_path / "ready", tmp_path / "ack"
    code = (f"import os, signal, time\nACK = {str(ack)!r}\n{app_code}\n"
            f"open({str(ready)!r}, 'w').write(str(os.getpid()))\ntime.sleep(20)\n")
    # Output goes to a file, not a pipe: the app inherits it, and reading a pipe to its end would
    # wait for an app that outlives `record` (the test that kills it afterwards would find it gone).
    log = (tmp_path / "record.log").open("w+")

    def log_text() -> str:
        return (tmp_path / "record.log").read_text()

    proc = subprocess.Popen([sys.executable, "-m", "pbkv_sdk.cli", "record", "--out", str(out), "--", sys.executable, "-c", code],
                            start_new_session=True, stdout=log, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=_ctrl_c_as_in_a_terminal)
    try:
        deadline = time.monotonic() + 20
        while not (ready.exists() and ready.read_text()) and time.monotonic() < deadline:
            time.sleep(0.02)
        os.killpg(proc.pid, signal.SIGINT)
        time.sleep(0.3)
        deadline = time.monotonic() + 10
        while (("ACK" in app_code and not ack.exists()) or "interrupted: waiting" not in log_text()) \
                and time.monotonic() < deadline:
            time.sleep(0.02)
        os.killpg(proc.pid, signal.SIGINT)
        time.sleep(0.3)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        log.seek(0)
        output = log.read()
        log.close()
    return subprocess.CompletedProcess(proc.args, proc.returncode, output), out, ready


@pytest.mark.parametrize("second", ["signal.default_int_handler", "signal.SIG_DFL"])
def test_record_interrupted_by_ctrl_c_twice_removes_its_empty_trace_once_the_app_ended(tmp_path, second):
    # the app lets the first Ctrl-C pass (cleaning up, say) and stops at the second: by Python's
    # KeyboardInterrupt, or killed by the signal. The second Ctrl-C reaches `record` as the app
    # dies; a KeyboardInterrupt in `record` then lost the app's status (exit 1, not 130), most
    # runs on a busy machine.
    result, out, _ = _record_and_interrupt_twice(
        tmp_path, f"signal.signal(signal.SIGINT, lambda s, f: (signal.signal(signal.SIGINT, {second}),"
                  " open(ACK, 'w').close()))")
    assert result.returncode == 130, result.stdout
    assert not out.exists()
    assert f"no LLM invocation was recorded (nothing; removed {out.resolve()})" in _one_line(result.stdout)


@pytest.mark.slow
def test_record_interrupted_twice_keeps_the_trace_of_an_app_that_still_runs_and_says_so(tmp_path):
    result, out, ready = _record_and_interrupt_twice(tmp_path, "signal.signal(signal.SIGINT, signal.SIG_IGN)")
    try:
        os.kill(int(ready.read_text()), signal.SIGKILL)  # the app ignored both
    except ProcessLookupError:
        pytest.fail(f"the app ended before the test killed it: record waited for it ({result.returncode}): {result.stdout}")
    assert result.returncode == 130, result.stdout
    assert out.exists() and "the app is still running" in _one_line(result.stdout)
    assert "waiting for the app to finish writing its trace (Ctrl-C again to stop waiting)" in _one_line(result.stdout)


def test_record_into_an_unwritable_place_fails_before_running_the_app(tmp_path):
    marker = tmp_path / "ran"
    (tmp_path / "adir").mkdir()
    (tmp_path / "afile").write_text("x")
    for out in (tmp_path / "adir", tmp_path / "afile" / "t.jsonl"):
        result = runner.invoke(app, ["record", "--out", str(out), "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"])
        assert result.exit_code == 2, result.output
        assert "cannot write the trace file" in _one_line(result.output)
        assert not isinstance(result.exception, OSError)
    assert not marker.exists()
    # under a regular file: the reason names that file as not a folder (it read "File exists")
    result = runner.invoke(app, ["record", "--out", str(tmp_path / "afile" / "t.jsonl"), "--", "true"])
    assert _one_line(result.output).endswith(f"{tmp_path / 'afile'} is a file, not a directory")
    assert len(result.output.strip().splitlines()) == 1


def test_stats_and_validate_reject_a_trace_without_records(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    future = tmp_path / "v2.jsonl"
    record = _inv("A", 0, "x").to_json()
    future.write_text(json.dumps({**record, "v": 2}) + "\n")
    for cmd in ("stats", "validate"):
        assert runner.invoke(app, [cmd, str(empty)]).exit_code == 1
        assert "empty trace" in _one_line(runner.invoke(app, [cmd, str(empty)]).output)
        result = runner.invoke(app, [cmd, str(future)])
        assert result.exit_code == 1
    assert "no valid trace record (1 invalid line(s)" in _one_line(runner.invoke(app, ["stats", str(future)]).output)
    assert "unsupported trace version 2" in _one_line(runner.invoke(app, ["validate", str(future)]).output)


def test_stats_of_an_unreadable_file_is_a_clear_error(tmp_path, monkeypatch):
    import pbkv_sdk.cli as cli

    path = tmp_path / "t.jsonl"
    path.write_text("{}\n")

    def deny(p):
        raise PermissionError(13, "Permission denied", str(p))

    monkeypatch.setattr(cli, "validate_file", deny)  # root ignores chmod 000, so simulate the OS error
    for cmd in ("stats", "validate"):
        result = runner.invoke(app, [cmd, str(path)])
        assert result.exit_code == 2 and "cannot read" in _one_line(result.output)
        assert "Permission denied" in _one_line(result.output)


def test_a_negative_top_is_rejected_by_the_cli(tmp_path):
    path = tmp_path / "t.jsonl"
    with TraceWriter(path) as w:
        w.write(_inv("A", 0, "x"))
    assert runner.invoke(app, ["stats", str(path), "--top", "-1"]).exit_code == 2


def test_record_switches_crewai_telemetry_off_and_recording_on_for_the_app(tmp_path, monkeypatch):
    monkeypatch.setenv("CREWAI_DISABLE_TELEMETRY", "false")  # the user's shell says otherwise: record wins
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)  # the app's own OpenTelemetry stays on
    seen = tmp_path / "env.json"
    names = ["CREWAI_DISABLE_TELEMETRY", "CREWAI_DISABLE_TRACKING", "OTEL_SDK_DISABLED", "CREWAI_TRACING_ENABLED",
             "PBKV_TRACE_PATH", "PBKV_APP", "PBKV_BODY_HINTS"]
    code = f"import json, os; open({str(seen)!r}, 'w').write(json.dumps({{k: os.environ.get(k) for k in {names!r}}}))"
    out = tmp_path / "t.jsonl"
    result = runner.invoke(app, ["record", "--out", str(out), "--app", "fin", "--body-hints", "--", sys.executable, "-c", code])
    assert result.exit_code == 1, result.output  # the app ran fine but made no LLM call
    assert json.loads(seen.read_text()) == {
        "CREWAI_DISABLE_TELEMETRY": "true", "CREWAI_DISABLE_TRACKING": "true", "OTEL_SDK_DISABLED": None,
        "CREWAI_TRACING_ENABLED": "false", "PBKV_TRACE_PATH": str(out.resolve()), "PBKV_APP": "fin", "PBKV_BODY_HINTS": "1",
    }


def test_record_reports_an_app_killed_by_a_signal_as_128_plus_the_signal(tmp_path):
    code = "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"
    result = runner.invoke(app, ["record", "--out", str(tmp_path / "x.jsonl"), "--", sys.executable, "-c", code])
    assert result.exit_code == 128 + 15


def test_record_refuses_to_overwrite_a_file_that_is_not_a_trace(tmp_path):
    script = tmp_path / "my_app.py"
    script.write_text("print('my precious app')\n")
    result = runner.invoke(app, ["record", "--out", str(script), "--", sys.executable, "-c", "pass"])
    assert result.exit_code == 2 and "refusing to overwrite" in _one_line(result.output)
    assert script.read_text() == "print('my precious app')\n"


def test_record_replaces_an_earlier_trace_only_with_a_recording_that_holds_an_invocation(tmp_path):
    old = tmp_path / "old.jsonl"
    with TraceWriter(old) as w:
        w.write(_inv("A", 0, "x"))
    before = old.read_bytes()
    # the app records nothing, or cannot run at all: the earlier trace is put back, byte for byte
    for command in ([sys.executable, "-c", "pass"], [str(tmp_path / "no-such-app")]):
        result = runner.invoke(app, ["record", "--out", str(old), "--", *command])
        assert result.exit_code in (1, 127), result.output
        assert f"the previous trace is back in {old}" in _one_line(result.output)
        assert old.read_bytes() == before and not (tmp_path / "old.jsonl.previous").exists()
    # an app that records an invocation replaces it, and nothing is left beside it
    code = ("from pbkv_contract.trace import InvocationRecord, TraceWriter\n"
            "import os\n"
            "with TraceWriter(os.environ['PBKV_TRACE_PATH']) as w:\n"
            "    w.write(InvocationRecord(app='b', workflow_id='w9', step=0, agent='y', t_start=0.0, t_end=1.0,"
            " prompt_tokens=3, completion_tokens=1, prefix_hashes=['ab']))\n")
    result = runner.invoke(app, ["record", "--out", str(old), "--", sys.executable, "-c", code])
    assert result.exit_code == 0, result.output
    assert [r.workflow_id for r in iter_trace(old)] == ["w9"]
    assert not (tmp_path / "old.jsonl.previous").exists()


def test_record_of_an_app_whose_calls_were_not_stamped_fails_names_the_interpreter_and_removes_its_file(tmp_path):
    out = tmp_path / "run.jsonl"
    code = "import pbkv_sdk\nwith pbkv_sdk.workflow(app='x', server_url='http://127.0.0.1:9', end_timeout_s=0.05):\n    pass\n"
    result = runner.invoke(app, ["record", "--out", str(out), "--", sys.executable, "-c", code])
    assert result.exit_code == 1
    line = _one_line(result.output)
    assert "no LLM invocation was recorded (only 1 workflow end(s); removed" in line
    assert sys.executable in line and "Python 3." in line  # the interpreter that ran, with its version
    assert not out.exists()


def test_validate_and_stats_reject_a_trace_with_ends_but_no_invocations(tmp_path):
    path = tmp_path / "ends.jsonl"
    with TraceWriter(path) as w:
        w.write(WorkflowEndRecord(app="a", workflow_id="w1", t=1.0))
        w.write(WorkflowEndRecord(app="a", workflow_id="w2", t=2.0))
    for cmd in ("validate", "stats"):
        result = runner.invoke(app, [cmd, str(path)])
        assert result.exit_code == 1
        assert "no invocation record, only 2 workflow end(s)" in _one_line(result.output)


@pytest.mark.parametrize("importer", ["chatdev", "kv-cache-tester"])
@pytest.mark.parametrize("name, content", [("logs.tar.gz", bytes(range(256)) * 20),  # random bytes
                                           ("logs.tar.gz", b"\x1f\x8b\x08\x00" + b"cut" * 50),  # a cut gzip
                                           ("logs.tgz", b"a gzip-less text file\n"),
                                           # mtime=0: the header's time is in the test id, and xdist's
                                           # workers must collect the same ids
                                           ("logs.bin", __import__("gzip").compress(b'{"id": "not a tar"}', mtime=0))],
                         ids=["random-bytes", "cut-gzip", "not-gzip", "gzip-not-tar"])
def test_an_unreadable_archive_is_one_line_saying_so(importer, name, content, tmp_path):
    # it was read as one log ("no LLM calls") or one JSON file ("not JSON"), over two lines
    archive = tmp_path / name
    archive.write_bytes(content)
    out = tmp_path / "o.jsonl"
    with TraceWriter(out) as w:  # an earlier import, which a failed one must leave as it was
        w.write(WorkflowEndRecord(app="a", workflow_id="w1", t=1.0))
    before = out.read_bytes()
    result = runner.invoke(app, ["import", importer, str(archive), "--out", str(out)])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines == [f"error: {archive} is not a readable tar archive (damaged, truncated, or not a tar file); give a "
                     f".tar.gz of the files, a folder of them or one file"], result.output
    assert out.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == sorted([name, "o.jsonl"])


def test_a_plain_file_a_folder_and_a_tar_are_not_archive_problems(tmp_path):
    import tarfile

    from pbkv_sdk.importers import archive_problem

    (tmp_path / "run.log").write_text(CHATDEV_LOG)
    with tarfile.open(tmp_path / "logs.tar.gz", "w:gz") as tar:
        tar.add(tmp_path / "run.log", arcname="run.log")
    for path in (tmp_path / "run.log", tmp_path, tmp_path / "logs.tar.gz"):
        assert archive_problem(path) is None, path


def test_import_chatdev_writes_through_a_link_and_refuses_a_fifo(tmp_path):
    """``import chatdev ... --out link.jsonl`` replaced the link with a regular file (a new-user
    check): the trace goes to the link's target and the link stays; a named pipe is refused."""
    (tmp_path / "a.log").write_text(CHATDEV_LOG)
    target = tmp_path / "target.jsonl"
    link = tmp_path / "link.jsonl"
    link.symlink_to(target.name)
    assert runner.invoke(app, ["import", "chatdev", str(tmp_path / "a.log"), "--out", str(target)]).exit_code == 0
    first = os.stat(target).st_ino
    result = runner.invoke(app, ["import", "chatdev", str(tmp_path / "a.log"), "--out", str(link)])
    assert result.exit_code == 0, result.output
    assert os.stat(target).st_ino != first  # a new trace renamed over the target
    assert link.is_symlink() and os.readlink(link) == "target.jsonl"
    assert [r.agent for r in iter_trace(target) if isinstance(r, InvocationRecord)] == ["Programmer"]
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    result = runner.invoke(app, ["import", "chatdev", str(tmp_path / "a.log"), "--out", str(fifo)])
    assert result.exit_code == 2 and "is a named pipe (fifo), not a regular file" in _one_line(result.output)
    assert fifo.exists() and not fifo.is_file() and not (tmp_path / "pipe.jsonl.partial").exists()
