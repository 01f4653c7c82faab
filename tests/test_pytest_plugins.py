"""The suite's own pytest plugins, each run on a small generated test file in a child pytest.

``tests/report_fallback.py``: a failure pytest cannot format still names its test and reason, and
a pytest-xdist worker survives it. ``tests/fast_lane.py``: a test outside ``slow`` fails over its
CPU limit, measured in CPU time (a sleeping test is not charged).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Formatting a failure raises as it did on CPython 3.11 under load (issue 35 item 1).
UNFORMATTABLE = '''
import _pytest._code.code
import _pytest._code.source

def test_unformattable(monkeypatch):
    def boom(*args, **kwargs):
        raise SystemError("AST constructor recursion depth mismatch (before=40, after=39)")
    for module in (_pytest._code.code, _pytest._code.source):
        monkeypatch.setattr(module, "getstatementrange_ast", boom)
    assert 1 == 2, "the reason it failed"

def test_after_it():
    pass
'''

CPU_BOUND = '''
import time
import pytest

def burn(seconds):
    start = time.process_time()
    while time.process_time() - start < seconds:
        pass

def test_burns_cpu():
    burn(0.3)

@pytest.mark.slow
def test_burns_cpu_but_is_slow():
    burn(0.3)

def test_sleeps():
    time.sleep(0.5)

def test_imports_at_cost():
    import importlib, sys
    sys.modules.pop("costly_module", None)
    import costly_module  # its import burns 0.3 s of CPU: not the test's
'''


def run_pytest(tmp_path: Path, source: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run a child pytest on ``source`` (as ``test_it.py`` in ``tmp_path``, its own rootdir)."""
    (tmp_path / "test_it.py").write_text(textwrap.dedent(source))
    (tmp_path / "costly_module.py").write_text("import time\nstart = time.process_time()\n"
                                               "while time.process_time() - start < 0.3:\n    pass\n")
    child_env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child_env.pop("PBKV_FAST_LANE_CPU_S", None)  # the child's limit is the test's, not the caller's
    child_env.update(env or {})
    child_env.pop("PYTEST_XDIST_WORKER", None)
    child_env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-ra", "-p", "no:cacheprovider", "-p", "no:langsmith_plugin", "-p", "no:schemathesis",
                           "--rootdir", str(tmp_path),
                           *args, str(tmp_path / "test_it.py")],
                          cwd=tmp_path, env=child_env, capture_output=True, text=True, timeout=300)


def test_an_unformattable_failure_is_reported_with_its_name_and_reason(tmp_path):
    bare = run_pytest(tmp_path, UNFORMATTABLE)
    assert "INTERNALERROR" in bare.stdout + bare.stderr  # without the plugin: no failure line at all
    assert "FAILED test_it.py::test_unformattable" not in bare.stdout

    out = run_pytest(tmp_path, UNFORMATTABLE, "-p", "tests.report_fallback")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "INTERNALERROR" not in out.stdout + out.stderr
    assert "FAILED test_it.py::test_unformattable" in out.stdout
    assert "the reason it failed" in out.stdout and "AST constructor recursion depth mismatch" in out.stdout
    assert "1 failed, 1 passed" in out.stdout.replace(", 1 warning", "")


def test_a_pytest_xdist_worker_survives_an_unformattable_failure(tmp_path):
    out = run_pytest(tmp_path, UNFORMATTABLE, "-p", "tests.report_fallback", "-n", "1")
    assert "INTERNALERROR" not in out.stdout + out.stderr and "crashed" not in out.stdout
    assert "FAILED test_it.py::test_unformattable" in out.stdout and "the reason it failed" in out.stdout
    assert "1 failed, 1 passed" in out.stdout.replace(", 1 warning", "")


def test_a_fast_lane_test_over_its_cpu_limit_fails_and_sleeping_is_free(tmp_path):
    out = run_pytest(tmp_path, CPU_BOUND, "-p", "tests.fast_lane", env={"PBKV_FAST_LANE_CPU_S": "0.15"})
    assert out.returncode == 1, out.stdout + out.stderr
    assert "ERROR test_it.py::test_burns_cpu - " in out.stdout
    assert "s in setup, its fixtures'), over the fast lane's 0.15 s: mark it (or its module) @pytest.mark.slow" in out.stdout
    # the slow-marked burner, the sleeper (0.5 s of wall time, almost no CPU) and the importer pass
    assert "4 passed" in out.stdout and "1 error" in out.stdout


def test_a_cpu_limit_of_zero_turns_the_check_off(tmp_path):
    off = run_pytest(tmp_path, CPU_BOUND, "-p", "tests.fast_lane", env={"PBKV_FAST_LANE_CPU_S": "0"})
    assert off.returncode == 0 and "4 passed" in off.stdout


@pytest.mark.slow  # its children burn 11 CPU seconds, which count as its own
def test_the_check_is_on_in_the_fast_lane_and_off_in_a_full_run(tmp_path):
    lane = run_pytest(tmp_path, CPU_BOUND.replace("burn(0.3)", "burn(5.5)", 1), "-p", "tests.fast_lane", "-m", "not slow")
    assert lane.returncode == 1 and "over the fast lane's 5 s" in lane.stdout
    full = run_pytest(tmp_path, CPU_BOUND.replace("burn(0.3)", "burn(5.5)", 1), "-p", "tests.fast_lane")
    assert full.returncode == 0


def test_a_bad_cpu_limit_is_one_clear_line(tmp_path):
    out = run_pytest(tmp_path, CPU_BOUND, "-p", "tests.fast_lane", env={"PBKV_FAST_LANE_CPU_S": "fast"})
    assert out.returncode == 4
    assert "PBKV_FAST_LANE_CPU_S='fast': give CPU seconds >= 0 (0 turns the check off)" in out.stderr
    assert "Traceback" not in out.stderr
