"""Every output file of ``pbkv-bench`` is written the same way (``replace_file``): missing folders
are made (as ``synth --out``, ``pbkv-sdk import --out`` and the benchmark scripts make them), a
replaced file is written aside and renamed (a stopped write keeps the last file whole); a path that
is a directory or cannot be written is still one ``error:`` line, before any replay."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from pbkv_contract.files import replace_file
from pbkv_server.cli.bench import app
from pbkv_server.sim.synth.agents import write_trace

runner = CliRunner()


def test_replace_file_makes_the_folders_and_renames_a_whole_file(tmp_path):
    out = tmp_path / "new" / "deeper" / "r.png"
    seen = []
    replace_file(out, lambda tmp: (seen.append(tmp), tmp.write_text("one")))
    assert out.read_text() == "one"
    # written aside in the same folder, under a name that keeps the suffix (a plot's format follows it)
    assert seen[0].parent == out.parent and seen[0] != out and seen[0].suffix == ".png"
    assert sorted(p.name for p in out.parent.iterdir()) == ["r.png"]


def test_a_failed_write_keeps_the_last_file_and_leaves_nothing_aside(tmp_path):
    out = tmp_path / "r.json"
    out.write_text("last")

    def half_then_fail(tmp):
        tmp.write_text("ha")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        replace_file(out, half_then_fail)
    assert out.read_text() == "last" and [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_a_suffixless_output_keeps_no_suffix_aside(tmp_path):
    seen = []
    replace_file(tmp_path / "results", lambda tmp: (seen.append(tmp), tmp.write_text("x")))
    assert seen[0].suffix == ""  # matplotlib would otherwise pick a format from a made-up suffix


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("out") / "t.jsonl"
    write_trace(str(path), graph="codegen", workflows=3, seed=1)
    return path


def test_replay_json_into_missing_folders_is_written(trace, tmp_path):
    out = tmp_path / "new" / "dir" / "r.json"
    result = runner.invoke(app, ["replay", str(trace), "--policy", "lru", "--no-gap", "--device-tokens", "30000",
                                 "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert set(json.loads(out.read_text())) == {"lru"}
    assert sorted(p.name for p in out.parent.iterdir()) == ["r.json"]


@pytest.mark.parametrize("command", ["replay", "advise"])
@pytest.mark.parametrize("where, problem", [("dir", "is a directory"), ("/proc/pbkv-test/x.json", "cannot be created")])
def test_a_directory_or_unwritable_output_is_one_line_before_any_replay(command, where, problem, trace, tmp_path,
                                                                         monkeypatch):
    import pbkv_server.sim.simulator as simulator

    monkeypatch.setattr(simulator, "simulate", lambda *a, **k: pytest.fail("replayed before refusing --json"))
    out = tmp_path if where == "dir" else where
    result = runner.invoke(app, [command, str(trace), "--json", str(out)])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: --json {out}: {problem}"), result.output


def test_probe_profile_refuses_a_directory_json_before_probing(tmp_path, monkeypatch):
    import pbkv_server.loadgen.probe as probe

    monkeypatch.setattr(probe, "run_probes", lambda *a, **k: pytest.fail("probed before refusing --json"))
    result = runner.invoke(app, ["probe-profile", "--target", "http://127.0.0.1:9", "--json", str(tmp_path)])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert lines == [f"error: --json {tmp_path}: is a directory"], result.output


@pytest.mark.parametrize("command, option", [("replay", "--json"), ("replay", "--plot"), ("advise", "--json")])
def test_an_output_that_names_another_trace_is_refused_and_the_trace_kept(command, option, trace, tmp_path,
                                                                          monkeypatch):
    # a user's recorded traffic is not a summary's scratch file: found by a new-user check, where
    # `replay two.jsonl --json cc5.jsonl` turned a 35 MB trace into 19 KB of JSON
    import pbkv_server.sim.simulator as simulator

    monkeypatch.setattr(simulator, "simulate", lambda *a, **k: pytest.fail("replayed before refusing the output"))
    other = tmp_path / "other.jsonl"
    write_trace(str(other), graph="codegen", workflows=2, seed=2)
    before = other.read_bytes()
    result = runner.invoke(app, [command, str(trace), option, str(other)])
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [
        f"error: {option} {other}: is a PBKV trace; writing it would destroy it (give another path)"]
    assert other.read_bytes() == before


def test_an_empty_file_or_an_earlier_summary_may_be_replaced(trace, tmp_path):
    for name, content in (("empty.json", ""), ("old.json", '{"lru": {}}\n')):
        out = tmp_path / name
        out.write_text(content)
        result = runner.invoke(app, ["replay", str(trace), "--policy", "lru", "--no-gap", "--device-tokens", "30000",
                                     "--json", str(out)])
        assert result.exit_code == 0, result.output
        assert set(json.loads(out.read_text())) == {"lru"}


def test_an_import_may_replace_a_trace_but_a_summary_may_not(trace):
    from pbkv_contract.files import output_problem

    assert output_problem(trace) == "is a PBKV trace; writing it would destroy it (give another path)"
    assert output_problem(trace, writes_trace=True) is None  # pbkv-sdk import --out re-imports over it


def test_a_closed_stdout_loses_no_result_file(trace, tmp_path, monkeypatch):
    # `replay ... --json r.json | head -1`: the tables hit a closed pipe, the replays are done
    import pbkv_server.cli.bench as bench

    def closed_pipe(*a, **k):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(bench, "_print_replay", closed_pipe)
    out = tmp_path / "r.json"
    result = runner.invoke(app, ["replay", str(trace), "--policy", "lru", "--no-gap", "--device-tokens", "30000",
                                 "--json", str(out)])
    assert result.exit_code != 0
    assert set(json.loads(out.read_text())) == {"lru"}
