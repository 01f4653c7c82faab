"""Each console script names the install extra of a missing module in one line and exits 2
(issue 27, item 4: ``pbkv-server`` said only "No module named 'uvicorn'", ``pbkv-predictor``
printed a ModuleNotFoundError traceback).

The module is made missing for a subprocess by a ``sitecustomize`` on ``PYTHONPATH`` whose
meta-path finder refuses it (nothing is uninstalled); the subprocess calls the entry point that
``pyproject.toml`` declares, as the generated console script does.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]

BLOCKER = textwrap.dedent('''
    import os, sys

    _BLOCKED = set(filter(None, os.environ.get("PBKV_TEST_BLOCK", "").split(",")))

    class _Blocker:
        """Refuses the blocked top-level modules, as if they were not installed."""

        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in _BLOCKED:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, _Blocker())
''')


def _run_script(tmp_path: Path, script: str, args: list[str], blocked: str) -> subprocess.CompletedProcess:
    (tmp_path / "sitecustomize.py").write_text(BLOCKER)
    module, _, attr = SCRIPTS[script].partition(":")
    code = (f"import importlib, sys; sys.argv = {[script, *args]!r}; "
            f"sys.exit(getattr(importlib.import_module({module!r}), {attr!r})())")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]), "PBKV_TEST_BLOCK": blocked}
    return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)


def test_the_blocker_blocks(tmp_path):
    """The harness itself: the blocked module cannot be imported in the subprocess."""
    (tmp_path / "sitecustomize.py").write_text(BLOCKER)
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "PBKV_TEST_BLOCK": "numpy"}
    done = subprocess.run([sys.executable, "-c", "import numpy"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "No module named 'numpy'" in done.stderr


@pytest.mark.parametrize("script,args,blocked,extra", [
    ("pbkv-server", ["--port", "0"], "uvicorn", "server"),  # the server starts: the runner imports uvicorn
    ("pbkv-server", ["--port", "0"], "numpy", "server"),
    ("pbkv-predictor", ["--help"], "numpy", "predictor"),  # pbkv_train.cli imports numpy at its top
    ("pbkv-predictor", ["--help"], "torch", "predictor"),
    ("pbkv-bench", ["replay", "trace.jsonl", "--policy", "lru", "--plot", "hits.png"], "matplotlib", "server"),
    ("pbkv-sdk", ["--help"], "rich", ""),  # the SDK needs only the base install
])
def test_a_missing_module_names_the_extra_in_one_line(tmp_path, script, args, blocked, extra):
    if "trace.jsonl" in args:  # a small trace to replay (synth needs no extra)
        made = _run_script(tmp_path, "pbkv-bench", ["synth", "--workflows", "3", "--out", "trace.jsonl"], "")
        assert made.returncode == 0, made.stderr
    done = _run_script(tmp_path, script, args, blocked)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1, done.stderr
    hint = f'pip install -e ".[{extra}]"' if extra else "pip install -e ."
    assert f"'{blocked}'" in lines[0] and hint in lines[0] and script in lines[0], lines[0]
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_our_own_missing_module_is_not_blamed_on_an_extra(tmp_path):
    """A missing PBKV module is a broken checkout: the error stays a traceback, not an install hint."""
    done = _run_script(tmp_path, "pbkv-predictor", ["--help"], "pbkv_train")
    assert done.returncode == 1 and "ModuleNotFoundError" in done.stderr and "pip install" not in done.stderr
