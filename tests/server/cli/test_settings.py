"""Options generated from settings dataclasses (issue 32, "each setting spelled once").

Every option of ``pbkv-server``, ``pbkv-bench replay`` and ``pbkv-bench advise`` is one field of
its settings class, and every option field is one option, with the field's default and help;
the generator itself is checked on a small settings class of its own.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest
import typer
from typer.main import get_command
from typer.testing import CliRunner

from pbkv_contract.settings import argument, cli_spec, option
from pbkv_server.cli import bench, server
from pbkv_server.cli.bench_settings import AdviseSettings, ReplaySettings
from pbkv_server.cli.server import ServeSettings
from pbkv_server.cli.settings import command, flag_of, option_fields
from pbkv_server.http.config import ServerConfig


def _click_command(app: typer.Typer, name: str | None) :
    group = get_command(app)
    return group if name is None else group.commands[name]


def _default(field: dataclasses.Field):
    return field.default_factory() if field.default is dataclasses.MISSING else field.default


@pytest.mark.parametrize("app,name,settings", [
    (server.app, None, ServeSettings),
    (bench.app, "replay", ReplaySettings),
    (bench.app, "advise", AdviseSettings),
])
def test_each_option_is_one_field_with_its_default_and_help(app, name, settings):
    params = {p.name: p for p in _click_command(app, name).params if p.name != "help"}
    fields = {f.name: (f, spec) for f, spec, _ in option_fields(settings)}
    assert set(params) == set(fields)  # one option per field, one field per option
    for key, (field, spec) in fields.items():
        param = params[key]
        if spec.argument:
            assert param.param_type_name == "argument" and param.required, key
            continue
        assert param.default == _default(field), key
        assert param.help == spec.help and spec.help, key
        # the flag a user types: the field's name unless the spec names another (--json, --predictor)
        assert flag_of(field, spec) in param.opts, (key, param.opts)


def test_server_options_are_server_config_fields_and_the_process_settings():
    config = {f.name for f in dataclasses.fields(ServerConfig) if cli_spec(f)}
    serve = {f.name for f, _, _ in option_fields(ServeSettings)}
    assert serve - config == {"threads", "log_level"}
    assert config <= serve
    # engine-only settings stay off the command line
    assert {"horizon", "gamma", "max_batch", "model_name"}.isdisjoint(serve)


@dataclass
class _Toy:
    path: Path = argument("a file")
    count: int = option(2, "how many", min=1)
    names: list[str] = option(default_factory=list, flag="--name", help="repeatable")
    loud: bool = option(True, "shout")
    ratio: Optional[float] = option(None, "a ratio")

    def __post_init__(self) -> None:
        if self.count == 7:
            raise ValueError("seven is refused")


def test_the_generated_command_builds_the_settings_object(tmp_path):
    app = typer.Typer()
    seen: list[_Toy] = []

    def refuse(exc: Exception):
        typer.echo(f"refused: {exc}", err=True)
        raise typer.Exit(2)

    @command(app, _Toy, on_error=refuse)
    def toy(ctx: typer.Context, s: _Toy) -> None:
        """Toy command."""
        seen.append(s)

    runner = CliRunner()
    done = runner.invoke(app, ["x.txt", "--count", "3", "--name", "a", "--name", "b", "--no-loud", "--ratio", "0.5"])
    assert done.exit_code == 0, done.output
    assert seen == [_Toy(Path("x.txt"), 3, ["a", "b"], False, 0.5)]
    done = runner.invoke(app, ["y.txt"])
    assert done.exit_code == 0 and seen[-1] == _Toy(Path("y.txt"))  # the fields' defaults
    done = runner.invoke(app, ["y.txt", "--count", "7"])
    assert done.exit_code == 2 and "refused: seven is refused" in done.output and len(seen) == 2
    assert runner.invoke(app, ["y.txt", "--count", "0"]).exit_code == 2  # click's bound (min=1)
    assert "Toy command." in runner.invoke(app, ["--help"]).output
