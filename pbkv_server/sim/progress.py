"""Progress bars of long replays: units done, time elapsed and time left (rich).

A replay of a day of coding-agent traffic takes minutes per policy, and ``opt`` replays the trace
up to ``ReplayOptions.order_runs`` times (it iterates to its own submission order; default
:data:`~pbkv_server.sim.simulator.MAX_ORDER_RUNS`). Its bar counts every run's units, so its
time left is an upper bound (all runs); it ends at once when the order is stable early. Used by ``pbkv-bench replay`` / ``advise`` and
``benchmarks/policy_matrix.py``.

Rich draws no bar on a console that is not an interactive terminal (stderr piped to a log,
``2> log``) until the end, so there a bar prints plain lines instead, for whoever tails the log:
one when its policy starts, at most one every :data:`PLAIN_EVERY_S` seconds of wall time while it
runs (units done of all, time elapsed and left) and one when it ends.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Callable, Mapping

from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn,
                           TimeRemainingColumn)

from pbkv_server.engine.policies import policy_info
from pbkv_server.sim.simulator import MAX_ORDER_RUNS

__all__ = ["replay_progress", "ReplayBar", "StepLines", "PLAIN_EVERY_S"]

#: Most frequent plain progress line of one bar, seconds of wall time (a log stays short: a
#: day-long replay writes about 3,000 lines, and a tail still moves twice a minute).
PLAIN_EVERY_S = 30.0


def replay_progress(console: Console) -> Progress:
    """A rich :class:`Progress` (use as a context manager) that shows each bar's units, time
    elapsed and time left, on ``console`` (the error console: stdout stays the results).

    On a console that is not interactive it draws nothing (``disable``): the bars' plain lines
    (:class:`ReplayBar`) say the same, and rich would repeat every bar once more at the end."""
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TextColumn("left"), TimeRemainingColumn(), console=console, transient=False,
                    disable=not console.is_interactive)


class ReplayBar:
    """One policy's bar; pass the instance as ``ReplayOptions.on_workflow_end``.

    Args:
        progress: from :func:`replay_progress`, started.
        label: the bar's text (the policy's name, say).
        policy: the replayed policy: an order-iterating one (``opt``) counts up to
            ``order_runs`` replays of ``units`` each.
        units: replay units of the workload (``len(workload.units)``).
        clock: wall-clock seconds of the plain lines (tests pass their own).
        order_runs: ``ReplayOptions.order_runs`` of the replay (the most it may run).
    """

    def __init__(self, progress: Progress, label: str, policy: str, units: int,
                 clock: Callable[[], float] = time.monotonic, order_runs: int = MAX_ORDER_RUNS) -> None:
        self._progress, self._label, self._units = progress, label, max(1, units)
        self._runs = order_runs if policy_info(policy).iterates_order else 1
        self._run = 0  # order runs finished
        self._last = 0  # units finished in the current run
        self.task: TaskID = progress.add_task(self._describe(), total=self._units * self._runs)
        # is_interactive, not is_terminal: a dumb terminal (TERM=dumb) gets no live bar either
        self._plain = not progress.console.is_interactive
        self._clock = clock
        self._start = self._next_line = clock()
        if self._plain:
            total = self._units * self._runs
            self._say(f"started, {total:,} units" if self._runs == 1 else
                      f"started, up to {total:,} units ({self._runs} order runs of {self._units:,})")
            self._next_line += PLAIN_EVERY_S

    def __call__(self, done: int) -> None:
        """``done`` units of the current replay have finished; a count that does not grow is the
        first unit of the next order run (the driver counts each run from 1)."""
        if done <= self._last and self._runs > 1:
            self._run = min(self._run + 1, self._runs - 1)
            self._progress.update(self.task, description=self._describe())
        self._last = done
        completed = self._run * self._units + min(done, self._units)
        self._progress.update(self.task, completed=completed)
        if self._plain and self._clock() >= self._next_line:
            self._plain_progress(completed)

    def finish(self) -> None:
        """The replay returned: fill the bar (an order that was stable early needs no more runs)."""
        self._progress.update(self.task, completed=self._units * self._runs)
        if self._plain:
            took = _duration(self._clock() - self._start)
            self._say(f"done, {self._units:,} units in {took}" if self._runs == 1 else
                      f"done, {self._run + 1} order runs of {self._units:,} units in {took}")

    def _plain_progress(self, completed: int) -> None:
        """One line: units done of all, time elapsed, time left at the rate so far (for an
        order-iterating policy an upper bound: its order may be stable before the last run)."""
        now = self._clock()
        elapsed, total = now - self._start, self._units * self._runs
        left = elapsed / completed * (total - completed) if completed else None
        text = f"{completed:,}/{total:,} units, {_duration(elapsed)} elapsed, "
        text += "-:--:-- left" if left is None else f"{'at most ' if self._runs > 1 else ''}{_duration(left)} left"
        if self._runs > 1:
            text += f" (run {self._run + 1} of <= {self._runs})"
        self._say(text)
        self._next_line = now + PLAIN_EVERY_S

    def _say(self, text: str) -> None:
        self._progress.console.print(f"{self._label.strip()}: {text}", highlight=False, markup=False,
                                     soft_wrap=True)

    def _describe(self) -> str:
        if self._runs == 1:
            return f"{self._label:16s}"
        return f"{self._label:16s} run {self._run + 1} of <= {self._runs}"


class StepLines:
    """Plain lines for bars of a rich :class:`Progress` that count steps (``pbkv-bench study``:
    replays per study), on a console that is not interactive; nothing on a terminal.

    Call :meth:`advance` instead of ``progress.advance``: at most every :data:`PLAIN_EVERY_S`
    seconds of wall time it prints one line with each of its bars' steps done of all and the
    time elapsed since it was made (a study's steps differ in length, so no time left is guessed).

    Args:
        progress: the started progress.
        label: the line's prefix (the run's label).
        tasks: the bars it reports, by the name the line gives them.
        clock: wall-clock seconds (tests pass their own).
    """

    def __init__(self, progress: Progress, label: str, tasks: Mapping[str, TaskID],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._progress, self._label, self._tasks, self._clock = progress, label, dict(tasks), clock
        self._plain = not progress.console.is_interactive  # as ReplayBar's
        self._start = clock()
        self._next_line = self._start + PLAIN_EVERY_S

    def advance(self, name: str) -> None:
        """One step of bar ``name`` is done (an unknown name is ignored, as a step no bar counts)."""
        task = self._tasks.get(name)
        if task is None:
            return
        self._progress.advance(task)
        if self._plain and self._clock() >= self._next_line:
            self.say()

    def say(self) -> None:
        """Print the line now (plain consoles only), e.g. when the run ends."""
        if not self._plain:
            return
        now = self._clock()
        done = {task.id: task for task in self._progress.tasks}
        bars = ", ".join(f"{name} {int(done[t].completed):,}/{int(done[t].total or 0):,}"
                         for name, t in self._tasks.items())
        self._progress.console.print(f"{self._label}: {bars}; {_duration(now - self._start)} elapsed",
                                     highlight=False, markup=False, soft_wrap=True)
        self._next_line = now + PLAIN_EVERY_S


def _duration(seconds: float) -> str:
    """``H:MM:SS``, as rich's elapsed and remaining columns write a time."""
    return str(timedelta(seconds=int(seconds)))
