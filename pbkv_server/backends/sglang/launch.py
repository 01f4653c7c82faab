"""``pbkv-server --engine sglang``: run ``python -m sglang.launch_server`` with the PBKV plugin.

The plugin loads itself in the launched server through the ``sglang.srt.plugins`` entry point;
this module only picks the interpreter of the SGLang environment, adds the policy and backend
flags and ``--enable-cache-report`` (so OpenAI ``usage`` carries ``prompt_tokens_details.cached_tokens``,
which ``pbkv-bench live-replay`` and the SDK's users read), sets ``SGLANG_USE_CPU_ENGINE=1`` for
``--device cpu`` (without it SGLang 0.5.23 does not take the CPU path and fails importing vllm),
and waits for the server (forwarding Ctrl-C / SIGTERM). It imports no SGLang, so the main
environment's ``pbkv-server`` can call :func:`main`.
"""

from __future__ import annotations

import os
import sys
from typing import Sequence

from pbkv_server.backends.engine_env import EngineMissing, check_engine_installed, engine_python, run_engine
from pbkv_server.engine.policies import BASELINE_POLICY, available_policies, policy_info, sglang_policy_names

from .settings import BACKEND_NAME, PLUGIN_NAME

__all__ = ["main", "build_command", "build_env", "resolve_policy", "sglang_python", "LaunchError"]

_OWN_FLAGS = ("--radix-eviction-policy", "--radix-cache-backend")
#: Added unless given: SGLang reports cached prompt tokens in ``usage`` only with it.
_CACHE_REPORT_FLAG = "--enable-cache-report"


class LaunchError(ValueError):
    """The launch request is inconsistent (e.g. a flag this launcher sets is also given)."""


def resolve_policy(policy: str) -> tuple[str, bool]:
    """Map a policy name to SGLang's flag value and whether the PBKV backend is needed.

    A plugin policy (``pbkv``, ``pbkv-he``, ``pbkv-lae``, ..., or its engine name such as ``he``)
    uses the PBKV radix cache; a name the registry does not know (``lru``, ``lfu``, ...) is passed
    to SGLang as a built-in policy. The registry's baseline ``lru`` is SGLang's own ``lru``.

    Raises:
        LaunchError: a registered policy that the plugin does not run (the simulator's
            ``pbkv-aggressive``, ``kvflow``, ``belady``, ...).
    """
    plugin = sglang_policy_names()
    if policy in plugin:
        return policy, True
    if policy in available_policies():
        name = policy_info(policy).sglang_name
        if name is not None:
            return name, True
        if policy != BASELINE_POLICY:  # SGLang's own lru is the baseline; the others are ours
            raise LaunchError(f"policy {policy!r} runs in the simulator / sim engine only; with SGLang use "
                              f"one of {sorted(plugin)} or an SGLang built-in such as lru")
    return policy, False


def sglang_python() -> str:
    """Interpreter of the SGLang environment: ``$PBKV_SGLANG_PYTHON``, else the checkout's
    ``.venv-sglang/bin/python`` if present, else the current interpreter."""
    return engine_python("PBKV_SGLANG_PYTHON", ".venv-sglang")


def build_command(policy: str, sglang_args: Sequence[str], python: str | None = None) -> list[str]:
    """The server command line: ``sglang_args``, then the policy flags, then
    ``--enable-cache-report`` unless ``sglang_args`` already has it.

    Raises:
        LaunchError: ``sglang_args`` already sets ``--radix-eviction-policy`` or
            ``--radix-cache-backend`` (this launcher owns them), or a simulator-only policy.
    """
    for arg in sglang_args:
        if arg.split("=", 1)[0] in _OWN_FLAGS:
            raise LaunchError(f"{arg.split('=', 1)[0]} is set by --policy; remove it from the SGLang arguments")
    name, needs_backend = resolve_policy(policy)
    sglang_args = absolute_paths(sglang_args)
    cmd = [python or sglang_python(), "-m", "sglang.launch_server", *sglang_args, "--radix-eviction-policy", name]
    if needs_backend:
        cmd += ["--radix-cache-backend", BACKEND_NAME]
    if _CACHE_REPORT_FLAG not in sglang_args:
        cmd.append(_CACHE_REPORT_FLAG)
    return cmd


