"""Output paths every command line checks the same way (standard library only).

A command that reads files and writes others must never overwrite one of its own inputs: a
``--json`` or ``--out`` that names the trace being read would silently replace the user's data
with a summary or a model file.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

__all__ = ["output_problem", "folder_problem", "shared_output", "make_parents", "replace_file", "write_target",
           "special_file", "ANY_JSON", "MAX_RESULT_BYTES"]


def ANY_JSON(document: Any) -> bool:  # noqa: N802 (a constant of output_problem's json_doc)
    """``output_problem(..., json_doc=ANY_JSON)``: any existing JSON document may be replaced."""
    return True


#: An existing file larger than this is never replaced by a JSON results file (it is not read to
#: find out: a results file is kilobytes to a few megabytes, a raw trace can be gigabytes).
MAX_RESULT_BYTES = 256 * 2**20


def output_problem(path: Optional[os.PathLike[str] | str], inputs: Iterable[os.PathLike[str] | str] = (),
                   folder_must_exist: bool = False, writes_trace: bool = False, image: bool = False,
                   json_doc: Optional[Callable[[Any], bool]] = None) -> str | None:
    """Why ``path`` cannot be written as an output file, or ``None`` when it looks writable.

    An existing ``path`` that is not a regular file (a character or block device, a named pipe, a
    socket: :func:`special_file`) is refused, since writing it would replace the node with an
    ordinary file (``--json /dev/full``); so is a symbolic link whose target is missing. A link to a
    regular file is checked as its target, which is what :func:`replace_file` writes (see
    :func:`write_target`).

    Missing parent folders are fine (writers create them) as long as the nearest existing
    ancestor is a folder where a file can be created: probed by creating and removing a temporary
    file there, since ``os.access`` says yes to root in places nothing can be created (``/proc``,
    a read-only mount).

    Args:
        path: the output file (``None``: no output, no problem).
        inputs: files the same command reads; the output must not be one of them (compared
            after resolving links and relative paths, and by inode when both exist).
        folder_must_exist: a missing parent folder is a problem too (a typo in a folder name
            must not create a new tree of folders; the caller does not make them).
        writes_trace: the output is a PBKV trace itself (an import's ``--out``), so an existing
            trace may be replaced; any other output (a summary, a plot, a model) refuses an
            existing non-empty trace, which is someone's recorded traffic: ``replay a.jsonl
            --json b.jsonl`` must not turn the trace ``b.jsonl`` into a 20 KB summary.
        image: the output is a PNG plot, so an existing non-empty file may be replaced only if
            it is a PNG: ``--plot one.json`` must not turn a JSON file (a raw trace another
            format records, a summary) into a picture.
        json_doc: the output is a JSON results file, so an existing non-empty file may be
            replaced only if it holds one JSON document that ``json_doc`` accepts (an earlier
            result of the same command; :data:`ANY_JSON`: any): ``replay --json trace_0590.json``
            must not turn a raw kv-cache-tester trace, a ChatDev log or a CSV into a summary.

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
    if out.is_symlink() and not out.exists():
        return f"is a symbolic link to a missing file ({os.readlink(out)}); give the file itself"
    if (kind := special_file(out)) is not None:
        return f"is {kind}, not a regular file; writing it would replace it (give a regular file path)"
    if out.exists():
        if not os.access(out, os.W_OK):
            return "is not writable"
        if not writes_trace and _holds_trace(out):
            return "is a PBKV trace; writing it would destroy it (give another path)"
        if image and not _holds_png(out):
            return "is a file that is not a PNG image; writing the plot would destroy it (give another path)"
        if json_doc is not None:
            held = _json_held(out)
            if held is _NOT_JSON:
                return "is a file that is not JSON; writing the results would destroy it (give another path)"
            if held is not _NO_DOCUMENT and not json_doc(held):
                return ("holds JSON that is not an earlier result of this command; writing the results would destroy "
                        "it (give another path)")
        return None
    parent = out.absolute().parent
    problem = _creatable(parent)
    if problem is None and folder_must_exist and not parent.is_dir():
        return f"folder {parent} does not exist; create it first"
    return problem


def special_file(path: os.PathLike[str] | str) -> str | None:
    """What the existing ``path`` (links followed) is when it is neither a regular file nor a
    folder ("a character device", "a block device", "a named pipe (fifo)", "a socket"); ``None``
    for a regular file, a folder, or nothing there."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    for test, kind in ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISFIFO, "a named pipe (fifo)"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return None


def write_target(path: os.PathLike[str] | str) -> Path:
    """The file that writing output ``path`` replaces: ``path`` itself, or, when ``path`` is a
    symbolic link (or a chain of them), the file it finally points to.

    Writes go THROUGH links, as ``cp`` and editors do: ``--json link.json`` where ``link.json ->
    results/target.json`` replaces ``results/target.json`` and leaves the link in place (renaming
    a new file over ``link.json`` itself would turn the link into a copy and leave the target stale).
    The temporary file is made beside the target, so the rename stays on one file system.
    """
    out = Path(path)
    return Path(os.path.realpath(out)) if out.is_symlink() else out


def _holds_trace(path: Path) -> bool:
    """Whether the existing file ``path`` holds PBKV trace records (an empty or unreadable file
    does not: nothing recorded would be lost, or the write fails with its own message)."""
    from .trace import looks_like_trace  # trace reads no module of this one: no import cycle

    try:
        return path.is_file() and path.stat().st_size > 0 and looks_like_trace(path)
    except OSError:
        return False


#: The first bytes of every PNG file (PNG specification, section 5.2).
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _holds_png(path: Path) -> bool:
    """Whether the existing file ``path`` may be replaced by a plot: it is empty or a PNG."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(PNG_SIGNATURE))
    except OSError:
        return True  # unreadable: the write fails with its own message
    return not head or head == PNG_SIGNATURE


_NOT_JSON = object()
_NO_DOCUMENT = object()


def _json_held(path: Path) -> Any:
    """The JSON document in the existing file ``path``; ``_NO_DOCUMENT`` when it is empty or
    unreadable (nothing to lose, or the write fails with its own message); ``_NOT_JSON`` when it is
    anything else (not one JSON document, not UTF-8, larger than :data:`MAX_RESULT_BYTES`). A file
    that does not start with ``{`` or ``[`` is read no further than its first 4 KiB: a short one
    may hold a JSON string or number (``"hi"``: JSON, though no command's result)."""
    try:
        size = path.stat().st_size
        if size == 0:
            return _NO_DOCUMENT
        if size > MAX_RESULT_BYTES:
            return _NOT_JSON
        with open(path, "rb") as fh:
            head = fh.read(4096)
            if head.lstrip()[:1] in (b"{", b"["):
                data = head + fh.read()
            elif size <= len(head):  # a short file: a JSON string, number, true/false/null, or not JSON
                data = head
            else:  # a log, a CSV, a gzip shard: not read any further
                return _NOT_JSON
    except OSError:
        return _NO_DOCUMENT
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):  # JSONL (a trace) is "extra data"
        return _NOT_JSON


