"""``benchmarks/policy_matrix.py`` at its command line: ``--json F --resume`` keeps what a stopped
grid finished and runs only the (cell, policy) pairs its JSON lacks; bad numbers and a bad
``--compare`` file are one line naming the option, before any replay."""
from __future__ import annotations

import json

import pytest

from .sim_fixtures import load_benchmark


@pytest.fixture(scope="module")
def matrix():
    return load_benchmark("policy_matrix")


ARGS = ["--graph", "codegen", "--workflows", "6", "--policy", "lru,pbkv", "--concurrency", "2,4", "--device", "30000"]


def test_resume_runs_only_what_the_json_lacks(matrix, tmp_path, capsys):
    out = tmp_path / "m.json"
    assert matrix.main([*ARGS, "--json", str(out)]) == 0
    full = json.loads(out.read_text())
    assert len(full) == 2 and all(set(row) == {"lru", "pbkv"} for row in full.values())
    # a run stopped in its second cell, after lru; lru's figure marked to show it is kept, not rerun
    c2, c4 = sorted(full, key=lambda k: "C=4" in k)
    stopped = {c2: full[c2], c4: {"lru": {**full[c4]["lru"], "mean_latency_s": 123.0}}}
    out.write_text(json.dumps(stopped))
    capsys.readouterr()
    assert matrix.main([*ARGS, "--json", str(out), "--resume"]) == 0
    resumed = json.loads(out.read_text())
    assert resumed[c2] == full[c2]
    assert resumed[c4]["lru"]["mean_latency_s"] == 123.0
    assert resumed[c4]["pbkv"] == full[c4]["pbkv"]  # replayed now, as in the whole run
    assert [p.name for p in tmp_path.iterdir()] == ["m.json"]  # nothing left aside


def test_a_new_predictor_reuses_the_unpredicted_policies_and_replays_the_predictive_ones(matrix, tmp_path):
    out = tmp_path / "m.json"
    one = ["--graph", "codegen", "--workflows", "6", "--policy", "lru,pbkv,opt", "--concurrency", "2", "--device", "30000"]
    assert matrix.main([*one, "--predictor", "markov", "--json", str(out)]) == 0
    (key,) = json.loads(out.read_text())
    marked = json.loads(out.read_text())
    for policy in ("lru", "opt"):  # marked to show they are copied, not replayed again
        marked[key][policy]["mean_latency_s"] = 123.0
    out.write_text(json.dumps(marked))
    assert matrix.main([*one, "--predictor", "uniform", "--json", str(out), "--resume"]) == 0
    after = json.loads(out.read_text())
    new = key.replace("predictor=markov", "predictor=uniform")
    assert set(after) == {key, new}
    assert after[new]["lru"]["mean_latency_s"] == after[new]["opt"]["mean_latency_s"] == 123.0
    alone = tmp_path / "u.json"  # pbkv under uniform, replayed from scratch
    assert matrix.main([*one, "--predictor", "uniform", "--json", str(alone)]) == 0
    assert after[new]["pbkv"] == json.loads(alone.read_text())[new]["pbkv"]


def test_unpredicted_policies_replay_alike_under_any_predictor():
    # what the reuse above rests on, checked on every registered replay policy that reads no predictions
    from pbkv_server.engine.policies import REPLAY, available_policies, policy_info
    from pbkv_server.hardware.profiles import get_profile
    from pbkv_server.predictors import make_predictor
    from pbkv_server.sim.simulator import ReplayConfig, ReplayOptions, load_workload, simulate
    from pbkv_server.sim.synth.agents import generate

    records = list(generate(graph="research", workflows=6, seed=3))
    workload = load_workload(records)
    unpredicted = [p for p in available_policies(REPLAY) if not policy_info(p).predictive]
    assert "lru" in unpredicted and "opt" in unpredicted
    for policy in unpredicted:
        runs = [simulate(workload, ReplayConfig(policy, get_profile("h100-qwen2.5-32b"), device_tokens=20000,
                                                host_tokens=20000),
                         ReplayOptions(concurrency=3, predictor=make_predictor(spec, 3, records))).summary
                for spec in ("markov", "context")]
        for run in runs:
            run.pop("latency_ms")  # the decisions' measured CPU time, not a replay figure
        assert json.dumps(runs[0], sort_keys=True) == json.dumps(runs[1], sort_keys=True), policy


def test_resume_of_a_file_that_is_not_a_matrix_is_one_line(matrix, tmp_path, capsys):
    out = tmp_path / "m.json"
    out.write_text("[1, 2]")
    with pytest.raises(SystemExit) as stop:
        matrix.main([*ARGS, "--json", str(out), "--resume"])
    assert stop.value.code == 2
    assert "is not a policy_matrix --json" in capsys.readouterr().err
    assert out.read_text() == "[1, 2]"


@pytest.mark.parametrize("args, line", [
    (["--concurrency", "abc"], "argument --concurrency: 'abc' is not a number"),
    (["--device", "1.5e4,2.5"], "argument --device: '2.5' is not a whole number"),
    (["--host-ratio", "nan"], "argument --host-ratio: must be from 0 (no host tier) to 1000, got nan"),
    (["--host-ratio", "-1"], "argument --host-ratio: must be from 0 (no host tier) to 1000, got -1"),
    # the second spec's typo stops the run before the first spec's replays
    (["--predictor", "context,contxt"], "and predictor model file not found: contxt"),
    (["--predictor", ""], "error: --predictor: empty predictor spec (expected oracle | uniform | markov | context "
                          "| noise:LAMBDA | PATH (trained model file))"),
])
def test_bad_numbers_name_their_option(matrix, args, line, capsys):
    with pytest.raises(SystemExit) as stop:
        matrix.main(args)
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith(line)  # one line: no usage block before it


def test_a_bad_compare_file_stops_before_any_replay(matrix, tmp_path, capsys):
    out = tmp_path / "m.json"
    cases = {"missing.json": "cannot read {}: No such file or directory", "text.json": "{} is not JSON",
             "list.json": "{} is not a policy_matrix --json", "other.json": "{} is not a policy_matrix --json"}
    (tmp_path / "text.json").write_text("hello\n")
    (tmp_path / "list.json").write_text("[1, 2, 3]")
    (tmp_path / "other.json").write_text('{"a": 1}')
    for name, line in cases.items():
        with pytest.raises(SystemExit) as stop:
            matrix.main([*ARGS, "--json", str(out), "--compare", str(tmp_path / name)])
        assert stop.value.code == 2
        assert line.format(tmp_path / name) in capsys.readouterr().err
        assert not out.exists()  # stopped before the grid's first replay wrote it


def test_compare_prints_the_change_of_each_cell(matrix, tmp_path, capsys):
    before = tmp_path / "b.json"
    assert matrix.main([*ARGS, "--json", str(before)]) == 0
    data = json.loads(before.read_text())
    key = next(iter(data))
    data[key]["lru"]["hit_rate"] -= 0.05  # before: 5 points lower
    before.write_text(json.dumps(data))
    capsys.readouterr()
    assert matrix.main([*ARGS, "--compare", str(before)]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith(f"| {key} |"))
    assert row.split("|")[2].strip() == "+5.0"
