"""SWE-bench Lite (princeton-nlp/SWE-bench_Lite, MIT): 300 real GitHub issues with their gold patches.

The app uses each instance's real problem statement and the real code hunks of its gold patch as
context; the scenario conditions test outcomes on the patch size (lines changed, files touched).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from collections import Counter

from examples.common.data import DataError, TaskList, read_json, require_fields, resolve_data_file, skip_row

__all__ = ["SweTask", "load_swebench", "split_hunks", "patch_size", "LITE_FILE", "ROWS_URL"]

LITE_FILE = "swebench/swe-bench-lite.json"
#: The official copy is a Hugging Face data set; its rows API serves JSON pages of at most 100 rows.
ROWS_URL = "https://datasets-server.huggingface.co/rows"
_DATASET = "princeton-nlp/SWE-bench_Lite"


@dataclass(frozen=True, slots=True)
class SweTask:
    """One SWE-bench Lite instance.

    Attributes:
        instance_id: e.g. ``"django__django-11099"``.
        repo: ``owner/name``.
        problem_statement: the issue text.
        patch: the gold patch (unified diff).
        hunks: the patch cut into per-file hunks (``diff --git`` sections), in order.
        files_changed: number of files the gold patch touches.
        lines_changed: added + removed lines of the gold patch (the task's size).
        fail_to_pass: the tests the fix must turn green.
    """

    instance_id: str
    repo: str
    problem_statement: str
    patch: str
    hunks: tuple[str, ...]
    files_changed: int
    lines_changed: int
    fail_to_pass: tuple[str, ...]


def load_swebench(data_dir: str | os.PathLike[str] | None = None) -> TaskList:
    """Load the 300 SWE-bench Lite test instances in file order.

    Rows with an empty problem statement and rows repeating an earlier instance_id are skipped
    with a warning naming file and row; the returned :class:`TaskList` counts them.

    Raises:
        DataError: the file is missing and cannot be downloaded, or is malformed (not a list,
            missing fields, an empty patch, FAIL_TO_PASS not a JSON list).
    """
    path = resolve_data_file(LITE_FILE, _fetch, data_dir=data_dir)
    return _load(path, path.stat().st_mtime_ns)


def split_hunks(patch: str) -> list[str]:
    """Cut a unified diff into its per-file sections (each starts with ``diff --git``)."""
    parts: list[str] = []
    for line in patch.splitlines(keepends=True):
        if line.startswith("diff --git") or not parts:
            parts.append("")
        parts[-1] += line
    return [p for p in parts if p.strip()]


def patch_size(patch: str) -> int:
    """Added + removed lines of a unified diff (file header lines ``+++``/``---`` excluded)."""
    return sum(
        1 for line in patch.splitlines()
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    )


def _fetch(dest: Path) -> None:
    """Download all rows of the test split through the rows API into one JSON list at ``dest``."""
    import httpx

    rows, offset, total = [], 0, None
    with httpx.Client(timeout=60.0, follow_redirects=True) as client:
        while total is None or offset < total:
            resp = client.get(ROWS_URL, params={"dataset": _DATASET, "config": "default", "split": "test",
                                                "offset": offset, "length": 100})
            resp.raise_for_status()
            page = resp.json()
            total = int(page["num_rows_total"])
            batch = [item["row"] for item in page["rows"]]
            if not batch:
                break
            rows.extend(batch)
            offset += len(batch)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".part")
    tmp.write_text(json.dumps(rows), encoding="utf-8")
    tmp.replace(dest)


@lru_cache(maxsize=4)
def _load(path: Path, _mtime: int) -> TaskList:
    rows = read_json(path)
    if not isinstance(rows, list) or not rows:
        raise DataError(f"{path}: expected a non-empty JSON list of SWE-bench instances")
    out, seen, skipped = [], set(), Counter()
    for i, row in enumerate(rows):
        require_fields(path, i, row, {"instance_id": str, "repo": str, "problem_statement": str, "patch": str})
        if not row["problem_statement"].strip():
            skip_row(path, i, "empty problem statement", f"{row['instance_id']!r} has an empty problem statement", skipped)
            continue
        if row["instance_id"] in seen:
            skip_row(path, i, "duplicate instance_id", f"{row['instance_id']!r} repeats an earlier row (the first is kept)", skipped)
            continue
        hunks = split_hunks(row["patch"])
        if not hunks:
            raise DataError(f"{path}: row {i} ({row['instance_id']}) has an empty patch")
        f2p = row.get("FAIL_TO_PASS", "[]")
        try:
            tests = json.loads(f2p) if isinstance(f2p, str) else f2p
        except json.JSONDecodeError:
            raise DataError(f"{path}: row {i} FAIL_TO_PASS is not a JSON list") from None
        if not isinstance(tests, list):
            raise DataError(f"{path}: row {i} FAIL_TO_PASS is not a list")
        seen.add(row["instance_id"])
        out.append(SweTask(row["instance_id"], row["repo"], row["problem_statement"], row["patch"], tuple(hunks),
                           len(hunks), patch_size(row["patch"]), tuple(map(str, tests))))
    return TaskList(out, path, len(rows), skipped)
