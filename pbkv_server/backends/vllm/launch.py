"""``pbkv-server --engine vllm``: run ``vllm serve`` with the PBKV plugin.

The plugin loads itself in every vLLM process through the ``vllm.general_plugins`` entry point;
this module only picks the interpreter of the vLLM environment and adds what the plugin needs:

- environment: ``PBKV_VLLM_POLICY`` (the policy), ``PBKV_VLLM_CONTROL`` (a fresh socket path in a
  private temporary folder, for workflow ends), ``pbkv`` appended to a ``VLLM_PLUGINS`` whitelist;
  ``PBKV_VLLM_CONFIG`` is passed through as set by the caller;
- flags: ``--enable-prefix-caching``, ``--middleware pbkv_server.backends.vllm.http.PBKVMiddleware``
  (hints from headers and ``custom_params.pbkv``, the end route) and, unless the caller gives a
  ``--kv-transfer-config`` of their own (e.g. a ``MultiConnector`` with the CPU offload tier,
  ``eviction_policy: pbkv``), ``--kv-transfer-config {"kv_connector": "PBKVConnector", ...}``.

A policy the registry does not know, or the baseline ``lru``, runs vLLM unchanged (its own LRU).
It imports no vLLM, so the main environment's ``pbkv-server`` can call :func:`main`.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from typing import Sequence

from pbkv_server.backends.engine_env import EngineMissing, check_engine_installed, engine_python, run_engine
from pbkv_server.engine.policies import BASELINE_POLICY, available_policies, policy_info, sglang_policy_names

from .settings import CONNECTOR_NAME, ENV_CONTROL, ENV_POLICY, PLUGIN_NAME

__all__ = ["main", "build_command", "build_env", "resolve_policy", "vllm_python", "LaunchError", "MIDDLEWARE"]

#: The ``--middleware`` value of the plugin's ASGI middleware.
MIDDLEWARE = "pbkv_server.backends.vllm.http.PBKVMiddleware"
_TRANSFER_FLAG = "--kv-transfer-config"


class LaunchError(ValueError):
    """The launch request is inconsistent (a simulator-only policy, no vLLM installed...)."""


def resolve_policy(policy: str) -> str | None:
    """The plugin policy to run, or ``None`` for vLLM's own order (``lru`` or a name unknown to
    the registry).

    Raises:
        LaunchError: a registered policy that the plugin does not run (``pbkv-aggressive``, ...).
    """
    plugin = sglang_policy_names()
    if policy in plugin:
        return policy
    if policy in available_policies():
        name = policy_info(policy).sglang_name
        if name is not None:
            return name
        if policy != BASELINE_POLICY:
            raise LaunchError(f"policy {policy!r} runs in the simulator / sim engine only; with vLLM use "
                              f"one of {sorted(plugin)} or lru (vLLM's own order)")
    return None


def vllm_python() -> str:
    """Interpreter of the vLLM environment: ``$PBKV_VLLM_PYTHON``, else the checkout's
    ``.venv-vllm/bin/python`` if present, else the current interpreter."""
    return engine_python("PBKV_VLLM_PYTHON", ".venv-vllm")


def _has_flag(args: Sequence[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in args)


def build_command(policy: str, vllm_args: Sequence[str], python: str | None = None) -> list[str]:
    """The server command line: ``vllm serve`` with ``vllm_args`` and the plugin's flags.

    Raises:
        LaunchError: a simulator-only policy.
    """
    name = resolve_policy(policy)
    cmd = [python or vllm_python(), "-m", "vllm.entrypoints.cli.main", "serve", *vllm_args]
    if name is None:
        return cmd
    if not _has_flag(vllm_args, "--enable-prefix-caching") and not _has_flag(vllm_args, "--no-enable-prefix-caching"):
        cmd.append("--enable-prefix-caching")
    cmd += ["--middleware", MIDDLEWARE]
    if not _has_flag(vllm_args, _TRANSFER_FLAG):
        cmd += [_TRANSFER_FLAG, json.dumps({"kv_connector": CONNECTOR_NAME, "kv_role": "kv_both"})]
    return cmd


def build_env(policy: str, control_path: str | None, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The server's environment: ``environ`` (default ``os.environ``) plus the plugin's variables
    (module docstring); with vLLM's own order only the ``VLLM_PLUGINS`` fix is applied."""
    env = dict(os.environ if environ is None else environ)
    allowed = env.get("VLLM_PLUGINS")
    if allowed and PLUGIN_NAME not in {p.strip() for p in allowed.split(",")}:
        env["VLLM_PLUGINS"] = f"{allowed},{PLUGIN_NAME}"
    name = resolve_policy(policy)
    if name is None:
        env.pop(ENV_POLICY, None)
        return env
    env[ENV_POLICY] = name
    if control_path is not None:
        env[ENV_CONTROL] = control_path
    return env


def main(policy: str, vllm_args: list[str]) -> int:
    """Launch vLLM with ``policy`` and the plugin; block until it exits.

    Returns:
        The server's exit status (2 for a :class:`LaunchError`, printed to stderr, which includes
        an interpreter without vLLM: the message says to run ``scripts/setup_vllm.sh``).
    """
    folder = tempfile.mkdtemp(prefix="pbkv-vllm-")
    try:
        try:
            cmd = build_command(policy, vllm_args)
            _check_vllm_installed(cmd[0])
        except LaunchError as exc:
            print(f"pbkv-server: {exc}", file=sys.stderr)
            return 2
        return run_engine(cmd, build_env(policy, os.path.join(folder, "control.sock")))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _check_vllm_installed(python: str) -> None:
    """Fail early, with the fix, when ``python`` is missing or has no vLLM.

    Raises:
        LaunchError: the interpreter does not run or has no ``vllm`` package.
    """
    try:
        check_engine_installed(python, "vllm", "scripts/setup_vllm.sh", ".venv-vllm", "PBKV_VLLM_PYTHON", "vLLM")
    except EngineMissing as exc:
        raise LaunchError(str(exc)) from None
