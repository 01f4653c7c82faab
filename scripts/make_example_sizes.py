"""Write the sizes tables of docs/example-sizes.md from the examples' ``sizes`` modules.

Each example states its sizes once, in ``examples/<name>/sizes.py`` (:class:`examples.common.sizes.Size`
records: value, what it sizes, source); this script renders them between the markers
``<!-- sizes:<name>:begin -->`` and ``<!-- sizes:<name>:end -->`` of the page, so the table and the
values the app and scenario use cannot drift apart.

Usage::

    .venv/bin/python scripts/make_example_sizes.py           # rewrite the tables in place
    .venv/bin/python scripts/make_example_sizes.py --check   # exit 1 if the page is stale

A page without a marker pair is one ``make_example_sizes: ...`` line and exit status 2.
"""
from __future__ import annotations

import argparse
import importlib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from examples.common.sizes import markdown_table  # noqa: E402

PAGE = ROOT / "docs" / "example-sizes.md"
#: The examples whose ``sizes`` module the page renders, in page order.
EXAMPLES = ("hover_langchain", "swe_autogen", "finance_crewai")


def render(text: str) -> str:
    """``text`` with every example's table replaced by the one its ``sizes`` module gives.

    Raises:
        ValueError: a marker pair is missing.
    """
    for name in EXAMPLES:
        sizes = importlib.import_module(f"examples.{name}.sizes").SIZES
        begin, end = f"<!-- sizes:{name}:begin -->", f"<!-- sizes:{name}:end -->"
        pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.DOTALL)
        if not pattern.search(text):
            raise ValueError(f"{PAGE.name} has no {begin} ... {end} pair")
        text = pattern.sub(lambda _m: f"{begin}\n{markdown_table(sizes)}\n{end}", text)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is stale; write nothing")
    args = parser.parse_args(argv)
    try:
        old = PAGE.read_text(encoding="utf-8")
        new = render(old)
    except (OSError, ValueError) as exc:
        print(f"make_example_sizes: {exc}")
        return 2
    if args.check:
        if new != old:
            print(f"make_example_sizes: {PAGE.relative_to(ROOT)} is stale; run scripts/make_example_sizes.py")
            return 1
        return 0
    if new != old:
        PAGE.write_text(new, encoding="utf-8")
        print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
