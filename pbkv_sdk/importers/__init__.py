"""Importers that turn recorded runs of other systems into v1 traces (``pbkv-sdk import``)."""

from __future__ import annotations

import lzma
import os
import tarfile
import zlib

__all__ = ["ARCHIVE_SUFFIXES", "archive_problem"]

#: Names of the tar archives the importers read in place (``logs.tar.gz``, ``traces.tar``, ...).
ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")
#: First bytes of a gzip, bzip2 or xz file: what a compressed archive starts with.
_COMPRESSED = (b"\x1f\x8b", b"BZh", b"\xfd7zXZ\x00")


def archive_problem(src: str | os.PathLike[str]) -> str | None:
    """Why the file ``src``, named or compressed like a tar archive, cannot be read as one
    (``None``: a readable archive, a folder, or a plain file read as one input). A damaged
    ``logs.tar.gz`` was read as one log or one JSON file and said "not JSON" about its bytes.

    Raises:
        OSError: ``src`` cannot be read.
    """
    path = os.fspath(src)
    if os.path.isdir(path):
        return None
    with open(path, "rb") as fh:  # an unreadable file is an OSError here, not below
        head = fh.read(6)
    try:
        if tarfile.is_tarfile(path):
            return None
    except (OSError, EOFError, zlib.error, lzma.LZMAError, tarfile.TarError):
        pass  # a cut gzip stream raises EOFError out of is_tarfile (click then said only "Aborted!")
    if path.lower().endswith(ARCHIVE_SUFFIXES) or head.startswith(_COMPRESSED):
        return (f"{path} is not a readable tar archive (damaged, truncated, or not a tar file); "
                f"give a .tar.gz of the files, a folder of them or one file")
    return None
