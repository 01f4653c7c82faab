"""An output path that names one of the command's own inputs is refused before anything runs
(a ``--json`` or ``--out`` equal to the trace would replace the user's data): the shared check and
the commands that read traces."""

import json
import os
from pathlib import Path

import pytest
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


def _null_device(path):
    """A private character device like /dev/null (major 1, minor 3) at ``path``: never a real /dev file."""
    import stat

    os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    return path


_needs_root = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="mknod needs root")


def test_a_fifo_is_neither_accepted_nor_replaced_by_an_ordinary_file(tmp_path):
    """``--json`` on a named pipe (or ``/dev/full``) replaced the node with a regular file (a
    new-user check): the shared check refuses it, and the shared writer never replaces it."""
    import stat

    from pbkv_contract.files import ANY_JSON, replace_file

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for kwargs in ({}, {"writes_trace": True}, {"image": True}, {"json_doc": ANY_JSON}):
        assert output_problem(fifo, **kwargs) == ("is a named pipe (fifo), not a regular file; writing it would "
                                                  "replace it (give a regular file path)"), kwargs
    with pytest.raises(OSError, match="named pipe"):
        replace_file(fifo, lambda tmp: tmp.write_text("{}"))
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]


@_needs_root
def test_a_device_node_is_refused_before_replay_advise_or_import(tmp_path):
    import stat

    from pbkv_sdk.cli import app as sdk_app

    trace, _ = _trace(tmp_path)
    node = _null_device(tmp_path / "mynull")
    assert output_problem(node).startswith("is a character device, not a regular file")
    (tmp_path / "a.log").write_text("[2024-01-01 10:00:00 INFO] not much\n")
    for app, args in ((bench_app, ["replay", str(trace), "--policy", "lru", "--json", str(node)]),
                      (bench_app, ["advise", str(trace), "--json", str(node)]),
                      (bench_app, ["replay", str(trace), "--policy", "lru", "--plot", str(node)]),
                      (sdk_app, ["import", "chatdev", str(tmp_path / "a.log"), "--out", str(node)])):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        line = " ".join(result.output.split())
        assert "is a character device, not a regular file" in line and "Traceback" not in result.output, args
        assert stat.S_ISCHR(os.lstat(node).st_mode), args


def test_a_link_to_a_result_is_written_through_and_stays_a_link(tmp_path):
    """``--json link.json`` (``link.json -> results/target.json``) replaced the link with a regular
    file and left the target stale: the target gets the results (as ``cp`` writes through a link)."""
    from pbkv_contract.files import replace_file

    trace, _ = _trace(tmp_path)
    (tmp_path / "results").mkdir()
    target = tmp_path / "results" / "target.json"
    target.write_text('{"lru": {"hit_rate": 0.5}}')
    link = tmp_path / "link.json"
    link.symlink_to(Path("results") / "target.json")
    result = runner.invoke(bench_app, ["replay", str(trace), "--policy", "lru", "--json", str(link)])
    assert result.exit_code == 0, result.output
    assert link.is_symlink() and os.readlink(link) == os.path.join("results", "target.json")
    assert json.loads(target.read_text())["lru"]["hit_rate"] != 0.5  # the replay's figures, through the link
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "results", "t.jsonl"]
    chain = tmp_path / "chain.json"
    chain.symlink_to(link)
    replace_file(chain, lambda tmp: tmp.write_text("{}"))
    assert chain.is_symlink() and link.is_symlink() and target.read_text() == "{}"
    assert sorted(p.name for p in (tmp_path / "results").iterdir()) == ["target.json"]  # no .partial left


def test_a_link_to_nothing_is_refused(tmp_path):
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "missing.json")
    assert output_problem(dangling).startswith("is a symbolic link to a missing file")
    assert dangling.is_symlink() and not (tmp_path / "missing.json").exists()


def test_a_short_json_scalar_is_json_though_not_a_result(tmp_path):
    """A file holding ``"hi"`` was "not JSON"; it is JSON that no command's result is."""
    path = tmp_path / "hi.json"
    path.write_text('"hi"\n')
    assert output_problem(path, json_doc=lambda d: isinstance(d, dict)).startswith(
        "holds JSON that is not an earlier result of this command")
    path.write_text("a,b\n1,2\n")
    assert output_problem(path, json_doc=lambda d: True).startswith("is a file that is not JSON")


def test_a_replaced_file_keeps_its_mode_and_a_new_one_gets_the_umask_default(tmp_path):
    """A results file written aside and renamed took the temporary file's mode (0600 where the
    writer made it with ``mkstemp``): an existing file keeps its own mode, a new one gets
    ``0o666 & ~umask``, as ``open(path, "w")`` would give."""
    import stat

    from pbkv_contract.files import replace_file

    def private_tmp(tmp):  # a writer that leaves its file 0600, as mkstemp makes it
        tmp.write_text("{}")
        os.chmod(tmp, 0o600)

    old = os.umask(0o027)
    try:
        kept = tmp_path / "kept.json"
        kept.write_text("{}")
        os.chmod(kept, 0o664)
        replace_file(kept, private_tmp)
        assert stat.S_IMODE(os.stat(kept).st_mode) == 0o664 and kept.read_text() == "{}"
        os.chmod(kept, 0o600)
        replace_file(kept, lambda tmp: tmp.write_text("[]"))
        assert stat.S_IMODE(os.stat(kept).st_mode) == 0o600 and kept.read_text() == "[]"
        new = tmp_path / "sub" / "new.json"
        replace_file(new, private_tmp)
        assert stat.S_IMODE(os.stat(new).st_mode) == 0o640  # 0o666 & ~0o027
        os.umask(0o002)
        newer = tmp_path / "newer.json"
        replace_file(newer, private_tmp)
        assert stat.S_IMODE(os.stat(newer).st_mode) == 0o664
    finally:
        os.umask(old)
    trace, _ = _trace(tmp_path)
    out = tmp_path / "r.json"
    out.write_text("")
    os.chmod(out, 0o640)
    result = runner.invoke(bench_app, ["replay", str(trace), "--policy", "lru", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o640 and "lru" in json.loads(out.read_text())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.json", "newer.json", "r.json", "sub", "t.jsonl"]
