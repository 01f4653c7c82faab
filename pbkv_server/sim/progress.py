"""Progress bars of long replays: units done, time elapsed and time left (rich).

A replay of a day of coding-agent traffic takes minutes per policy, and ``opt`` replays the trace
up to :data:`~pbkv_server.sim.simulator.MAX_ORDER_RUNS` times (it iterates to its own submission
order). Its bar counts every run's units, so its time left is an upper bound (all runs); it ends
at once when the order is stable early. Used by ``pbkv-bench replay`` / ``advise`` and
``benchmarks/policy_matrix.py``.
"""

from __future__ import annotations

from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn,
                           TimeRemainingColumn)

from pbkv_server.engine.policies import policy_info
from pbkv_server.sim.simulator import MAX_ORDER_RUNS

__all__ = ["replay_progress", "ReplayBar"]


def replay_progress(console: Console) -> Progress:
    """A rich :class:`Progress` (use as a context manager) that shows each bar's units, time
    elapsed and time left, on ``console`` (the error console: stdout stays the results)."""
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TextColumn("left"), TimeRemainingColumn(), console=console, transient=False)


class ReplayBar:
    """One policy's bar; pass the instance as ``ReplayOptions.on_workflow_end``.

    Args:
        progress: from :func:`replay_progress`, started.
        label: the bar's text (the policy's name, say).
        policy: the replayed policy: an order-iterating one (``opt``) counts up to
            ``MAX_ORDER_RUNS`` replays of ``units`` each.
        units: replay units of the workload (``len(workload.units)``).
    """

    def __init__(self, progress: Progress, label: str, policy: str, units: int) -> None:
        self._progress, self._label, self._units = progress, label, max(1, units)
        self._runs = MAX_ORDER_RUNS if policy_info(policy).iterates_order else 1
        self._run = 0  # order runs finished
        self._last = 0  # units finished in the current run
        self.task: TaskID = progress.add_task(self._describe(), total=self._units * self._runs)

    def __call__(self, done: int) -> None:
        """``done`` units of the current replay have finished; a count that does not grow is the
        first unit of the next order run (the driver counts each run from 1)."""
        if done <= self._last and self._runs > 1:
            self._run = min(self._run + 1, self._runs - 1)
            self._progress.update(self.task, description=self._describe())
        self._last = done
        self._progress.update(self.task, completed=self._run * self._units + min(done, self._units))

    def finish(self) -> None:
        """The replay returned: fill the bar (an order that was stable early needs no more runs)."""
        self._progress.update(self.task, completed=self._units * self._runs)

    def _describe(self) -> str:
        if self._runs == 1:
            return f"{self._label:16s}"
        return f"{self._label:16s} run {self._run + 1} of <= {self._runs}"
