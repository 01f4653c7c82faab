"""Generated blocks in docs pages: replace one, and the write-or-``--check`` command around it.

A generated block is the text between ``<!-- name:begin -->`` and ``<!-- name:end -->`` in a
Markdown page; a ``scripts/make_*_docs.py`` script renders its body from code or runs, and
``tests/docs/test_figures.py`` does not scan it for typed figures. Shared by
``make_coding_agent_docs.py``, ``make_profile_docs.py``, ``make_alternatives_docs.py`` and the scripts that render a block from a JSON (:func:`json_block_main`).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable

__all__ = ["BlockError", "markers", "replace_block", "write_or_check", "stale_line", "load_json", "json_block_main"]


class BlockError(ValueError):
    """A page without exactly one well-ordered pair of a block's markers (the message says which)."""


def markers(name: str) -> tuple[str, str]:
    """The begin and end markers of block ``name`` (``"alternatives:swe"``, ``"profiles"``)."""
    return f"<!-- {name}:begin -->", f"<!-- {name}:end -->"


def replace_block(page: str, name: str, body: str, where: str) -> str:
    """``page`` with block ``name``'s contents replaced by ``body`` (which ends with a newline).

    Raises:
        BlockError: ``page`` (called ``where`` in the message) lacks one begin marker followed by
            one end marker.
    """
    begin, end = markers(name)
    if page.count(begin) != 1 or page.count(end) != 1 or page.index(begin) > page.index(end):
        raise BlockError(f"{where} needs one {begin} ... {end} block")
    head, rest = page.split(begin)
    return f"{head}{begin}\n{body}{end}{rest.split(end, 1)[1]}"


def write_or_check(script: str, page: Path, render: Callable[[str], str], description: str,
                   argv: list[str] | None = None) -> int:
    """The command line of a script that rewrites ``page`` as ``render(page text)``.

    ``--check`` writes nothing and exits 1, with one line naming the page and the command that
    rewrites it (:func:`stale_line`), when the page differs from its rendering. A page whose
    markers are wrong prints one line, prefixed with ``script``, and exits 2.
    """
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--check", action="store_true", help="exit 1 if the block is stale")
    args = p.parse_args(argv)
    text = page.read_text(encoding="utf-8")
    try:
        new = render(text)
    except BlockError as exc:
        print(f"{script}: {exc}", file=sys.stderr)
        return 2
    if args.check:
        if new != text:
            print(stale_line(script, page), file=sys.stderr)
            return 1
        return 0
    page.write_text(new, encoding="utf-8")
    return 0


def stale_line(script: str, page: Path) -> str:
    """The one line ``--check`` prints for a stale ``page``: which page, and the command that rewrites it."""
    root = Path(__file__).resolve().parent.parent
    try:
        shown = page.resolve().relative_to(root)
    except ValueError:
        shown = page
    return f"{script}: {shown} is stale; rewrite it with: python scripts/{script}.py"


def load_json(path: Path, error: type[Exception] = BlockError) -> Any:
    """``path``'s JSON; a missing or unreadable file raises ``error`` with one line saying so."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise error(f"{path}: not readable JSON ({exc})") from None


def json_block_main(script: str, page: Path, render: Callable[[str], str], description: str,
                    argv: list[str] | None, errors: tuple[type[Exception], ...]) -> int:
    """:func:`write_or_check` of a page rendered from a JSON (:func:`load_json`): an exception of
    ``errors`` from ``render`` is reported as a page without its block is, one line and exit 2."""
    def _render(text: str) -> str:
        try:
            return render(text)
        except errors as exc:
            raise BlockError(str(exc)) from None

    return write_or_check(script, page, _render, description, argv)
