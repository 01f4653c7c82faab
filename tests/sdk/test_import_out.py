"""Every ``pbkv-sdk import`` command guards its --out the same way (one shared check, before any
input is read): an existing file that is not a PBKV trace is refused as ``record`` refuses it, and
so is one of the files the import reads from a SRC folder; an existing trace may be replaced."""

from __future__ import annotations

import gzip
import json

import pytest
from typer.testing import CliRunner

from pbkv_contract.trace import InvocationRecord, TraceWriter, iter_trace
from pbkv_sdk.cli import app, import_app

from .test_cli import CHATDEV_LOG, _inv, _one_line
from .test_import_ghcp import SESSION_A

runner = CliRunner()  # output holds stdout and stderr

KV_TRACE = {"id": "c", "block_size": 4, "requests": [{"t": 0.0, "in": 8, "out": 1, "hash_ids": [1, 2]}]}

#: command -> (importer module, its import function, the name and bytes of one input file in SRC)
IMPORTERS = {
    "chatdev": ("pbkv_sdk.importers.chatdev", "import_chatdev", "a.log", CHATDEV_LOG.encode()),
    "ghcp": ("pbkv_sdk.importers.ghcp", "import_ghcp", "shard-0000.jsonl", (json.dumps(SESSION_A) + "\n").encode()),
    "kv-cache-tester": ("pbkv_sdk.importers.kv_cache_tester", "import_kv_cache_tester", "trace_0590.json",
                        json.dumps(KV_TRACE).encode()),
}


def test_every_import_command_is_covered_here():
    assert {c.name for c in import_app.registered_commands} == set(IMPORTERS)


def _src(tmp_path, command):
    _, _, name, data = IMPORTERS[command]
    src = tmp_path / "src"
    src.mkdir()
    (src / name).write_bytes(data)
    return src


@pytest.mark.parametrize("command", sorted(IMPORTERS))
def test_import_refuses_to_overwrite_a_file_that_is_not_a_trace_before_reading_input(tmp_path, monkeypatch, command):
    module, function, _, _ = IMPORTERS[command]

    def must_not_run(*args, **kwargs):
        raise AssertionError("the input was read")

    monkeypatch.setattr(f"{module}.{function}", must_not_run)
    src = _src(tmp_path, command)
    for text in ("my notes\n", "not json at all", json.dumps({"type": "x"}) + "\n"):
        out = tmp_path / "notes.txt"
        out.write_text(text)
        result = runner.invoke(app, ["import", command, str(src), "-o", str(out)])
        assert result.exit_code == 2, result.output
        assert _one_line(result.output) == f"error: refusing to overwrite {out}: it is not a PBKV trace"
        assert out.read_text() == text


@pytest.mark.parametrize("command", sorted(IMPORTERS))
def test_import_replaces_an_existing_trace(tmp_path, command):
    src = _src(tmp_path, command)
    out = tmp_path / "old.jsonl"
    with TraceWriter(out) as trace:
        trace.write(_inv("old", 0, "a"))
    result = runner.invoke(app, ["import", command, str(src), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "old" not in {r.workflow_id for r in iter_trace(out) if isinstance(r, InvocationRecord)}


@pytest.mark.parametrize("command", sorted(IMPORTERS))
def test_import_refuses_an_out_that_is_one_of_its_input_files_in_src(tmp_path, command):
    src = _src(tmp_path, command)
    _, _, name, data = IMPORTERS[command]
    (src / "sub").mkdir()
    (src / "sub" / name).write_bytes(data)
    for out in (src / name, src / "sub" / name, src / "sub" / ".." / name):
        result = runner.invoke(app, ["import", command, str(src), "-o", str(out)])
        assert result.exit_code == 2, result.output
        assert _one_line(result.output) == (f"error: cannot import: --out {out} is one of the input files in {src}; "
                                            f"writing it would destroy it")
        assert out.read_bytes() == data
    # the single input file itself (the guard that was already there)
    result = runner.invoke(app, ["import", command, str(src / name), "-o", str(src / name)])
    assert result.exit_code == 2 and "is the input file" in _one_line(result.output)
    assert (src / name).read_bytes() == data