#: Flags whose value SGLang reports back (``/get_model_info``): clients read the model's files there.
_PATH_FLAGS = ("--model-path", "--tokenizer-path")


def absolute_paths(sglang_args: Sequence[str], cwd: str | None = None) -> list[str]:
    """``sglang_args`` with a relative ``--model-path`` / ``--tokenizer-path`` that exists here made
    absolute (a hub id such as ``Qwen/Qwen2.5-7B`` is not a local path and stays).

    SGLang reports the path as given; a client in another directory (``pbkv-bench live-compare``
    reads the vocabulary from the model's ``config.json``) could not open a relative one.
    """
    base = cwd or os.getcwd()
    out = list(sglang_args)
    for i, arg in enumerate(out):
        flag, eq, value = arg.partition("=")
        if flag not in _PATH_FLAGS:
            continue
        if not eq:
            if i + 1 >= len(out):
                continue
            i, value = i + 1, out[i + 1]
        path = os.path.join(base, value)
        if value and not os.path.isabs(value) and os.path.exists(path):
            out[i] = f"{flag}={os.path.abspath(path)}" if eq else os.path.abspath(path)
    return out


def build_env(sglang_args: Sequence[str], environ: dict[str, str] | None = None) -> dict[str, str]:
    """The server's environment: ``environ`` (default ``os.environ``) plus what the plugin needs.

    - ``SGLANG_PLUGINS``: a whitelist without ``pbkv`` would silently drop the plugin, so ``pbkv``
      is appended to it.
    - ``SGLANG_USE_CPU_ENGINE=1`` when ``sglang_args`` hold ``--device cpu`` and the variable is
      unset: SGLang 0.5.23 selects its CPU platform only with it.
    """
    env = dict(os.environ if environ is None else environ)
    allowed = env.get("SGLANG_PLUGINS")
    if allowed and PLUGIN_NAME not in {p.strip() for p in allowed.split(",")}:
        env["SGLANG_PLUGINS"] = f"{allowed},{PLUGIN_NAME}"
    if _device(sglang_args) == "cpu":
        env.setdefault("SGLANG_USE_CPU_ENGINE", "1")
    return env


def _device(sglang_args: Sequence[str]) -> str | None:
    """Value of the last ``--device`` flag (``--device X`` or ``--device=X``), else None."""
    device = None
    for i, arg in enumerate(sglang_args):
        if arg == "--device" and i + 1 < len(sglang_args):
            device = sglang_args[i + 1]
        elif arg.startswith("--device="):
            device = arg.split("=", 1)[1]
    return device


def main(policy: str, sglang_args: list[str]) -> int:
    """Launch SGLang with ``policy`` and the plugin; block until it exits.

    Args:
        policy: ``pbkv`` | ``pbkv-he`` | ``pbkv-lae`` | ``he`` | ``lae`` | an SGLang built-in policy.
        sglang_args: arguments for ``sglang.launch_server`` (``--model-path`` etc.).

    Returns:
        The server's exit status (2 for a :class:`LaunchError`, printed to stderr, which includes
        an interpreter without SGLang: the message says to run ``scripts/setup_sglang.sh``).
    """
    try:
        cmd = build_command(policy, sglang_args)
        _check_sglang_installed(cmd[0])
    except LaunchError as exc:
        print(f"pbkv-server: {exc}", file=sys.stderr)
        return 2
    return run_engine(cmd, build_env(sglang_args))


def _check_sglang_installed(python: str) -> None:
    """Fail early, with the fix, when ``python`` is missing or cannot import sglang.

    Without this the launched server dies with a bare "No module named 'sglang'".

    Raises:
        LaunchError: the interpreter does not run or has no ``sglang`` package.
    """
    try:
        check_engine_installed(python, "sglang", "scripts/setup_sglang.sh", ".venv-sglang", "PBKV_SGLANG_PYTHON", "SGLang")
    except EngineMissing as exc:
        raise LaunchError(str(exc)) from None
