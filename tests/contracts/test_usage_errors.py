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
