"""Typer commands generated from a settings dataclass: each option is its settings field.

A command is a function ``body(ctx, settings)``; :func:`command` registers it with Typer under a
generated signature whose parameters are the settings class's option fields
(:mod:`pbkv_contract.settings`): the field's name, type and default, the help line, flag, bounds
and environment variable of its :class:`~pbkv_contract.settings.CliSpec`. Typer parses the
command line into those parameters; the wrapper builds the settings object from them and calls the
body. So an option is written once, as a field, and ``--help`` lists the fields in their order
(a subclass's fields after its base's).
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from typing import Any, Callable, NoReturn, TypeVar

import typer

from pbkv_contract.settings import CliSpec, cli_spec

__all__ = ["command", "option_fields", "flag_of"]

S = TypeVar("S")


def option_fields(settings: type) -> list[tuple[dataclasses.Field, CliSpec, Any]]:
    """``(field, spec, type)`` of every option field of the dataclass ``settings``, in field order;
    ``type`` is the field's resolved annotation (string annotations evaluated)."""
    hints = typing.get_type_hints(settings)
    return [(f, spec, hints[f.name]) for f in dataclasses.fields(settings) if (spec := cli_spec(f)) is not None]


def flag_of(field: dataclasses.Field, spec: CliSpec) -> str:
    """The option's flag as a user types it: ``spec.flag`` or ``--field-name``."""
    return spec.flag or "--" + field.name.replace("_", "-")


def command(app: typer.Typer, settings: type[S], *, name: str | None = None,
            on_error: Callable[[Exception], NoReturn] | None = None,
            errors: tuple[type[Exception], ...] = (ValueError,),
            context_settings: dict[str, Any] | None = None) -> Callable[[Callable[[typer.Context, S], None]], Callable]:
    """Decorator: register ``body(ctx, settings)`` as the Typer command ``name`` (default: the
    body's name), with one parameter per option field of ``settings``.

    Args:
        on_error: called with an exception of ``errors`` raised while the settings object is made
            (its ``__post_init__`` checks); it must end the command (``typer.Exit``). ``None``:
            the exception propagates.
    """

    def register(body: Callable[[typer.Context, S], None]) -> Callable:
        fields = option_fields(settings)
        params = [inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context)]
        for field, spec, kind in fields:
            params.append(inspect.Parameter(field.name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                            default=_parameter(field, spec), annotation=spec.cli_type or kind))

        def run(ctx: typer.Context, **values: Any) -> None:
            try:
                made = settings(**values)
            except errors as exc:
                if on_error is None:
                    raise
                on_error(exc)
            body(ctx, made)

        run.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in params}
        run.__name__, run.__doc__ = body.__name__, body.__doc__
        app.command(name, context_settings=context_settings)(run)
        return body

    return register


def _parameter(field: dataclasses.Field, spec: CliSpec) -> Any:
    """The ``typer.Option`` / ``typer.Argument`` of one field."""
    if spec.argument:
        return typer.Argument(..., help=spec.help)
    if field.default is not dataclasses.MISSING:
        default: Any = field.default
    elif field.default_factory is not dataclasses.MISSING:
        default = field.default_factory()
    else:
        default = ...  # a required option
    decls = [spec.flag] if spec.flag else []
    return typer.Option(default, *decls, help=spec.help, min=spec.min, max=spec.max, envvar=spec.envvar)
