"""``benchmarks/alternatives_table.py`` and ``benchmarks/online_predictors.py`` write ``--json``
as every ``pbkv-bench`` command does: a named pipe (or device) is refused in one line before any
replay, and the file is written aside and renamed (``replace_file``: missing folders made, the
old file's mode kept, no half-written file), where they wrote the path in place."""
from __future__ import annotations

import json
import os
import stat

import pytest

from pbkv_server.sim.synth.agents import write_trace

from .sim_fixtures import load_benchmark

SCRIPTS = {
    "alternatives_table": lambda trace: ["--trace", str(trace), "--predictor", "markov"],
    "online_predictors": lambda trace: [str(trace), "--predictors", "markov"],
}


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("trace") / "t.jsonl"
    write_trace(str(path), graph="codegen", workflows=4, seed=0)
    return path


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_a_fifo_json_is_refused_in_one_line_before_any_replay(script, trace, tmp_path, monkeypatch, capsys):
    module = load_benchmark(script)
    work = "compare" if script == "alternatives_table" else "measure_trace"

    def refuse(*_args, **_kwargs):
        raise AssertionError("replayed before refusing --json")

    monkeypatch.setattr(module, work, refuse)
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    with pytest.raises(SystemExit) as stop:
        module.run_script(module.main, [*SCRIPTS[script](trace), "--json", str(fifo)])
    assert stop.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and err == (f"error: --json {fifo}: is a named pipe (fifo), not a regular file; writing it "
                                 "would replace it (give a regular file path)\n")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and sorted(p.name for p in tmp_path.iterdir()) == ["pipe.json"]


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_json_is_written_aside_and_renamed_keeping_the_mode(script, trace, tmp_path, capsys):
    module = load_benchmark(script)
    old = tmp_path / "old.json"
    old.write_text("{}")
    os.chmod(old, 0o640)
    inode = os.stat(old).st_ino
    assert module.run_script(module.main, [*SCRIPTS[script](trace), "--json", str(old)]) == 0
    assert os.stat(old).st_ino != inode  # renamed over it, not rewritten in place
    assert stat.S_IMODE(os.stat(old).st_mode) == 0o640 and json.loads(old.read_text())
    new = tmp_path / "made" / "new.json"  # alternatives_table failed here after the replays
    assert module.run_script(module.main, [*SCRIPTS[script](trace), "--json", str(new)]) == 0
    assert json.loads(new.read_text()).keys() == json.loads(old.read_text()).keys()  # the same trace's tables
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["made", "new.json", "old.json"]  # no .partial left
    capsys.readouterr()
