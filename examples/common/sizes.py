"""One record per size of an example: its value, what it sizes and where the value comes from.

Each example's ``sizes`` module lists its :class:`Size` records; the app and the scenario read
their values from there, and ``scripts/make_example_sizes.py`` writes the docs table
(``docs/example-sizes.md``) from the same records, so a value is stated once.

A ``source`` is a public reference (an address, and what it says), or, where none was found,
a sentence that says so and that the app's own value is kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

__all__ = ["Size", "NOT_FOUND", "SAME_AS", "markdown_table"]

#: Opening of the ``source`` of a size for which no public figure was found.
NOT_FOUND = "No public figure found"
#: Opening of the ``source`` of a size whose source is the one of an earlier row (named after it).
SAME_AS = "As for"


@dataclass(frozen=True, slots=True)
class Size:
    """One size of an example.

    Attributes:
        name: the parameter's name (the Python name that holds it, or a short label).
        value: the value the example uses (a number, a pair ``(lo, hi)``, a name).
        unit: unit of ``value`` (``"tokens"``, ``"passages"``, ...; ``""`` for names).
        what: what the parameter sizes, in a few words.
        source: where the value comes from (see the module docstring).
        is_range: ``value`` is a ``(lo, hi)`` range (shown ``lo-hi``; other tuples show ``a, b``).
    """

    name: str
    value: Any
    unit: str
    what: str
    source: str
    is_range: bool = False

    def shown(self) -> str:
        """``value`` with its unit, as the docs table shows it."""
        if isinstance(self.value, tuple):
            text = f"{self.value[0]}-{self.value[1]}" if self.is_range else ", ".join(map(str, self.value))
        else:
            text = str(self.value)
        return f"{text} {self.unit}".strip()


def markdown_table(sizes: Sequence[Size]) -> str:
    """The docs table of ``sizes``: parameter, value, what it sizes, source (one row each)."""
    rows = ["| parameter | value | what it sizes | source |", "|---|---|---|---|"]
    for s in sizes:
        cells = [f"`{s.name}`", s.shown(), s.what, s.source]
        rows.append("| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |")
    return "\n".join(rows)
