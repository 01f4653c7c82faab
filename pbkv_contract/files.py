"""Output paths every command line checks the same way (standard library only).

A command that reads files and writes others must never overwrite one of its own inputs: a
``--json`` or ``--out`` that names the trace being read would silently replace the user's data
with a summary or a model file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Optional

__all__ = ["output_problem", "shared_output"]


def output_problem(path: Optional[os.PathLike[str] | str], inputs: Iterable[os.PathLike[str] | str] = ()) -> str | None:
    """Why ``path`` cannot be written as an output file, or ``None`` when it looks writable.

    Missing parent folders are fine (writers create them) as long as the nearest existing
    ancestor is a writable folder.

    Args:
        path: the output file (``None``: no output, no problem).
        inputs: files the same command reads; the output must not be one of them (compared
            after resolving links and relative paths, and by inode when both exist).

    Returns:
        A short reason ("is a directory", "is the input trace t.jsonl", ...) to print after the
        option and path, or ``None``.
    """
    if path is None:
        return None
    out = Path(path)
    for source in inputs:
        if _same_file(out, Path(source)):
            return f"is the input file {source}; writing it would destroy it"
    if out.is_dir():
        return "is a directory"
    ancestor = out.absolute().parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        return f"{ancestor} is not a directory"
    if not os.access(ancestor, os.W_OK | os.X_OK):
        return f"{ancestor} is not writable"
    if out.exists() and not os.access(out, os.W_OK):
        return "is not writable"
    return None


def shared_output(outputs: Iterable[tuple[str, Optional[os.PathLike[str] | str]]]) -> str | None:
    """Why two outputs of one command cannot be written, when they name the same file; else ``None``.

    Two outputs on one path would be written one after the other, the second silently replacing
    the first (a ``--plot`` PNG over the ``--json`` summary).

    Args:
        outputs: ``(label, path)`` pairs, a label being what the user typed ("--json") or what
            names a file the command writes itself ("--out-dir file bars.png"); ``None`` paths
            (outputs not asked for) are skipped.

    Returns:
        ``"--json x and --plot x are the same file; give each output its own path"`` for the
        first such pair (compared like :func:`output_problem` compares an output and an input),
        or ``None``.
    """
    given = [(label, Path(path)) for label, path in outputs if path is not None]
    for i, (label, path) in enumerate(given):
        for other_label, other in given[:i]:
            if _same_file(path, other):
                return (f"{other_label} {other} and {label} {path} are the same file; "
                        "give each output its own path")
    return None


def _same_file(a: Path, b: Path) -> bool:
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)  # hard links and bind mounts too
    except OSError:
        pass
    return a.resolve() == b.resolve()