def make_parents(path: os.PathLike[str] | str) -> None:
    """Create the missing parent folders of output file ``path``.

    Raises:
        NotADirectoryError: an existing ancestor is a file (``os.makedirs`` says "File exists"
            there, which reads as if the output itself existed); the message names it.
        OSError: a folder cannot be created for another reason.
    """
    parent = Path(path).absolute().parent
    ancestor = parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, f"{ancestor} is a file, not a directory")
    parent.mkdir(parents=True, exist_ok=True)


def replace_file(path: os.PathLike[str] | str, write: Callable[[Path], object]) -> None:
    """Write output file ``path`` whole or not at all: its missing folders are made
    (:func:`make_parents`), ``write(tmp)`` writes a file beside it, which is then renamed over
    ``path``. A write that fails or is stopped leaves the previous ``path`` as it was and removes
    ``tmp``, so a results file is never half a file.

    ``tmp`` (``.partial-NAME``, in the same folder: a rename across file systems is not atomic)
    keeps ``path``'s suffix and only it, since writers such as matplotlib's ``savefig`` pick the
    format from the suffix.

    A symbolic link is written through (:func:`write_target`): its target gets the new content and
    the link stays. A device, named pipe or socket is never replaced by an ordinary file: it raises
    ``OSError`` before ``write`` runs (:func:`output_problem` refuses it before any work starts).

    The file keeps the permissions an in-place ``open(path, "w")`` would leave: an existing file
    its own mode (a results file made ``0600`` or ``0644`` by its owner stays so), a new one
    ``0o666`` less the umask, whatever mode ``write`` (or a stale ``tmp``) gave ``tmp``.
    """
    out = write_target(path)
    if (kind := special_file(out)) is not None:
        raise OSError(errno.EINVAL, f"is {kind}, not a regular file; not replaced", str(out))
    make_parents(out)
    tmp = out.with_name(f".partial-{out.name}")
    try:
        tmp.unlink(missing_ok=True)  # a stale one (a link would be written through) is not reused
        try:
            mode = stat.S_IMODE(os.stat(out).st_mode)
        except FileNotFoundError:  # the mode open(path, "w") gives: 0o666 less the umask, applied by the
            os.close(os.open(tmp, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o666))  # kernel (no umask() race)
            mode = stat.S_IMODE(os.stat(tmp).st_mode)
        write(tmp)
        os.chmod(tmp, mode)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)


def folder_problem(folder: os.PathLike[str] | str) -> str | None:
    """Why ``folder`` cannot hold output files (it is not a folder, or nothing can be created in
    it or in its nearest existing ancestor), or ``None``."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        return "exists and is not a folder"
    return _creatable(folder.absolute())


def _creatable(folder: Path) -> str | None:
    """Why no file can be created in ``folder`` (made if missing), probed in its nearest existing ancestor."""
    ancestor = folder
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        return f"{ancestor} is not a directory"
    try:
        fd, probe = tempfile.mkstemp(dir=ancestor, prefix=".pbkv-probe-")
    except OSError as exc:
        return f"cannot be created: {ancestor} is not writable ({exc.strerror or exc})"
    os.close(fd)
    os.unlink(probe)
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
