"""``pbkv_server.sim.progress.ReplayBar``: a replay's bar counts every order run of ``opt`` (so its
time left is an upper bound) and ends full however many runs the replay took."""
from __future__ import annotations

import io

from rich.console import Console
from rich.progress import Progress

from pbkv_contract.trace import read_trace
from pbkv_server.hardware.profiles import get_profile
from pbkv_server.sim.progress import ReplayBar, StepLines, replay_progress
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


class _Clock:
    """A wall clock the test moves by hand (no sleeps)."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _plain_lines(out: io.StringIO) -> list[str]:
    return [line.strip() for line in out.getvalue().splitlines() if "units" in line]


def test_a_console_that_is_not_a_terminal_gets_plain_lines_at_most_every_30_s():
    # stderr piped to a log: rich draws no bar there, so a policy's start, its progress at most
    # every 30 s of wall time (done/total, elapsed, left) and its end are printed as lines
    out, clock = io.StringIO(), _Clock()
    with replay_progress(Console(file=out, width=120)) as progress:
        bar = ReplayBar(progress, "lru", "lru", 10, clock=clock)
        for step, done in ((10, 1), (31, 2), (40, 3), (60, 4), (61, 5)):
            clock.now = 100.0 + step
            bar(done)
        clock.now = 170.0
        bar.finish()
    assert _plain_lines(out) == [
        "lru: started, 10 units",
        "lru: 2/10 units, 0:00:31 elapsed, 0:02:04 left",  # 31 s for 2 units: 8 more take 124 s
        "lru: 5/10 units, 0:01:01 elapsed, 0:01:01 left",  # 40 and 60 s: within 30 s of the last line
        "lru: done, 10 units in 0:01:10",
    ]
    assert "━" not in out.getvalue()  # the lines say it all: rich repeats no bar at the end


def test_an_order_iterating_policy_says_which_run_and_that_its_time_left_is_an_upper_bound():
    out, clock = io.StringIO(), _Clock()
    with replay_progress(Console(file=out, width=120)) as progress:
        bar = ReplayBar(progress, "opt", "opt", 3, clock=clock)
        for done in (1, 2, 3, 1):
            bar(done)
        clock.now += 40
        bar(2)
        bar.finish()
    total = 3 * MAX_ORDER_RUNS
    lines = _plain_lines(out)
    assert lines[0] == f"opt: started, up to {total} units ({MAX_ORDER_RUNS} order runs of 3)"
    assert MAX_ORDER_RUNS == 8  # 24 units; 5 done in 40 s: 19 more take at most 152 s
    assert lines[1] == "opt: 5/24 units, 0:00:40 elapsed, at most 0:02:32 left (run 2 of <= 8)"
    assert lines[2] == "opt: done, 2 order runs of 3 units in 0:00:40"  # stable after two: no more runs


def test_a_terminal_gets_only_the_bar():
    out, clock = io.StringIO(), _Clock()
    with replay_progress(Console(file=out, width=120, force_terminal=True)) as progress:
        bar = ReplayBar(progress, "lru", "lru", 10, clock=clock)
        clock.now += 100
        bar(5)
        bar.finish()
    assert _plain_lines(out) == [] and "10/10" in out.getvalue()


def test_step_bars_get_one_plain_line_at_most_every_30_s_and_one_at_the_end():
    # pbkv-bench study: bars count replays per study; a log gets each bar's steps done of all
    out, clock = io.StringIO(), _Clock()
    with Progress(console=Console(file=out, width=120)) as progress:
        tasks = {"gamma": progress.add_task("HoVer: gamma", total=4), "rho": progress.add_task("HoVer: rho", total=2)}
        lines = StepLines(progress, "HoVer", tasks, clock=clock)
        for step, name in ((10, "gamma"), (30, "gamma"), (45, "gamma"), (59, "gamma"), (60, "rho"), (70, "unknown")):
            clock.now = 100.0 + step
            lines.advance(name)
        clock.now = 200.0
        lines.say()
        assert [int(t.completed) for t in progress.tasks] == [4, 1]  # the unknown step counted nowhere
    assert [line.strip() for line in out.getvalue().splitlines() if "elapsed" in line] == [
        "HoVer: gamma 2/4, rho 0/2; 0:00:30 elapsed",  # the first step at or after 30 s
        "HoVer: gamma 4/4, rho 1/2; 0:01:00 elapsed",  # 45 and 59 s: within 30 s of the last line
        "HoVer: gamma 4/4, rho 1/2; 0:01:40 elapsed",  # the end
    ]


def test_step_bars_on_a_terminal_print_no_lines():
    out, clock = io.StringIO(), _Clock()
    with Progress(console=Console(file=out, width=120, force_terminal=True)) as progress:
        lines = StepLines(progress, "HoVer", {"gamma": progress.add_task("HoVer: gamma", total=2)}, clock=clock)
        clock.now += 100
        lines.advance("gamma")
        lines.say()
    assert "elapsed" not in out.getvalue()
