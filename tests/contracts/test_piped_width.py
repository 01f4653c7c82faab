"""A one-line message stays one line when the output is piped or logged (issue 35: rich fell back to
80 columns off a terminal, so ``pbkv-sdk stats bad.jsonl | cat`` broke its message in two).

Run as a subprocess with both streams piped and no ``COLUMNS``, as a user's ``| tee log`` runs it.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from pbkv_contract.extras import PIPED_COLUMNS

REPO = Path(__file__).resolve().parents[2]


def _run_sdk(args: list[str], **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    return subprocess.run([sys.executable, "-c", "from pbkv_sdk.entry import pbkv_sdk; raise SystemExit(pbkv_sdk())",
                           *args], capture_output=True, text=True, cwd=REPO, env={**base, **env}, timeout=120)


def test_a_long_message_is_one_line_when_piped(tmp_path):
    bad = tmp_path / ("a_trace_file_whose_name_is_long_enough_to_pass_eighty_columns_" + "x" * 30 + ".jsonl")
    bad.write_text('{"bad": 1}\nnot json\n', encoding="utf-8")
    done = _run_sdk(["stats", str(bad)])
    out = done.stdout + done.stderr
    line = f"{bad}: no valid trace record (2 invalid line(s); run `pbkv-sdk validate`)"
    assert len(line) > 80 and line + "\n" in out, out


def test_the_users_columns_win(tmp_path):
    """``COLUMNS`` set by the user is kept (the piped default applies only when none is set)."""
    done = _run_sdk(["--help"], COLUMNS="100")
    widths = [len(row) for row in done.stdout.splitlines()]
    assert widths and max(widths) <= 100 < PIPED_COLUMNS, done.stdout
    wide = _run_sdk(["--help"])
    assert max(len(row) for row in wide.stdout.splitlines()) > 100, wide.stdout
