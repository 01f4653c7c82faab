"""``pbkv_server.sim.progress.ReplayBar``: a replay's bar counts every order run of ``opt`` (so its
time left is an upper bound) and ends full however many runs the replay took."""
from __future__ import annotations

import io

from rich.console import Console

from pbkv_contract.trace import read_trace
from pbkv_server.hardware.profiles import get_profile
from pbkv_server.sim.progress import ReplayBar, replay_progress
from pbkv_server.sim.simulator import MAX_ORDER_RUNS, ReplayConfig, ReplayOptions, load_workload, simulate
from pbkv_server.sim.synth.agents import write_trace


def _progress():
    return replay_progress(Console(file=io.StringIO(), width=120))


def test_an_online_policy_counts_its_units_once():
    with _progress() as progress:
        bar = ReplayBar(progress, "lru", "lru", 3)
        for done in (1, 2, 3):
            bar(done)
        task = progress.tasks[0]
        assert (task.completed, task.total) == (3, 3)


def test_an_order_run_restarting_the_count_moves_to_the_next_run():
    with _progress() as progress:
        bar = ReplayBar(progress, "opt", "opt", 3)
        task = progress.tasks[0]
        assert task.total == 3 * MAX_ORDER_RUNS
        for done in (1, 2, 3, 1):  # the second run's first unit
            bar(done)
        assert task.completed == 3 + 1 and "run 2 of <= 8" in task.description
        bar(3)
        assert task.completed == 6
        bar.finish()  # stable after two runs
        assert task.completed == task.total


def test_a_real_opt_replay_reports_its_order_runs(tmp_path):
    path = tmp_path / "t.jsonl"
    write_trace(str(path), graph="codegen", workflows=6, seed=1)
    workload = load_workload(read_trace(str(path)))
    seen: list[int] = []
    with _progress() as progress:
        bar = ReplayBar(progress, "opt", "opt", len(workload.units))
        result = simulate(workload, ReplayConfig("opt", get_profile("h100-qwen2.5-32b"), device_tokens=30000,
                                                 host_tokens=30000),
                          ReplayOptions(concurrency=2, on_workflow_end=lambda d: (seen.append(d), bar(d))))
        task = progress.tasks[0]
        runs = result.summary["order_runs"]
        assert runs >= 2  # the case this test is for: the count restarts
        # every run counts units 1..N; the bar is on the last run's last unit
        assert seen == list(range(1, len(workload.units) + 1)) * runs
        assert task.completed == runs * len(workload.units)
        assert f"run {runs} of <= {MAX_ORDER_RUNS}" in task.description
