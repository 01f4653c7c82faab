"""Settings fields that the command lines are generated from (standard library only).

A settings class is a dataclass. Each field that is a command-line option says, in its
``metadata``, what a command line needs beyond the field's name, type and default: the help line
and, where they differ from the defaults, the flag, click's bounds, an environment variable and the
type the command line reads. :func:`option` and :func:`argument` make such fields; the CLIs
(``pbkv_server.cli.settings``) generate their Typer options from them. So a setting is written
once, in its settings class (name, type, default, help), and adding one is one field.

Example::

    @dataclass
    class Settings:
        port: int = option(8000, "TCP port (0 = any free port).")
        json_out: Path | None = option(None, "write the results here", flag="--json")

Standard library only: settings classes live in every layer (``pbkv_server.http.config`` holds
``pbkv-server``'s), and none of them may import the command line's libraries.
"""

from __future__ import annotations

import dataclasses
from dataclasses import MISSING, dataclass
from typing import Any, Sequence

__all__ = ["CliSpec", "option", "argument", "cli_spec", "CLI_KEY"]

#: Key of a field's :class:`CliSpec` in ``dataclasses.Field.metadata``.
CLI_KEY = "pbkv.cli"


@dataclass(frozen=True)
class CliSpec:
    """How a settings field appears on a command line.

    Attributes:
        help: the help line.
        flag: the option's flag when it is not ``--field-name`` (``"--json"`` for ``json_out``).
        argument: a positional argument (required) rather than an option.
        min / max: click's bounds (values outside are refused before the command runs).
        envvar: environment variable click reads when the option is not given.
        cli_type: the type the command line reads when it is not the field's (``--predictor
            APP=SPEC``, repeatable, reads ``list[str]`` into a field the settings class parses).
    """

    help: str
    flag: str | None = None
    argument: bool = False
    min: float | None = None
    max: float | None = None
    envvar: str | None = None
    cli_type: Any = None


def option(default: Any = MISSING, help: str = "", *, default_factory: Any = MISSING, flag: str | None = None,
           min: float | None = None, max: float | None = None, envvar: str | None = None,
           cli_type: Any = None) -> Any:
    """A dataclass field that is a command-line option (arguments as :class:`CliSpec`)."""
    spec = CliSpec(help, flag=flag, min=min, max=max, envvar=envvar, cli_type=cli_type)
    return dataclasses.field(default=default, default_factory=default_factory, metadata={CLI_KEY: spec})


def argument(help: str) -> Any:
    """A required dataclass field that is a positional command-line argument."""
    return dataclasses.field(metadata={CLI_KEY: CliSpec(help, argument=True)})


def cli_spec(field: dataclasses.Field) -> CliSpec | None:
    """The command-line facts of ``field``, or ``None`` for a field that is no option."""
    return field.metadata.get(CLI_KEY)


def list_items(text: str, flag: str, what: str = "value") -> list[str]:
    """The stripped items of a comma-separated option (``--policy lru,pbkv``), read alike by
    every command line: an empty list or an empty item (a doubled or trailing comma) is refused,
    as it would silently drop a value the user meant to give.

    Raises:
        ValueError: one line naming ``flag`` (and ``what`` an item is, for an empty list).
    """
    items = [item.strip() for item in text.split(",")]
    if not any(items):
        raise ValueError(f"{flag} names no {what}")
    if "" in items:
        raise ValueError(f"{flag} {text!r}: item {items.index('') + 1} is empty (a doubled or trailing comma?)")
    return items


def first_repeat(values: list) -> Any:
    """The first value of ``values`` that an earlier one equals, or ``None`` (lists are short)."""
    return next((v for i, v in enumerate(values) if v in values[:i]), None)


def known_items(text: str, known: Sequence[str], flag: str, what: str) -> list[str]:
    """The items of a comma-separated list of names (:func:`list_items`), each one of ``known``
    and none twice (``--policy lru,pbkv``, ``--routers ...``).

    Raises:
        ValueError: one line naming ``flag``: an empty item, a name given twice, or unknown names
            (with the known ones).
    """
    names = list_items(text, flag, what)
    twice = first_repeat(names)
    if twice is not None:
        raise ValueError(f"{flag} {text!r}: {what} {twice!r} is listed twice")
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ValueError(f"unknown {what} {', '.join(map(repr, unknown))} in {flag}; known: {', '.join(known)}")
    return names
