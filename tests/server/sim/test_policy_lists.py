"""A comma-separated policy list reads alike in every command line (``parse_policy_list``): an
empty item or a name listed twice is one ``error:`` line and exit status 2, before any replay
(``--policy lru,,pbkv`` used to replay two policies where three were meant)."""
from __future__ import annotations

import pytest
from typer.testing import CliRunner

from pbkv_server.cli.bench import app
from pbkv_server.engine.policies import REPLAY, SERVER, parse_policy_list

from .sim_fixtures import load_benchmark

runner = CliRunner()
BAD = [("lru,,pbkv", "item 2 is empty"), ("lru,pbkv,", "item 3 is empty"), (" , ", "names no policy"),
       ("lru,pbkv,lru", "policy 'lru' is listed twice"), ("lru, lru", "policy 'lru' is listed twice")]


def _no_replay(*args, **kwargs):
    raise AssertionError("replayed before refusing the policy list")


def test_the_parser_keeps_order_and_strips_spaces():
    assert parse_policy_list(" pbkv ,lru") == ["pbkv", "lru"]
    with pytest.raises(ValueError, match=r"unknown policy 'fifo' in --policies; known: lru, "):
        parse_policy_list("lru,fifo", flag="--policies")
    with pytest.raises(ValueError, match="unknown policy 'opt'"):  # offline: replay only
        parse_policy_list("lru,opt", backend=SERVER)
    assert parse_policy_list("opt", backend=REPLAY) == ["opt"]


@pytest.mark.parametrize("text, message", BAD)
def test_the_parser_refuses_empty_items_and_repeats(text, message):
    with pytest.raises(ValueError, match=message):
        parse_policy_list(text)


@pytest.mark.parametrize("text, message", BAD)
def test_replay_refuses_the_list_in_one_line(text, message, tmp_path, monkeypatch):
    import pbkv_server.sim.simulator as simulator

    monkeypatch.setattr(simulator, "simulate", _no_replay)
    result = runner.invoke(app, ["replay", str(tmp_path / "none.jsonl"), "--policy", text])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --policy") and message in lines[0], result.output


@pytest.mark.parametrize("argv", [["study", "regime", "synth:codegen", "--policies", "lru,,pbkv"],
                                  ["study", "no-such-run", "--policies", "lru,,pbkv"]])
def test_study_refuses_the_list_in_one_line(argv, tmp_path):
    result = runner.invoke(app, [*argv, "--out-dir", str(tmp_path / "o")])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "error: --policies 'lru,,pbkv': item 2 is empty" in lines[0], result.output
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("text, message", BAD[:1] + BAD[3:4])
def test_policy_matrix_refuses_the_list_in_one_line(text, message, monkeypatch, capsys):
    matrix = load_benchmark("policy_matrix")
    monkeypatch.setattr(matrix, "simulate", _no_replay)
    with pytest.raises(SystemExit) as stop:
        matrix.main(["--graph", "codegen", "--workflows", "2", "--policy", text])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "error: --policy" in err[0] and message in err[0]


@pytest.mark.parametrize("text, message", BAD[:1] + BAD[3:4])
def test_sim_speed_refuses_the_list_in_one_line(text, message, tmp_path, monkeypatch, capsys):
    from pbkv_server.sim.synth.agents import write_trace

    speed = load_benchmark("sim_speed")
    trace = tmp_path / "t.jsonl"
    write_trace(str(trace), graph="codegen", workflows=2, seed=1)
    monkeypatch.setattr(speed, "simulate", _no_replay)
    assert speed.run_script(speed.main, ["--trace", str(trace), "--policies", text]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "error: --policies" in err[0] and message in err[0]


def test_the_sglang_parser_knows_the_plugins_names_and_sglangs_lru():
    from pbkv_server.engine.policies import BASELINE_POLICY, parse_sglang_policy_list, sglang_policy_names

    plugin = list(sglang_policy_names())
    assert parse_sglang_policy_list(f"{plugin[0]}, {BASELINE_POLICY}") == [plugin[0], BASELINE_POLICY]
    engine_only = next(name for name in sglang_policy_names().values() if name not in sglang_policy_names())
    with pytest.raises(ValueError, match=f"unknown policy '{engine_only}' in --policies; known: "
                                         f"{BASELINE_POLICY}, {', '.join(plugin)}$"):
        parse_sglang_policy_list(f"{BASELINE_POLICY},{engine_only}")  # an engine name, not the plugin's


LIVE_BAD = [("lru,,pbkv", "item 2 is empty"), ("lru,pbkv,lru", "policy 'lru' is listed twice"),
            ("lru,fifo", "unknown policy 'fifo' in --policies; known: lru, ")]


def _one_error_line(run, capsys) -> str:
    with pytest.raises(SystemExit) as stop:
        run()
    assert stop.value.code == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert out == "" and len(lines) == 1 and "usage:" not in err, err
    return lines[0]


@pytest.mark.parametrize("text, message", LIVE_BAD)
@pytest.mark.parametrize("script", ["live_paired", "sglang_plugin_overhead"])
def test_the_live_sglang_benchmarks_refuse_the_list_in_one_line(script, text, message, monkeypatch, capsys):
    # they built a model and started a server per name (a typo failed minutes later; a repeat or
    # an empty item ran fewer servers than asked for without a word)
    module = load_benchmark(script)
    if script == "live_paired":
        line = _one_error_line(lambda: module.parse_args(["--policies", text]), capsys)
    else:
        monkeypatch.setattr(module, "live", _no_replay)
        line = _one_error_line(lambda: module.main(["--live", "t.jsonl", "--policies", text]), capsys)
    assert line.startswith("error: ") and "--policies" in line and message in line, line
    if message.startswith("unknown"):
        assert "pbkv-he" in line  # the known names are listed


def test_live_paired_reads_the_list_in_order():
    assert load_benchmark("live_paired").parse_args(["--policies", "pbkv-he, lru"]).policies == ["pbkv-he", "lru"]


@pytest.mark.parametrize("text, message", LIVE_BAD[:2] + [("lru,opt", "unknown policy 'opt' in --policies")])
def test_router_live_refuses_the_list_in_one_line(text, message, monkeypatch, capsys):
    module = load_benchmark("router_live")
    line = _one_error_line(lambda: module.main(["--policies", text]), capsys)
    assert line.startswith("error: ") and "--policies" in line and message in line, line


@pytest.mark.parametrize("text, message", [
    ("consistent_hashing,cache-aware", "unknown router 'cache-aware' in --routers; known: consistent_hashing, "
                                       "cache_aware, round_robin, manual, prefix_hash, power_of_two, random"),
    ("round_robin,,cache_aware", "--routers 'round_robin,,cache_aware': item 2 is empty (a doubled or trailing comma?)"),
    ("random, random", "--routers 'random, random': router 'random' is listed twice"),
])
def test_router_live_refuses_an_unknown_router_in_one_line_before_any_run(text, message, monkeypatch, capsys):
    # an unknown name reached local_cluster only when its run started, after the pilot run and
    # every earlier router's runs
    module = load_benchmark("router_live")
    monkeypatch.setattr(module, "run", _no_replay)
    monkeypatch.setattr(module, "_pilot_capacity", _no_replay)
    monkeypatch.setattr(module, "check_output", _no_replay)  # checked after the lists: not reached
    assert _one_error_line(lambda: module.main(["--routers", text]), capsys) == f"error: {message}"
    assert module.parse_routers(" round_robin,consistent_hashing") == ["round_robin", "consistent_hashing"]
