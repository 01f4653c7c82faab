"""README's line on how long the test command takes, from measured runs of ``scripts/test.sh``.

``scripts/test.sh`` ends with one line (``test-command-timing: commit=... cores=... installs_s=...
suites_s=... total_s=... load1_end=... load15_end=... date=... passed=yes|no``). This script
files such lines in ``docs/test-command-times.json`` and renders README's block between
``<!-- test-time:begin -->`` and ``<!-- test-time:end -->`` from the newest green run on an idle
machine and the newest green run with CPU-bound jobs beside it (issue 35: a user's machine is not
idle, so both are quoted).

Usage::

    bash scripts/test.sh 2>&1 | tee /tmp/t.log
    .venv/bin/python scripts/make_test_time_docs.py --add /tmp/t.log --busy 0   # idle machine
    .venv/bin/python scripts/make_test_time_docs.py --add /tmp/t.log --busy 2   # 2 busy jobs beside
    .venv/bin/python scripts/make_test_time_docs.py --check                     # exit 1 if stale

``--busy N`` says how many other CPU-bound jobs ran beside the run (the log cannot know); the
15-minute load average at the end is quoted as the evidence.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from generated_blocks import BlockError, replace_block, stale_line  # noqa: E402

PAGE = ROOT / "README.md"
RECORDS = ROOT / "docs" / "test-command-times.json"
BLOCK = "test-time"
_LINE = re.compile(r"^test-command-timing: (.*)$", re.MULTILINE)
_INTS = ("cores", "installs_s", "suites_s", "total_s")
_FLOATS = ("load1_end", "load15_end")


def parse_log(text: str) -> dict:
    """The last timing line of a ``scripts/test.sh`` log as a record (ints for seconds and cores,
    floats for loads, strings for the rest).

    Raises:
        ValueError: the log has no timing line, or it lacks a field.
    """
    lines = _LINE.findall(text)
    if not lines:
        raise ValueError("no 'test-command-timing:' line (a log of scripts/test.sh from this commit on?)")
    fields = dict(part.split("=", 1) for part in lines[-1].split() if "=" in part)
    missing = [k for k in ("commit", "date", "passed", *_INTS, *_FLOATS) if k not in fields]
    if missing:
        raise ValueError(f"the timing line lacks {', '.join(missing)}")
    record: dict = {k: fields[k] for k in ("commit", "date", "passed")}
    record.update({k: int(fields[k]) for k in _INTS})
    record.update({k: float(fields[k]) for k in _FLOATS})
    return record


def render_block(records: list[dict]) -> str:
    """The block's Markdown body from filed records (newest last); one sentence per kind of run."""
    green = [r for r in records if r["passed"] == "yes"]
    idle = [r for r in green if r["busy"] == 0]
    busy = [r for r in green if r["busy"] > 0]
    parts = []
    if idle:
        parts.append(f"on an idle machine {_run(idle[-1])}")
    if busy:
        r = busy[-1]
        parts.append(f"with {r['busy']} other CPU-bound job{'s' if r['busy'] > 1 else ''} beside it {_run(r)}")
    if not parts:
        return "No green run of the test command is on record (`scripts/make_test_time_docs.py`).\n"
    return "Measured (`scripts/make_test_time_docs.py`): " + "; ".join(parts) + ".\n"


def render(page: str, records: list[dict]) -> str:
    """``page`` with its test-time block rendered from ``records``."""
    return replace_block(page, BLOCK, render_block(records), str(PAGE.name))


def _run(r: dict) -> str:
    return (f"{_minutes(r['total_s'])} in all (installs {_minutes(r['installs_s'])}, suites "
            f"{_minutes(r['suites_s'])}; {r['cores']} cores, load {r['load15_end']:.1f} over the last 15 min; "
            f"commit {r['commit']}, {r['date']})")


def _minutes(seconds: int) -> str:
    return f"{seconds // 60} min {seconds % 60} s"


def load_records(path: Path = RECORDS) -> list[dict]:
    """The filed records (an empty list when the file does not exist yet)."""
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else []


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status (1: stale with ``--check``, 2: bad input)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--add", type=Path, help="a scripts/test.sh log whose timing line to file")
    p.add_argument("--busy", type=int, help="with --add: other CPU-bound jobs that ran beside it (0 = idle)")
    p.add_argument("--check", action="store_true", help="exit 1 if README's block is stale")
    args = p.parse_args(argv)
    records = load_records()
    if args.add is not None:
        if args.busy is None or args.busy < 0:
            print("make_test_time_docs: --add needs --busy N (0 for an idle machine)", file=sys.stderr)
            return 2
        try:
            record = parse_log(args.add.read_text(encoding="utf-8", errors="replace"))
        except (OSError, ValueError) as exc:
            print(f"make_test_time_docs: {args.add}: {exc}", file=sys.stderr)
            return 2
        records.append({**record, "busy": args.busy})
    page = PAGE.read_text(encoding="utf-8")
    try:
        new = render(page, records)
    except BlockError as exc:
        print(f"make_test_time_docs: {exc}", file=sys.stderr)
        return 2
    if args.check:
        if new != page:
            print(stale_line("make_test_time_docs", PAGE), file=sys.stderr)
            return 1
        return 0
    if args.add is not None:
        RECORDS.write_text(json.dumps(records, indent=1) + "\n", encoding="utf-8")
    PAGE.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
