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
import os
from pathlib import Path
from typing import Any, Callable

__all__ = ["DataError", "resolve_data_file", "default_data_dir", "cache_dir", "download", "read_json", "read_jsonl"]

#: Repository root (``examples/common/data.py`` -> two levels up from ``examples``).
REPO_ROOT = Path(__file__).resolve().parents[2]


class DataError(RuntimeError):
    """A data file is missing, cannot be downloaded, or is malformed; the message says which and why."""


def default_data_dir() -> Path:
    """``$PBKV_DATA_DIR`` if set, else ``<repo root>/../shared/data``."""
    env = os.environ.get("PBKV_DATA_DIR")
    return Path(env).expanduser() if env else (REPO_ROOT.parent / "shared" / "data")


def cache_dir() -> Path:
    """Download cache for data sets: ``$PBKV_CACHE_DIR/data`` or ``~/.cache/pbkv/data``."""
    base = os.environ.get("PBKV_CACHE_DIR")
    return (Path(base).expanduser() if base else Path.home() / ".cache" / "pbkv") / "data"


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
    for name, kind in fields.items():
        if name not in row:
            raise DataError(f"{path}: row {index} lacks field {name!r}")
        if not isinstance(row[name], kind) or isinstance(row[name], bool) and kind is not bool:
            raise DataError(f"{path}: row {index} field {name!r} has type {type(row[name]).__name__}")
