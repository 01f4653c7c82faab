"""``pbkv-server``: OpenAI-compatible server with PBKV caching (``docs/architecture.md``, "Live server").

``--engine sim`` (default) serves from the embedded engine core with the hardware cost model and
answers from a scenario; ``--engine sglang`` hands over to the SGLang plugin's launcher
(``pbkv_server.backends.sglang.launch:main``), passing everything after ``--`` to SGLang;
``--engine vllm`` does the same with the vLLM plugin's (``pbkv_server.backends.vllm.launch:main``).
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass
from typing import NoReturn

import typer

from pbkv_contract.extras import missing_module_line
from pbkv_contract.settings import option
from pbkv_server.cli.settings import command
from pbkv_server.http.config import MAX_PACE, ServerConfig
from pbkv_server.predictors.torch_threads import DEFAULT_TORCH_THREADS, limit_torch_threads

__all__ = ["app", "main", "ServeSettings"]

app = typer.Typer(add_completion=False, help=__doc__, no_args_is_help=False)


@dataclass
class ServeSettings(ServerConfig):
    """``pbkv-server``'s settings: :class:`ServerConfig` (whose option fields are the server's
    flags) and the two that belong to the process, not to the server.

    With ``--engine sglang`` or ``vllm`` nothing is checked here: the plugin's launcher reads the
    policy and hands the rest to the inference server.
    """

    threads: int = option(DEFAULT_TORCH_THREADS, "torch CPU threads for a trained predictor model.", min=1)
    log_level: str = option("info", "Python log level.")

    def __post_init__(self) -> None:
        if self.engine in LAUNCHERS:
            return
        if self.engine != "sim":
            raise ValueError(f"unknown engine {self.engine!r}: expected sim, sglang or vllm")
        # The command line's own wording first (these values never reach ServerConfig's checks).
        if not (math.isfinite(self.pace) and 0 <= self.pace <= MAX_PACE):
            raise ValueError(f"--pace must be a finite number from 0 to {MAX_PACE:g} (0 = as fast as possible), "
                             f"got {self.pace:g}")
        idle = self.idle_retire_s
        if idle is not None and (not math.isfinite(idle) or idle < 0):
            raise ValueError(f"--idle-retire-s must be a finite number >= 0 (0 = never retire), got {idle:g}")
        if not self.host.strip():
            raise ValueError("--host is empty; give an address such as 127.0.0.1 (an empty host would listen on all "
                             "interfaces)")
        if self.hint_token is None and "PBKV_HINT_TOKEN" in os.environ:
            self.hint_token = os.environ["PBKV_HINT_TOKEN"]  # click reads an empty variable as unset
        if self.hint_token is not None and not self.hint_token.strip():
            raise ValueError("--hint-token (or PBKV_HINT_TOKEN) is empty; give a secret or leave it unset")
        super().__post_init__()


def _settings_error(exc: Exception) -> NoReturn:
    _fail(_missing_extra(exc) or str(exc))


@command(app, ServeSettings, on_error=_settings_error, errors=(ValueError, ImportError),
         context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def main(ctx: typer.Context, settings: ServeSettings) -> None:
    """Start the server; extra arguments after ``--`` go to SGLang or vLLM (``--engine sglang|vllm``).

    Every startup failure (bad flag value, unknown profile or predictor, address not bindable,
    unwritable trace) is one ``pbkv-server: ...`` line on stderr and exit status 2.
    """
    logging.basicConfig(level=_log_level(settings.log_level), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if settings.engine in LAUNCHERS:
        return LAUNCHERS[settings.engine](settings.policy, list(ctx.args))
    if ctx.args:
        _fail(f"unexpected arguments {ctx.args} (only --engine sglang / vllm take extra arguments)")
    try:
        limit_torch_threads(settings.threads, settings.predictors.values())  # before a model file loads
        from pbkv_server.http.runner import serve_forever

        serve_forever(settings, announce=lambda url: typer.echo(
            f"pbkv-server ({settings.policy}, predictors {settings.predictors or 'none'}) on {url}/v1", err=False))
    except (ValueError, ImportError) as exc:
        _fail(_missing_extra(exc) or str(exc))
    except OSError as exc:  # the runner's bind error already names the address; a file error names its path
        reason = exc.strerror or str(exc)
        _fail(f"{exc.filename}: {reason}" if exc.filename else reason)


def _fail(message: str) -> NoReturn:
    typer.echo(message if message.startswith("pbkv-server: ") else f"pbkv-server: {message}", err=True)
    raise typer.Exit(2)


def _missing_extra(exc: BaseException) -> str | None:
    """The one line naming the extra for a missing module (``None``: not a missing module)."""
    return missing_module_line("pbkv-server", exc, "server")


def _log_level(name: str) -> int:
    level = logging.getLevelNamesMapping().get(name.strip().upper())
    if level is None:
        _fail(f"unknown --log-level {name!r}; expected one of debug, info, warning, error, critical")
    return level


def _launch_sglang(policy: str, sglang_args: list[str]) -> None:
    try:
        from pbkv_server.backends.sglang.launch import main as launch
    except ImportError as exc:
        typer.echo(
            f"pbkv-server: --engine sglang needs the SGLang plugin and sglang installed "
            f"(pip install 'pbkv[sglang]'; see README, SGLang): {exc}",
            err=True,
        )
        raise typer.Exit(2) from None
    code = launch(policy, sglang_args)
    if code:  # the SGLang server's exit status (2 for a launch error it already printed)
        raise typer.Exit(code)


def _launch_vllm(policy: str, vllm_args: list[str]) -> None:
    from pbkv_server.backends.vllm.launch import main as launch  # imports no vLLM

    code = launch(policy, vllm_args)
    if code:  # the vLLM server's exit status (2 for a launch error it already printed)
        raise typer.Exit(code)


#: ``--engine`` values handed to a plugin's launcher: ``launch(policy, extra_args)``.
LAUNCHERS = {"sglang": _launch_sglang, "vllm": _launch_vllm}
