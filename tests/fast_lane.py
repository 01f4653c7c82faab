"""Pytest plugin: a test that is not marked ``slow`` fails when it uses over 5 s of CPU (issue 32).

The fast lane (``pytest -m "not slow"``) must stay fast, and the rule that a test over 5 s is marked
slow is checked here rather than by hand. A test's cost is measured in CPU seconds, not wall time,
so that a loaded machine does not trip it: the process's CPU time (every thread, so servers run in
threads count) plus that of child processes waited for, over the test's setup, call and teardown
(a module- or session-scoped fixture is charged to the test that first needs it, as in the
durations report). The check is on when the run leaves slow tests out (``-m "not slow"``) or
``PBKV_FAST_LANE_CPU_S`` is set. Imports are not charged: a framework's first import (CrewAI's takes about 7 CPU
seconds) is a once-per-worker cost that lands on whichever test needs it first, so the CPU spent in
outermost ``import`` statements while a test runs is subtracted. The limit is ``PBKV_FAST_LANE_CPU_S`` seconds (default 5; 0 turns the check
off). A test over it fails at teardown with one line that says what to do. See
docs/contributing.md#the-fast-lane. Loaded by ``tests/conftest.py`` for every suite.
"""

from __future__ import annotations

import builtins
import os
import resource
import threading
import time
from typing import Any

import pytest

#: CPU seconds a test outside the ``slow`` marker may use (house rule: a test over 5 s is slow).
DEFAULT_LIMIT_S = 5.0
ENV_LIMIT = "PBKV_FAST_LANE_CPU_S"

_START = pytest.StashKey[float]()  # CPU seconds when the test's setup began
_CALL = pytest.StashKey[float]()  # CPU seconds when its call began
_IMPORTED = pytest.StashKey[float]()  # import CPU seconds when its setup began
_LIMIT = pytest.StashKey[float]()  # the session's limit, read once


def cpu_seconds() -> float:
    """CPU time (user + system, seconds) of this process and of its waited-for children."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def limit_s() -> float:
    """The limit from ``PBKV_FAST_LANE_CPU_S``; a value that is not a number >= 0 is one clear error."""
    raw = os.environ.get(ENV_LIMIT, "").strip()
    if not raw:
        return DEFAULT_LIMIT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise pytest.UsageError(f"{ENV_LIMIT}={raw!r}: give CPU seconds >= 0 (0 turns the check off)")
    return value


class _ImportClock:
    """CPU seconds spent in outermost ``import`` statements (``builtins.__import__``), all threads."""

    def __init__(self) -> None:
        self.spent = 0.0
        self._depth = threading.local()
        self._real = builtins.__import__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        depth = getattr(self._depth, "n", 0)
        if depth:
            return self._real(*args, **kwargs)
        self._depth.n = 1
        start = time.process_time()
        try:
            return self._real(*args, **kwargs)
        finally:
            self.spent += time.process_time() - start
            self._depth.n = 0


_IMPORTS = _ImportClock()


def pytest_configure(config: pytest.Config) -> None:
    # On in the fast lane (a -m expression that leaves slow tests out) or when the limit is set
    # explicitly; off in full runs, where the SGLang and vLLM suites load models in unmarked tests.
    lane = "not slow" in (config.option.markexpr or "")
    config.stash[_LIMIT] = limit_s() if lane or os.environ.get(ENV_LIMIT, "").strip() else 0.0
    if config.stash[_LIMIT]:
        builtins.__import__ = _IMPORTS


def pytest_unconfigure(config: pytest.Config) -> None:
    if builtins.__import__ is _IMPORTS:
        builtins.__import__ = _IMPORTS._real


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[_START] = cpu_seconds()
    item.stash[_IMPORTED] = _IMPORTS.spent


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    item.stash[_CALL] = cpu_seconds()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    limit = item.config.stash.get(_LIMIT, DEFAULT_LIMIT_S)
    if call.when != "teardown" or not limit or item.get_closest_marker("slow") is not None or not report.passed:
        return report
    start = item.stash.get(_START, None)
    if start is None:
        return report
    now = cpu_seconds()
    imports = _IMPORTS.spent - item.stash.get(_IMPORTED, _IMPORTS.spent)
    used = now - start - imports
    if used > limit:
        setup = item.stash.get(_CALL, now) - start  # module-scoped fixtures run in the setup of their first test
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid} used {used:.1f} s of CPU besides {imports:.1f} s of imports ({setup:.1f} s "
                           f"in setup, its fixtures'), over "
                           f"the fast lane's {limit:g} s: mark it (or its module) @pytest.mark.slow or make it "
                           f"cheaper (docs/contributing.md#the-fast-lane)")
    return report
