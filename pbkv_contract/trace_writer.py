"""Writing a v1 trace: whole JSON lines appended under a lock (:class:`TraceWriter`).

Split from :mod:`pbkv_contract.trace` (the format, its records and its reader), which re-exports
:class:`TraceWriter`: import it from there.
"""

from __future__ import annotations

import json
import os
import threading
from typing import IO, Any, Protocol

from .files import make_parents

__all__ = ["TraceWriter"]


class _Record(Protocol):
    """What the writer needs of a record (:data:`pbkv_contract.trace.TraceRecord` has it)."""

    def to_json(self) -> dict[str, Any]: ...


class TraceWriter:
    """Append whole JSON lines to a trace file; safe to share between threads.

    Each record is written as one ``write`` of a complete line followed by ``flush``, under a
    lock, so concurrent writers never interleave partial lines and a crash loses at most the line
    being written. A file whose last line was cut off (a crash mid-write) gets a line break before
    the first new record, so that record stays readable and only the cut line is skipped. Use as a
    context manager or call :meth:`close`.

    Raises:
        OSError: the file cannot be created or opened for appending.
    """

    def __init__(self, path: str | os.PathLike[str]):
        self.path = os.fspath(path)
        make_parents(self.path)
        self._fh: IO[str] | None = open(self.path, "a", encoding="utf-8")
        self._lock = threading.Lock()
        if _ends_mid_line(self.path):
            self._fh.write("\n")
            self._fh.flush()

    def write(self, record: _Record) -> None:
        """Append one record as a line. Raises ``ValueError`` after :meth:`close`."""
        line = json.dumps(record.to_json(), separators=(",", ":"), ensure_ascii=False) + "\n"
        with self._lock:
            if self._fh is None:
                raise ValueError("trace writer is closed")
            self._fh.write(line)
            self._fh.flush()

    def close(self) -> None:
        """Flush and close the file; idempotent."""
        with self._lock:
            if self._fh is not None:
                self._fh.close()
                self._fh = None

    def __enter__(self) -> "TraceWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _ends_mid_line(path: str) -> bool:
    """Whether the file is non-empty and its last byte is not a line break."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            if fh.tell() == 0:
                return False
            fh.seek(-1, os.SEEK_END)
            return fh.read(1) != b"\n"
    except OSError:  # not seekable (a FIFO, /dev/stdout): nothing to mend
        return False
