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
from typing import List, NoReturn, Optional

import typer

from pbkv_contract.extras import missing_module_line
from pbkv_server.engine.policies import DEFAULT_POLICY
from pbkv_server.http.config import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_HEADER_BYTES,
    DEFAULT_MAX_HEADERS,
    ServerConfig,
)
from pbkv_server.predictors.torch_threads import DEFAULT_TORCH_THREADS, limit_torch_threads

__all__ = ["app", "build_config"]

app = typer.Typer(add_completion=False, help=__doc__, no_args_is_help=False)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def main(
    ctx: typer.Context,
    engine: str = typer.Option("sim", help="sim (embedded engine core, CPU) | sglang (SGLang + PBKV plugin) | vllm (vLLM + PBKV plugin)."),
    policy: str = typer.Option(DEFAULT_POLICY, help="Cache policy (list them with: pbkv-bench policies)."),
    profile: Optional[str] = typer.Option(None, help="Hardware profile (pbkv_server.hardware.profiles); default: its DEFAULT_PROFILE."),
    predictor: List[str] = typer.Option(
        [], help="APP=SPEC or SPEC (all other apps); SPEC = markov | uniform | PATH (trained model). Repeatable."
    ),
    scenario: Optional[str] = typer.Option(None, help="module:ClassName answering apps without a registered scenario."),
    host: str = typer.Option("127.0.0.1", help="Bind address (loopback by default)."),
    port: int = typer.Option(8000, help="TCP port (0 = any free port)."),
    pace: float = typer.Option(0.0, min=0.0, help="0 = as fast as possible; p = sleep p x simulated time."),
    trace_out: Optional[str] = typer.Option(None, help="Write a server-side v1 trace (JSONL, with block_tokens)."),
    hint_token: Optional[str] = typer.Option(None, envvar="PBKV_HINT_TOKEN", help="Shared secret for the hint endpoints."),
    device_tokens: Optional[int] = typer.Option(None, min=1, help="Device KV capacity in tokens (overrides the profile)."),
    host_tokens: Optional[int] = typer.Option(None, min=0, help="Host KV capacity in tokens (overrides the profile and --host-ratio)."),
    host_ratio: Optional[float] = typer.Option(
        None, min=0.0, help="Host KV tier = RATIO x device capacity, 0 = none (default: 2, SGLang HiCache's, with "
                            "--device-tokens; else the profile's host size)."),
    threads: int = typer.Option(DEFAULT_TORCH_THREADS, min=1, help="torch CPU threads for a trained predictor model."),
    idle_retire_s: float = typer.Option(600.0, help="Retire workflows idle this many wall seconds (0 = never)."),
    page_size: int = typer.Option(1, min=1, help="KV page size in tokens (SGLang --page-size): whole pages are cached and evicted."),
    seed: int = typer.Option(0, help="Seed of the scenario's replies."),
    max_body_bytes: int = typer.Option(DEFAULT_MAX_BODY_BYTES, min=1, help="Larger request bodies get 413."),
    max_header_bytes: int = typer.Option(DEFAULT_MAX_HEADER_BYTES, min=1024,
                                         help="Larger request heads get 431 (414 for the request line)."),
    max_headers: int = typer.Option(DEFAULT_MAX_HEADERS, min=1, help="Requests with more header fields get 431."),
    max_prompt_tokens: Optional[int] = typer.Option(
        None, min=1, help="Tokenization budget per request (default: the device KV capacity); longer prompts get 400."),
    log_level: str = typer.Option("info", help="Python log level."),
    lru_guard: bool = typer.Option(
        True, help="Robustness guard of he/pbkv/pbkv-aggressive: LRU order while a ghost LRU would hit more "
                   "(--no-lru-guard: always the predicted order)."),
) -> None:
    """Start the server; extra arguments after ``--`` go to SGLang or vLLM (``--engine sglang|vllm``).

    Every startup failure (bad flag value, unknown profile or predictor, address not bindable,
    unwritable trace) is one ``pbkv-server: ...`` line on stderr and exit status 2.
    """
    level = _log_level(log_level)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if engine == "sglang":
        _launch_sglang(policy, list(ctx.args))
        return
    if engine == "vllm":
        _launch_vllm(policy, list(ctx.args))
        return
    if engine != "sim":
        _fail(f"unknown engine {engine!r}: expected sim, sglang or vllm")
    if ctx.args:
        _fail(f"unexpected arguments {ctx.args} (only --engine sglang / vllm take extra arguments)")
    if not math.isfinite(pace):
        _fail(f"--pace must be a finite number >= 0 (0 = as fast as possible), got {pace:g}")
    if not math.isfinite(idle_retire_s) or idle_retire_s < 0:
        _fail(f"--idle-retire-s must be a finite number >= 0 (0 = never retire), got {idle_retire_s:g}")
    if not host.strip():
        _fail("--host is empty; give an address such as 127.0.0.1 (an empty host would listen on all interfaces)")
    if hint_token is None and "PBKV_HINT_TOKEN" in os.environ:
        hint_token = os.environ["PBKV_HINT_TOKEN"]  # click reads an empty variable as unset
    if hint_token is not None and not hint_token.strip():
        _fail("--hint-token (or PBKV_HINT_TOKEN) is empty; give a secret or leave it unset")
    try:
        config = build_config(
            policy=policy, profile=profile, predictor=predictor, scenario=scenario, host=host, port=port,
            pace=pace, trace_out=trace_out, hint_token=hint_token, device_tokens=device_tokens,
            host_tokens=host_tokens, host_ratio=host_ratio, idle_retire_s=idle_retire_s, seed=seed,
            page_size=page_size, max_body_bytes=max_body_bytes, max_header_bytes=max_header_bytes,
            max_headers=max_headers, max_prompt_tokens=max_prompt_tokens, lru_guard=lru_guard,
        )
        limit_torch_threads(threads, config.predictors.values())  # before a model file loads
        from pbkv_server.http.runner import serve_forever

        serve_forever(config, announce=lambda url: typer.echo(
            f"pbkv-server ({config.policy}, predictors {config.predictors or 'none'}) on {url}/v1", err=False))
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


def build_config(*, policy: str, predictor: List[str], idle_retire_s: float, **fields: object) -> ServerConfig:
    """The :class:`ServerConfig` of the CLI flags.

    Predictive policies without ``--predictor`` get ``markov`` for every app (online, cold start;
    see :class:`ServerConfig`).

    Raises:
        ValueError: a malformed ``--predictor`` value or an invalid setting.
    """
    from pbkv_server.predictors.per_app import parse_predictor_flags

    return ServerConfig(
        policy=policy,
        predictors=parse_predictor_flags(predictor),
        idle_retire_s=idle_retire_s if idle_retire_s != 0 else None,  # 0 = never; ServerConfig rejects < 0
        **fields,  # type: ignore[arg-type]
    )


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
