"""``benchmarks/sim_speed.py --trace`` at its command line: bad input is one line and exit status 2,
refused before the first replay (minutes of CPU on a real trace); ``--json`` keeps other settings,
makes missing folders, and records the device size the replay used."""
from __future__ import annotations

import json

import pytest

from pbkv_server.hardware.profiles import get_profile
from pbkv_server.sim.synth.agents import write_trace

from .sim_fixtures import load_benchmark


@pytest.fixture(scope="module")
def speed():
    return load_benchmark("sim_speed")


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("speed") / "t.jsonl"
    write_trace(str(path), graph="codegen", workflows=4, seed=3)
    return path


@pytest.mark.parametrize("args,message", [
    (["--policies", "lru,nope"], "unknown policy 'nope'"),
    (["--profile", "nope"], "unknown hardware profile 'nope'"),
    (["--predictor", "nope"], "unknown predictor 'nope'"),
    (["--device-tokens", "0"], "--device-tokens must be >= 1"),
    (["--order-runs", "3,0"], "--order-runs 0: must be in 1..64"),
    (["--order-runs", "3,3"], "--order-runs 3 is given twice"),
    (["--order-runs", "x"], "--order-runs 'x': not a whole number"),
    (["--order-runs", "3,"], "item 2 is empty"),
    (["--order-runs", "3", "--policies", "lru,pbkv"], "--order-runs: no policy of --policies iterates its order"),
    (["--repeat", "0"], "--repeat must be >= 1, got 0"),
])
def test_bad_input_is_one_line_before_any_replay(speed, trace, capsys, monkeypatch, args, message):
    def no_replay(*a, **k):
        raise AssertionError("replayed before refusing the input")

    monkeypatch.setattr(speed, "simulate", no_replay)
    assert speed.run_script(speed.main, ["--trace", str(trace), *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


@pytest.mark.parametrize("args,message", [
    (["--concurrency", "0"], "--concurrency must be in 1..1,000,000, got 0"),
    (["--concurrency", "2000000"], "--concurrency must be in 1..1,000,000, got 2,000,000"),
    (["--predictor", "nosuch"], "unknown predictor 'nosuch'"),
    (["--predictor", "noise:2"], "noise lambda must be in [0, 1], got 2.0"),
    (["--predictor", "/no/such/model.pt"], "predictor model file not found: /no/such/model.pt"),
    (["--profile", "nope"], "unknown hardware profile 'nope'"),
    (["--device-tokens", "0"], "--device-tokens must be >= 1"),
    (["--host-ratio", "nan"], "host ratio must be a number"),
    (["--policies", "lru,nope"], "unknown policy 'nope'"),
    (["--order-runs", "0"], "--order-runs 0: must be in 1..64"),
])
def test_bad_input_is_refused_before_the_trace_is_read(speed, trace, capsys, monkeypatch, args, message):
    # a real trace is 0.2-0.5 GB: --concurrency 0 and --predictor noise:2 were refused after reading it
    import pbkv_contract.trace

    monkeypatch.setattr(pbkv_contract.trace, "read_trace", lambda *a, **k: pytest.fail("read before refusing"))
    monkeypatch.setattr(speed, "load_workload", lambda *a, **k: pytest.fail("loaded before refusing"))
    assert speed.run_script(speed.main, ["--trace", str(trace), *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and message in err, err


@pytest.mark.parametrize("args,message", [
    (["--concurrency", "0"], "--concurrency must be in 1..1,000,000, got 0"),
    (["--predictor", "noise:2"], "noise lambda must be in [0, 1], got 2.0"),
    (["--profile", "nope"], "unknown hardware profile 'nope'"),
])
def test_synthetic_mode_refuses_bad_options_before_generating(speed, capsys, monkeypatch, args, message):
    monkeypatch.setattr(speed, "generate", lambda *a, **k: pytest.fail("generated before refusing the input"))
    assert speed.run_script(speed.main, ["--workflows", "5", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and message in err, err


def test_workflows_with_a_trace_is_refused_in_one_line(speed, trace, capsys, monkeypatch):
    monkeypatch.setattr(speed, "simulate", lambda *a, **k: pytest.fail("replayed before refusing the input"))
    assert speed.run_script(speed.main, ["--trace", str(trace), "--workflows", "5"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: --workflows") and "--trace" in err


@pytest.mark.parametrize("args,message", [
    (["--device-tokens", "0"], "--device-tokens must be >= 1, got 0"),
    (["--device-tokens", "-5"], "--device-tokens must be >= 1, got -5"),
    (["--workflows", "0"], "--workflows must be >= 1, got 0"),
])
def test_synthetic_mode_refuses_bad_sizes_in_one_line_before_generating(speed, capsys, monkeypatch, args, message):
    """Synthetic mode ran ``--device-tokens 0`` at the 500,000 default (``0 or 500_000``)."""
    monkeypatch.setattr(speed, "generate", lambda *a, **k: pytest.fail("generated before refusing the input"))
    monkeypatch.setattr(speed, "simulate", lambda *a, **k: pytest.fail("replayed before refusing the input"))
    assert speed.run_script(speed.main, ["--workflows", "5", *args] if "--workflows" not in args else args) == 2
    err = capsys.readouterr().err
    assert err == f"error: {message}\n"


def test_a_corrupt_json_is_refused_before_any_replay_and_left_as_it_was(speed, trace, tmp_path, capsys, monkeypatch):
    out = tmp_path / "cost.json"
    out.write_text("{bad")
    monkeypatch.setattr(speed, "simulate", lambda *a, **k: pytest.fail("replayed before refusing --json"))
    with pytest.raises(SystemExit) as stop:  # check_output: refused with the other output checks
        speed.run_script(speed.main, ["--trace", str(trace), "--json", str(out)])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "--json" in err and "not JSON" in err and err.count("\n") == 1 and out.read_text() == "{bad"


def test_json_keeps_other_settings_makes_folders_and_names_the_device_used(speed, trace, tmp_path):
    out = tmp_path / "new" / "cost.json"
    profile = "a6000x8-qwen3-32b-tp8"
    assert speed.main(["--trace", str(trace), "--policies", "lru", "--profile", profile, "--json", str(out)]) == 0
    first = json.loads(out.read_text())
    other = {**next(iter(first.values())), "trace": "other.jsonl"}  # another setting of this script's
    out.write_text(json.dumps({"other": other, **first}))
    assert speed.main(["--trace", str(trace), "--policies", "lru", "--profile", profile, "--host-ratio", "0",
                       "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    device = get_profile(profile).device_kv_tokens  # no --device-tokens: the profile's, as the replay used
    assert data["other"] == other
    assert f"t.jsonl {profile} C=32 device={device} host=0" in data
    row = data[f"t.jsonl {profile} C=32 device={device} host=0"]["rows"][0]
    assert row["policy"] == "lru" and row["cpu_vs_first"] == 1.0 and row["order_runs"] == 1


@pytest.mark.parametrize("held", [
    {"lru": {"hit_rate": 0.5, "mean_latency_s": 1.0}},  # a pbkv-bench replay result
    {"x": 1},
    {"t.jsonl p C=32 device=1 host=0": {"trace": "t.jsonl", "rows": []}},  # no profile, sizes, ...
    "hi",  # valid JSON, not "not JSON"
    [1, 2],
])
def test_json_merges_only_into_an_earlier_result_of_this_script(speed, trace, tmp_path, capsys, monkeypatch, held):
    """``--json`` merged its setting into ANY JSON object (a replay result, ``{"x": 1}``), and called
    the JSON string ``"hi"`` "not JSON" (a new-user check): refused before any replay, file as it was."""
    out = tmp_path / "cost.json"
    out.write_text(json.dumps(held))
    before = out.read_bytes()
    monkeypatch.setattr(speed, "simulate", lambda *a, **k: pytest.fail("replayed before refusing --json"))
    with pytest.raises(SystemExit) as stop:
        speed.run_script(speed.main, ["--trace", str(trace), "--json", str(out)])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --json {out}: holds JSON that is not an earlier result of this command")
    assert err.count("\n") == 1 and "not JSON" not in err and out.read_bytes() == before


def test_each_order_run_count_is_a_row_of_opt_and_online_policies_replay_once(speed, trace, tmp_path):
    out = tmp_path / "cost.json"
    assert speed.main(["--trace", str(trace), "--policies", "lru,opt", "--order-runs", "1,2", "--concurrency", "2",
                       "--device-tokens", "30000", "--host-ratio", "1", "--json", str(out)]) == 0
    rows = next(iter(json.loads(out.read_text()).values()))["rows"]
    assert [(r["policy"], r["order_runs_limit"]) for r in rows] == [("lru", 1), ("opt", 1), ("opt", 2)]
    one, two = rows[1], rows[2]
    assert one["order_runs"] == 1 and 1 <= two["order_runs"] <= 2
    # run 1 is the same replay whatever the limit
    assert two["order_run_mean_latency_s"][0] == one["order_run_mean_latency_s"][0] == one["mean_latency_s"]


def test_repeat_reports_the_least_cpu_of_identical_replays(speed, trace, tmp_path):
    out = tmp_path / "cost.json"
    assert speed.main(["--trace", str(trace), "--policies", "lru", "--repeat", "3", "--json", str(out)]) == 0
    row = next(iter(json.loads(out.read_text()).values()))["rows"][0]
    assert len(row["cpu_s_each"]) == 3 and row["cpu_s"] == min(row["cpu_s_each"])
