"""An output path that names one of the command's own inputs is refused before anything runs
(a ``--json`` or ``--out`` equal to the trace would replace the user's data): the shared check and
the commands that read traces."""

import json
import os

from typer.testing import CliRunner

from pbkv_contract.files import output_problem, shared_output
from pbkv_server.cli.bench import app as bench_app
from pbkv_server.sim.synth.agents import write_trace

runner = CliRunner()


def test_output_problem_sees_the_input_by_any_name(tmp_path, monkeypatch):
    trace = tmp_path / "t.jsonl"
    trace.write_text("{}\n")
    link = tmp_path / "link.jsonl"
    link.symlink_to(trace)
    hard = tmp_path / "hard.jsonl"
    os.link(trace, hard)
    monkeypatch.chdir(tmp_path)
    for same in (trace, "t.jsonl", tmp_path / "sub" / ".." / "t.jsonl", link, hard):
        assert "is the input file" in output_problem(same, [trace])
    assert output_problem(tmp_path / "other.json", [trace]) is None
    assert output_problem(tmp_path / "new" / "deeper" / "x.json", [trace]) is None  # folders are created
    assert output_problem(tmp_path, []) == "is a directory"
    assert output_problem(None, [trace]) is None


def test_shared_output_names_two_outputs_on_one_file_by_any_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    message = shared_output([("--json", "r.out"), ("--plot", tmp_path / "r.out")])
    assert message.startswith("--json r.out and --plot ") and "are the same file" in message
    assert shared_output([("--json", "a.json"), ("--plot", "a.png"), ("--other", None)]) is None
    assert shared_output([("--json", None), ("--plot", None)]) is None


def _trace(tmp_path):
    path = tmp_path / "t.jsonl"
    write_trace(str(path), graph="codegen", workflows=4, seed=0)
    return path, path.read_bytes()


def test_replay_refuses_a_json_or_plot_path_equal_to_the_trace(tmp_path):
    trace, before = _trace(tmp_path)
    for option in ("--json", "--plot"):
        result = runner.invoke(bench_app, ["replay", str(trace), "--policy", "lru", option, str(trace)])
        assert result.exit_code == 2, result.output
        assert "is the input file" in result.output
    assert trace.read_bytes() == before


def test_replay_refuses_one_path_for_json_and_plot_before_running(tmp_path):
    trace, _ = _trace(tmp_path)
    out = tmp_path / "r.out"
    result = runner.invoke(bench_app, ["replay", str(trace), "--policy", "lru", "--json", str(out), "--plot", str(out)])
    assert result.exit_code == 2, result.output
    assert "are the same file" in result.output and "\n" not in result.output.strip()
    assert not out.exists()  # refused before the replay, not after it


def test_predictor_train_refuses_an_out_equal_to_a_trace(tmp_path):
    trace, before = _trace(tmp_path)
    from pbkv_train.cli import app as predictor_app  # torch: imported by the test that needs it

    result = runner.invoke(predictor_app, ["train", str(trace), "--out", str(trace), "--epochs", "1"])
    assert result.exit_code == 2, result.output
    assert "is the input file" in result.output
    assert trace.read_bytes() == before


def test_output_problem_probes_the_folder_rather_than_trusting_os_access(tmp_path, monkeypatch):
    # issue 35: for root, os.access says /proc is writable, so "advise --plot /proc/x.png" replayed
    # every policy before failing; a file is now created and removed in the nearest existing folder.
    monkeypatch.setattr(os, "access", lambda *args, **kwargs: True)  # what root is told anywhere
    assert "/proc is not writable" in output_problem("/proc/pbkv-probe-test/x.png")
    assert output_problem(tmp_path / "new" / "dir" / "a.json") is None  # missing folders are made by the writers
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".pbkv-probe")]  # the probe is gone
    (tmp_path / "file.txt").write_text("x")
    assert "is not a directory" in output_problem(tmp_path / "file.txt" / "a.json")


