"""Where the examples' data sets live: ``PBKV_DATA_DIR``, ``../shared/data``, or a download cache.

Resolution order for one data file (``relpath`` inside the data directory, e.g.
``hover/hover_dev_release_v1.1.json``):

1. ``$PBKV_DATA_DIR/relpath`` when ``PBKV_DATA_DIR`` is set (it must then hold the file: a set but
   wrong directory is an error, never silently bypassed);
2. ``<repo root>/../shared/data/relpath`` (the layout of a development checkout);
3. ``~/.cache/pbkv/data/relpath`` (or ``$PBKV_CACHE_DIR/data``), downloading it first from its
   public home with :func:`download` when missing.

Every failure raises :class:`DataError` with a message that says which paths were tried and how
to fix it.
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterable

__all__ = ["DataError", "TaskList", "resolve_data_file", "default_data_dir", "cache_dir", "download", "read_json",
           "read_jsonl", "require_fields", "require_text", "skip_row", "describe_tasks", "workflow_id_for"]

log = logging.getLogger(__name__)

#: Repository root (``examples/common/data.py`` -> two levels up from ``examples``).
REPO_ROOT = Path(__file__).resolve().parents[2]


class DataError(RuntimeError):
    """A data file is missing, cannot be downloaded, or is malformed; the message says which and why."""


class TaskList(list):  # type: ignore[type-arg]
    """The usable rows of one data file (a plain list of tasks) plus where they came from.

    Attributes:
        source: the data file.
        rows_read: rows in the file (usable or not).
        skipped: rows left out, counted per reason (``{"empty claim": 2, "duplicate uid": 1}``).
    """

    def __init__(self, items: Iterable[Any], source: Path, rows_read: int, skipped: Counter[str] | None = None):
        super().__init__(items)
        self.source = source
        self.rows_read = rows_read
        self.skipped: Counter[str] = skipped if skipped is not None else Counter()

    def describe(self) -> str:
        """One line such as ``"hover.json: 3 rows read, 1 usable, 2 skipped (2 duplicate uid)"``."""
        line = f"{self.source}: {self.rows_read} rows read, {len(self)} usable"
        if self.skipped:
            why = ", ".join(f"{n} {reason}" for reason, n in sorted(self.skipped.items()))
            line += f", {sum(self.skipped.values())} skipped ({why})"
        return line


def describe_tasks(tasks: Any) -> str:
    """:meth:`TaskList.describe` of ``tasks``, or ``"<n> tasks"`` for any other sequence."""
    return tasks.describe() if isinstance(tasks, TaskList) else f"{len(tasks)} tasks"


def skip_row(path: Path, index: int, reason: str, detail: str, skipped: Counter[str]) -> None:
    """Count row ``index`` of ``path`` as skipped for ``reason``; the first row of each reason gets a
    warning naming file and row (the rest are counted in the load summary, not one line each)."""
    skipped[reason] += 1
    if skipped[reason] == 1:
        log.warning("%s: row %d skipped: %s (later rows with the same problem are only counted)",
                    path, index, detail)


def default_data_dir() -> Path:
    """``$PBKV_DATA_DIR`` if set, else ``<repo root>/../shared/data``."""
    env = os.environ.get("PBKV_DATA_DIR")
    return Path(env).expanduser() if env else (REPO_ROOT.parent / "shared" / "data")


#: Folder under ``~/.cache`` of the downloaded data sets.
CACHE_DIR_NAME = "pbkv"

def cache_dir() -> Path:
    """Download cache for data sets: ``$PBKV_CACHE_DIR/data`` or ``~/.cache/pbkv/data``."""
    base = os.environ.get("PBKV_CACHE_DIR")
    return (Path(base).expanduser() if base else Path.home() / ".cache" / CACHE_DIR_NAME) / "data"


def resolve_data_file(
    relpath: str,
    fetch: Callable[[Path], None] | None,
    *,
    data_dir: str | os.PathLike[str] | None = None,
) -> Path:
    """Return the path of data file ``relpath``, downloading it into the cache if needed.

    Args:
        relpath: path inside the data directory, e.g. ``"financebench/financebench_open_source.jsonl"``.
        fetch: writes the file to the given destination path from its public source (may raise);
            ``None`` when the file has no public download.
        data_dir: explicit data directory; when given, only it is consulted (no fallback).

    Raises:
        DataError: the file is in none of the places and could not be downloaded.
    """
    if data_dir is not None:
        path = Path(data_dir).expanduser() / relpath
        if path.is_file():
            return path
        raise DataError(f"data file {relpath!r} not found in data directory {Path(data_dir)} (looked for {path})")
    if os.environ.get("PBKV_DATA_DIR"):
        path = default_data_dir() / relpath
        if path.is_file():
            return path
        raise DataError(
            f"PBKV_DATA_DIR={os.environ['PBKV_DATA_DIR']} does not hold {relpath!r} (looked for {path}); "
            "fix the variable or unset it to download into the cache"
        )
    tried = [default_data_dir() / relpath, cache_dir() / relpath]
    for path in tried:
        if path.is_file():
            return path
    if fetch is None:
        raise DataError(f"data file {relpath!r} not found (tried {', '.join(map(str, tried))}) and has no download")
    dest = tried[-1]
    try:
        fetch(dest)
    except Exception as exc:  # network, HTTP status, disk: all end in one clear message
        raise DataError(
            f"data file {relpath!r} not found (tried {', '.join(map(str, tried))}) and the download failed: {exc}. "
            "Set PBKV_DATA_DIR to a directory that holds it."
        ) from exc
    return dest


def download(url: str, dest: Path, *, timeout_s: float = 60.0) -> None:
    """Stream ``url`` into ``dest`` atomically (written to ``dest.part`` then renamed).

    Raises:
        httpx.HTTPError: network failure or a non-2xx status.
    """
    import httpx

    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    with httpx.stream("GET", url, follow_redirects=True, timeout=timeout_s) as resp:
        resp.raise_for_status()
        with open(part, "wb") as fh:
            for chunk in resp.iter_bytes():
                fh.write(chunk)
    part.replace(dest)


def read_json(path: Path) -> Any:
    """Parse a JSON file.

    Raises:
        DataError: the file is not valid JSON (the message names the file and position).
    """
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: malformed JSON ({exc})") from None


def read_jsonl(path: Path) -> list[Any]:
    """Parse a JSONL file (blank lines ignored).

    Raises:
        DataError: a line is not valid JSON (the message names the file and line).
    """
    rows = []
    with open(path, encoding="utf-8", errors="strict") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}:{lineno}: malformed JSON line ({exc.msg})") from None
    return rows


def require_fields(path: Path, index: int, row: Any, fields: dict[str, type | tuple[type, ...]]) -> None:
    """Check that ``row`` is an object with each field of the given type.

    Raises:
        DataError: naming the file, the row index and the first bad field.
    """
    if not isinstance(row, dict):
        raise DataError(f"{path}: row {index} is not a JSON object")
    require_text(path, index, row)
    for name, kind in fields.items():
        if name not in row:
            raise DataError(f"{path}: row {index} lacks field {name!r}")
        if not isinstance(row[name], kind) or isinstance(row[name], bool) and kind is not bool:
            raise DataError(f"{path}: row {index} field {name!r} has type {type(row[name]).__name__}")


def require_text(path: Path, index: int, value: Any, where: str = "") -> None:
    """Check that every string inside ``value`` (nested lists/objects too) can be encoded as UTF-8.

    JSON may escape lone surrogates (``"\\ud800"``); Python decodes them into strings that fail
    later, far from the data file (prompt hashing, HTTP bodies), so they are caught here.

    Raises:
        DataError: naming the file, the row index and the field path, e.g. ``evidence[0].evidence_text``.
    """
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            field = f" field {where}" if where else ""
            raise DataError(f"{path}: row {index}{field} holds text that is not valid Unicode "
                            f"(lone surrogate {value[exc.start]!r} at character {exc.start})") from None
    elif isinstance(value, dict):
        for key, item in value.items():
            require_text(path, index, key, where)
            require_text(path, index, item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, list):
        for j, item in enumerate(value):
            require_text(path, index, item, f"{where}[{j}]")


def workflow_id_for(task_id: str) -> str:
    """A valid hint workflow id derived from a task's id (same task, same id in every run).

    The embedded server seeds each scenario reply with the workflow id; a random id per run would
    make the app's behaviour (rounds, retries) and hence every figure change from run to run.
    Characters outside ``[A-Za-z0-9._:-]`` become ``_``; at most 128 characters (protocol v1).
    """
    from pbkv_contract.hints import workflow_id_from

    return workflow_id_from(task_id, empty="task")
