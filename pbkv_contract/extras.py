"""Console-script entry points that name the missing install extra in one line.

A light install (``pip install -e .``) has the SDK's dependencies only; ``pbkv-server``,
``pbkv-bench`` and ``pbkv-predictor`` need the ``server`` or ``predictor`` extra
(``pyproject.toml``, ``[project.optional-dependencies]``). Without it the CLI used to end in a bare
``No module named 'uvicorn'`` or a ModuleNotFoundError traceback. Each console script now enters
through :func:`run`, which imports its CLI module and runs it; a third-party module that is not
installed, at import or while the command runs, becomes one line on stderr naming the extra to
install, and exit status 2.

Each CLI's launcher lives next to it (``pbkv_server.cli.entry``, ``pbkv_train.entry``,
``pbkv_sdk.entry``) and imports the CLI with an ordinary import statement inside the function it
hands to :func:`run`, so the layer rule (``tests/contracts/test_layers.py``) sees that import;
this module names no module of ours.

:func:`run` also makes a usage error (a bad option value, an unknown option, a missing argument)
one line, ``pbkv-bench: Invalid value for '--horizon': 'x' is not a valid integer. (see:
pbkv-bench replay --help)`` on stderr with exit status 2, where Typer printed a rich box of a
dozen lines and click a usage block: every CLI enters here, so this is the one place.

Standard library only (the line must print when nothing else is installed). The package is not on
PyPI: the hint gives the checkout form first.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable

__all__ = ["EXTRA_OF", "PIPED_COLUMNS", "install_hint", "missing_module_line", "run", "usage_error_line"]

#: Console width when neither stdout nor stderr is a terminal and ``COLUMNS`` is unset. rich
#: falls back to 80 columns there, so a piped or logged one-line message (a path and a reason)
#: broke in two; 240 columns keep such lines whole (error consoles also soft-wrap).
PIPED_COLUMNS = 240

#: Top-level module -> the extra that installs it ("" = the base install). Modules declared by
#: several extras map to the one that the CLIs need them for; anything else falls back to the
#: CLI's own extra.
EXTRA_OF: dict[str, str] = {
    "httpx": "", "typer": "", "rich": "", "click": "",
    "fastapi": "server", "starlette": "server", "uvicorn": "server", "httptools": "server",
    "pydantic": "server", "prometheus_client": "server", "matplotlib": "server", "tokenizers": "server",
    "torch": "predictor",
    "langchain_core": "langchain", "langgraph": "langchain", "langchain_openai": "langchain",
    "autogen_agentchat": "autogen", "autogen_ext": "autogen", "autogen_core": "autogen",
    "crewai": "crewai", "agents": "openai-agents", "openai": "openai-agents",
    "opentelemetry": "otel", "openinference": "otel",
    "sglang": "sglang",
    "pytest": "test", "hypothesis": "test", "schemathesis": "test",
}

#: Our own packages: a missing one of these is a broken checkout, not a missing extra.
_OWN = {"pbkv_contract", "pbkv_sdk", "pbkv_server", "pbkv_train", "examples"}


def install_hint(extra: str) -> str:
    """The install command for ``extra`` ("" = base), checkout form first (pbkv is not on PyPI)."""
    if not extra:
        return 'from a checkout: pip install -e . (a built wheel: pip install "pbkv")'
    return f'from a checkout: pip install -e ".[{extra}]" (a built wheel: pip install "pbkv[{extra}]")'


def missing_module_line(cli: str, exc: BaseException, default_extra: str) -> str | None:
    """One line for a missing third-party module, or ``None`` if ``exc`` is not one.

    Args:
        cli: the console script's name (starts the line).
        exc: the exception caught.
        default_extra: the CLI's own extra, named for a module :data:`EXTRA_OF` does not list.
    """
    if not isinstance(exc, ModuleNotFoundError) or not exc.name:
        return None
    top = exc.name.split(".")[0]
    if top in _OWN:
        return None
    extra = EXTRA_OF.get(top, default_extra)
    what = f'the "{extra}" extra' if extra else "its base dependencies"
    return f"{cli}: Python module {top!r} is not installed; {cli} needs {what}: {install_hint(extra)}"


def run(cli: str, load: Callable[[], Callable[[], Any]], default_extra: str) -> int:
    """Call ``load()`` (which imports the CLI and returns its entry, a Typer app), call the entry,
    and turn a missing module into one line.

    Returns:
        The command's exit status (2 for a missing module).
    """
    _wide_when_piped()
    try:
        result = _invoke(cli, load())
    except ModuleNotFoundError as exc:
        line = missing_module_line(cli, exc, default_extra)
        if line is None:
            raise
        print(line, file=sys.stderr)
        return 2
    return result if isinstance(result, int) else 0


def usage_error_line(cli: str, exc: BaseException) -> str:
    """One line for a click ``ClickException`` (usage errors and ``BadParameter`` included):
    ``cli: message``, naming the subcommand's help when the error has a context."""
    line = f"{cli}: {' '.join(exc.format_message().split())}"  # type: ignore[attr-defined]
    ctx = getattr(exc, "ctx", None)
    if ctx is not None:
        line += f" (see: {ctx.command_path} --help)"  # the program is named cli (_invoke)
    return line


def _wide_when_piped() -> None:
    """Set ``COLUMNS`` to :data:`PIPED_COLUMNS` when no output stream is a terminal and the user set
    none: the CLIs build their rich consoles on import (inside ``load()``), and rich reads the width
    from ``COLUMNS`` then. With either stream on a terminal, rich measures the terminal instead."""
    if "COLUMNS" in os.environ:
        return
    if any(_isatty(stream) for stream in (sys.stdout, sys.stderr)):
        return
    os.environ["COLUMNS"] = str(PIPED_COLUMNS)


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # replaced or closed stream: not a terminal
        return False


def _invoke(cli: str, entry: Callable[..., Any]) -> Any:
    """Run a Typer (click) entry; its exit status, with a click error as one line (:func:`usage_error_line`)."""
    try:
        # not standalone: click returns Exit codes and raises its errors here instead of printing
        # them its own way; the commands return None, so any int returned is an exit status
        return entry(standalone_mode=False, prog_name=cli)
    except Exception as exc:
        # click's classes are matched by name: Typer vendors its own click (typer._click), and
        # this module imports neither
        kinds = {c.__name__ for c in type(exc).__mro__}
        if "ClickException" in kinds:
            if "NoArgsIsHelpError" in kinds:  # no arguments: the help, as standalone
                text = exc.format_message()  # type: ignore[attr-defined]  # empty: Typer printed it
                if text.strip():
                    print(text, file=sys.stderr)
            else:
                print(usage_error_line(cli, exc), file=sys.stderr)
            return exc.exit_code  # type: ignore[attr-defined]
        if "Abort" in kinds:
            print("Aborted!", file=sys.stderr)
            return 1
        raise