def test_a_plot_replaces_only_an_empty_file_or_a_png(tmp_path):
    """``--plot one.json`` turned a raw kv-cache-tester trace into a PNG (a new-user check): a plot
    may replace only an empty file or a PNG (its 8-byte signature), and the refusal comes before
    the replay."""
    raw = tmp_path / "trace_0590.json"
    raw.write_text('{"id": "trace_0590", "requests": []}')
    png = tmp_path / "old.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 8)
    empty = tmp_path / "empty.png"
    empty.write_bytes(b"")
    assert "not a PNG image" in output_problem(raw, image=True)
    assert output_problem(raw) is None  # a JSON output may still replace it (the caller's choice)
    assert output_problem(png, image=True) is None and output_problem(empty, image=True) is None
    trace, _ = _trace(tmp_path)
    result = runner.invoke(bench_app, ["replay", str(trace), "--policy", "lru", "--plot", str(raw)])
    assert result.exit_code == 2 and "not a PNG image" in result.output, result.output
    assert raw.read_text() == '{"id": "trace_0590", "requests": []}'


def test_a_json_result_replaces_only_an_empty_file_or_an_accepted_document(tmp_path):
    """``replay --json trace_0590.json`` turned a raw kv-cache-tester trace (or a ChatDev log) into a
    summary (a new-user check): a JSON results file may replace only an empty file or one JSON
    document that the command accepts as an earlier result of its own."""
    from pbkv_contract.files import ANY_JSON

    raw = tmp_path / "trace_0590.json"
    raw.write_text('{"id": "trace_0590", "requests": []}')
    log = tmp_path / "run.log"
    log.write_text("[2024-01-01] ChatDev log\n")
    jsonl = tmp_path / "lines.json"
    jsonl.write_text('{"a": 1}\n{"a": 2}\n')
    bad_utf8 = tmp_path / "bytes.json"
    bad_utf8.write_bytes(b'{"a": "\xff"}')
    empty = tmp_path / "empty.json"
    empty.write_bytes(b"")
    for path in (log, jsonl, bad_utf8):
        assert "is a file that is not JSON;" in output_problem(path, json_doc=ANY_JSON), path
    assert output_problem(raw, json_doc=ANY_JSON) is None and output_problem(empty, json_doc=ANY_JSON) is None
    assert "holds JSON that is not an earlier result" in output_problem(raw, json_doc=lambda d: "hit_rate" in d)
    assert output_problem(raw, json_doc=lambda d: d["id"] == "trace_0590") is None


def test_replay_and_advise_json_refuse_a_raw_trace_a_log_and_each_others_result(tmp_path):
    trace, _ = _trace(tmp_path)
    raw = tmp_path / "trace_0590.json"
    raw.write_text('{"id": "trace_0590", "requests": []}')
    log = tmp_path / "run.log"
    log.write_text("[2024-01-01] ChatDev log\n")
    replayed, advised = tmp_path / "replay.json", tmp_path / "advise.json"
    replayed.write_text('{"lru": {"hit_rate": 0.5}}')
    advised.write_text('{"profile": "p", "regime": "r", "verdict": "v"}')
    cases = [("replay", raw, "holds JSON that is not an earlier result"), ("replay", log, "is a file that is not JSON;"),
             ("replay", advised, "holds JSON that is not an earlier result"),
             ("advise", raw, "holds JSON that is not an earlier result"), ("advise", log, "is a file that is not JSON;"),
             ("advise", replayed, "holds JSON that is not an earlier result")]
    for command, path, message in cases:
        before = path.read_bytes()
        result = runner.invoke(bench_app, [command, str(trace), "--json", str(path)])
        assert result.exit_code == 2, result.output
        assert result.output.strip().startswith(f"error: --json {path}: ") and message in result.output
        assert "\n" not in result.output.strip() and path.read_bytes() == before
    result = runner.invoke(bench_app, ["replay", str(trace), "--policy", "lru", "--json", str(replayed)])
    assert result.exit_code == 0, result.output  # an earlier result of its own is replaced
    assert list(json.loads(replayed.read_text())) == ["lru"]
