"""What the replay benchmark scripts share at their command line: bad input is one line, not a traceback.

``alternatives_table.py`` and ``policy_matrix.py`` are run on users' own traces (README, "Compared
with what users run today"), so a mistyped path or option must read like the ``pbkv-bench``
errors: ``error: ...`` on one line and exit status 2, with no file written.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

from pbkv_contract.files import ANY_JSON, output_problem, replace_file
from pbkv_contract.trace import TraceFormatError
from pbkv_server.sim.simulator import SimulationError

__all__ = ["OneLineParser", "run_script", "check_output", "write_json", "write_text", "git_commit"]


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line (``error: ...``, exit status 2), without the
    usage block argparse prints first: the scripts' other bad input (:func:`run_script`) and
    ``pbkv-bench``'s read the same way, and ``--help`` still shows the usage."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"error: {message}\n")


def run_script(main: Callable[[Optional[list[str]]], int], argv: Optional[list[str]] = None) -> int:
    """Run a script's ``main(argv)``; an unreadable trace, an unknown name or a value the simulator
    refuses (``OSError``, ``TraceFormatError``, ``KeyError``, ``ValueError``, ``SimulationError``)
    is printed as one ``error:`` line and returns 2. Other exceptions propagate (they are bugs)."""
    try:
        return main(argv)
    except KeyError as exc:  # the registries' KeyErrors carry a whole sentence
        message = exc.args[0] if exc.args else exc
    except (OSError, TraceFormatError, ValueError, SimulationError) as exc:
        message = exc
    print(f"error: {message}", file=sys.stderr)
    return 2


def check_output(parser: argparse.ArgumentParser, json_out: Optional[Path], inputs: Iterable[str],
                 json_doc: Callable[[Any], bool] = ANY_JSON) -> None:
    """Stop (``parser.error``, exit 2) before any replay when ``--json`` names one of the input
    traces (writing it would destroy the trace), a directory, a device or fifo, or a file that is
    not JSON (a raw trace, a log) or, with ``json_doc`` (a script's recogniser of its own earlier
    result), JSON that ``json_doc`` does not accept (another command's result)."""
    if json_out is None:
        return
    problem = output_problem(json_out, list(inputs), json_doc=json_doc)
    if problem:
        parser.error(f"--json {json_out}: {problem}")


def write_json(path: Path, data) -> None:
    """Replace ``path`` with ``data`` as JSON at once (its folders made, written aside, then
    renamed, as every pbkv-bench output): a run stopped mid-write keeps the last file whole."""
    replace_file(path, lambda tmp: tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8"))


def write_text(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` (UTF-8) as :func:`write_json` does, for a script whose file
    keeps its own layout (key order, no trailing newline) that ``write_json`` would change."""
    replace_file(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def git_commit() -> str:
    """The checkout's short commit (a benchmark's figures belong to it), or "unknown" outside git."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True,
                             cwd=Path(__file__).resolve().parent)
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
