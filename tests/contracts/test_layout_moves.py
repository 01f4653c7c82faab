"""The move table (``scripts/layout_moves.txt``) and its rewriter (``scripts/apply_layout_moves.py``).

The table must describe the tree as it is (every new module exists, no old one is left), and the
rewriter must turn a file written before the move into one that imports the new modules, without
touching attributes or words that only look like module names, and change nothing on a second run.
"""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _load_script():
    spec = importlib.util.spec_from_file_location("apply_layout_moves", ROOT / "scripts" / "apply_layout_moves.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


moves = _load_script()
TABLE = moves.load_table()


def _exists(dotted: str) -> bool:
    base = ROOT / dotted.replace(".", "/")
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def test_the_table_describes_the_tree():
    assert not [new for new in TABLE.values() if not _exists(new)], "new modules missing"
    # `pbkv_server.cli` was a module and is now a package: it exists, as the new home of cli.server
    left = [old for old in TABLE if _exists(old) and not any(new.startswith(old + ".") for new in TABLE.values())]
    assert not left, f"old modules still present: {left}"


def test_no_python_file_imports_an_old_module():
    old = set(TABLE) - {o for o in TABLE if any(n.startswith(o + ".") for n in TABLE.values())}
    found = []
    folders = ("pbkv_contract", "pbkv_sdk", "pbkv_server", "pbkv_train", "examples", "tests", "benchmarks", "scripts")
    for path in (p for folder in folders for p in sorted((ROOT / folder).rglob("*.py"))):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else [])
            found += [f"{path.relative_to(ROOT)}:{node.lineno}: {n}" for n in names if n in old]
    assert not found, "\n".join(found)


BEFORE = '''from pbkv_server import cli
from pbkv_server import bench_cli, sim
from pbkv_server.sim.profiles import get_profile
import predictor.serving
from predictor import serving  # lazy
def f(self):
    from .profiles import DEFAULT_PROFILE
    return self.predictor.train, "pbkv_server.cli:app", "predictor.train.fit"
# see pbkv_server/local_cluster.py, predictor/train.py, tests/predictor/, the predictor extra
'''
AFTER = '''from pbkv_server.cli import server as cli
from pbkv_server import sim
from pbkv_server.cli import bench as bench_cli
from pbkv_server.hardware.profiles import get_profile
import pbkv_train.serving
from pbkv_train import serving  # lazy
def f(self):
    from pbkv_server.hardware.profiles import DEFAULT_PROFILE
    return self.predictor.train, "pbkv_server.cli.server:app", "pbkv_train.train.fit"
# see pbkv_server/testing/local_cluster.py, pbkv_train/train.py, tests/predictor/, the predictor extra
'''


def test_the_rewriter_brings_an_old_file_up_to_date_once(tmp_path):
    path = tmp_path / "pbkv_server" / "sim" / "probe.py"
    path.parent.mkdir(parents=True)
    path.write_text(BEFORE)
    script = [sys.executable, str(ROOT / "scripts" / "apply_layout_moves.py"), "--root", str(tmp_path)]
    check = subprocess.run([*script, "--check", str(path)], capture_output=True, text=True)
    assert check.returncode == 1 and path.read_text() == BEFORE  # --check changes nothing
    subprocess.run([*script, str(path)], check=True, capture_output=True)
    assert path.read_text() == AFTER
    again = subprocess.run([*script, "--check", str(path)], capture_output=True, text=True)
    assert again.returncode == 0, again.stdout  # a second run has nothing left to do


SIM_BEFORE = '''from pbkv_server.sim.synth import generate, write_trace
from pbkv_server.sim import study_cli, regime
from .synth_chat import CHAT_GRAPHS
from .study import load_records
# see pbkv_server/sim/synth_coding.py
'''
SIM_AFTER = '''from pbkv_server.sim.synth.agents import generate, write_trace
from pbkv_server.sim.study import cli as study_cli
from pbkv_server.sim.study import regime
from pbkv_server.sim.synth.chat import CHAT_GRAPHS
from pbkv_server.sim.study.paper import load_records
# see pbkv_server/sim/synth/coding.py
'''


def test_the_synth_and_study_packages_rewrite_an_old_simulator_file(tmp_path):
    # Issue 23 item 4: old modules that became packages (synth, study) and modules moved into them.
    path = tmp_path / "pbkv_server" / "sim" / "probe.py"
    path.parent.mkdir(parents=True)
    path.write_text(SIM_BEFORE)
    script = [sys.executable, str(ROOT / "scripts" / "apply_layout_moves.py"), "--root", str(tmp_path)]
    subprocess.run([*script, str(path)], check=True, capture_output=True)
    assert path.read_text() == SIM_AFTER
    assert subprocess.run([*script, "--check", str(path)], capture_output=True).returncode == 0
