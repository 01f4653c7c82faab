"""A usage error of any CLI is one line on stderr with exit status 2 (:func:`pbkv_contract.extras.run`).

Typer printed a bad option value, an unknown command or a missing argument as a rich box of about
ten lines; every console script enters through ``run``, which now prints ``cli: message (see:
cli command --help)``. Run in-process through the console-script functions themselves.
"""

from __future__ import annotations

import sys

import pytest

from pbkv_sdk.entry import pbkv_sdk
from pbkv_server.cli.entry import pbkv_bench


@pytest.mark.parametrize("entry, args, line", [
    (pbkv_bench, ["replay", "t.jsonl", "--horizon", "x"],
     "pbkv-bench: Invalid value for '--horizon': Input should be a valid integer, unable to parse string as an "
     "integer (see: pbkv-bench replay --help)"),
    (pbkv_bench, ["replay"], "pbkv-bench: Missing argument 'trace'. (see: pbkv-bench replay --help)"),
    (pbkv_bench, ["bogus"], "pbkv-bench: No such command 'bogus'. (see: pbkv-bench --help)"),
    (pbkv_sdk, ["stats", "--bogus"], "pbkv-sdk: No such option: --bogus (see: pbkv-sdk stats --help)"),
])
def test_a_usage_error_is_one_line_and_exit_2(monkeypatch, capsys, entry, args, line):
    monkeypatch.setattr(sys, "argv", ["prog", *args])
    assert entry() == 2
    out, err = capsys.readouterr()
    assert out == "" and err == line + "\n"


def test_help_and_no_arguments_keep_their_exit_status(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["prog", "replay", "--help"])
    assert pbkv_bench() == 0
    assert "--horizon" in capsys.readouterr().out
    monkeypatch.setattr(sys, "argv", ["prog"])
    assert pbkv_bench() == 2  # click's no_args_is_help: the help, exit 2 as before
    assert "replay" in capsys.readouterr().out


def test_the_commands_own_errors_are_one_error_line_in_both_clis(monkeypatch, capsys, tmp_path):
    """pbkv-bench's and pbkv-sdk's own refusals start alike, ``error: ...``, on one line: pbkv-sdk's
    had no prefix at all and ``pbkv-bench probe-profile`` said ``probe-profile: error:`` or
    ``probe-profile:`` (the usage errors above keep click's ``cli: message (see: ...)``)."""
    from pbkv_contract.trace import TraceWriter, WorkflowEndRecord

    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    ends = tmp_path / "ends.jsonl"
    with TraceWriter(ends) as w:
        w.write(WorkflowEndRecord(app="a", workflow_id="w", t=1.0))
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    import pbkv_server.loadgen.probe as probe

    async def failed_probe(*args, **kwargs):  # no server is asked
        raise ValueError("probe cold-64 failed: no token")

    monkeypatch.setattr(probe, "run_probes", failed_probe)
    cases = [(pbkv_sdk, ["stats", str(empty)], f"{empty}: empty trace (no records)"),
             (pbkv_sdk, ["validate", str(ends)], f"{ends}: no invocation record, only 1 workflow end(s)"),
             (pbkv_sdk, ["import", "chatdev", str(empty), "--out", str(notes)],
              f"refusing to overwrite {notes}: it is not a PBKV trace"),
             (pbkv_bench, ["probe-profile", "--target", "http://127.0.0.1:9", "--json", str(tmp_path)],
              f"--json {tmp_path}: is a directory"),
             (pbkv_bench, ["probe-profile", "--target", "http://127.0.0.1:9"], "probe cold-64 failed: no token"),
             (pbkv_bench, ["replay", str(tmp_path / "none.jsonl")], "cannot read")]
    for entry, args, said in cases:
        monkeypatch.setattr(sys, "argv", ["prog", *args])
        assert entry() != 0, args
        out, err = capsys.readouterr()
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: ") and said in lines[0], (args, err)
    assert notes.read_text() == "my notes\n"
