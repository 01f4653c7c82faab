"""Where an inference engine's own virtual environment is, shared by the engine launchers.

SGLang and vLLM each run from their own environment (``.venv-sglang``, ``.venv-vllm`` at the
checkout root, made by ``scripts/setup_sglang.sh`` / ``scripts/setup_vllm.sh``), because their
pinned dependencies cannot share ``.venv``. The launchers find that interpreter and check, before
starting anything, that it has the engine, so a missing install is one line with the fix.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

__all__ = ["CHECKOUT_ROOT", "engine_python", "check_engine_installed", "run_engine", "EngineMissing"]

#: The checkout root: this file is ``<root>/pbkv_server/backends/engine_env.py``.
CHECKOUT_ROOT = Path(__file__).resolve().parents[2]


class EngineMissing(Exception):
    """The engine's interpreter does not run or lacks the engine; the message says the fix."""


def engine_python(env_var: str, venv: str) -> str:
    """``$env_var`` if set, else ``<checkout>/<venv>/bin/python`` if present, else this interpreter."""
    env = os.environ.get(env_var)
    if env:
        return env
    local = CHECKOUT_ROOT / venv / "bin" / "python"
    return str(local) if local.exists() else sys.executable


def check_engine_installed(python: str, module: str, setup_script: str, venv: str, env_var: str,
                           display: str) -> None:
    """Raise :class:`EngineMissing` unless ``python`` runs and can find ``module``.

    The probe is a subprocess (the engine lives in another environment than this process); 60 s
    bounds an interpreter that hangs at start.
    """
    probe = f"import importlib.util, sys; sys.exit(0 if importlib.util.find_spec({module!r}) else 3)"
    try:
        code = subprocess.run([python, "-c", probe], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              timeout=60).returncode
    except (OSError, subprocess.TimeoutExpired) as exc:
        code, why = None, f"cannot run {python} ({exc})"
    if code == 0:
        return
    if code is not None:
        why = f"{module} is not installed for {python}"
    raise EngineMissing(f"{why}; run {setup_script} (creates {venv}) or set {env_var} "
                        f"to an interpreter that has {display}")


def run_engine(cmd: list[str], env: dict[str, str]) -> int:
    """Run the engine server in the foreground until it exits; its exit status.

    SIGINT and SIGTERM are passed on to the server (so Ctrl-C or a supervisor's stop shuts it down
    cleanly instead of orphaning it) and this process's handlers are put back afterwards.
    """
    proc = subprocess.Popen(cmd, env=env)

    def forward(signum, _frame):
        proc.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        return proc.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
