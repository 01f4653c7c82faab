"""``pbkv-bench``: the synth/replay contract and its bad-input behaviour (no tracebacks, exit 2)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pbkv_server.cli.bench import app
from pbkv_server.engine.policies import BASELINE_POLICY, DEFAULT_POLICY, REFERENCE_POLICY, REPLAY, available_policies
from .sim_fixtures import write_model

runner = CliRunner()
REQUIRED = {"hit_rate", "host_hit_rate", "mean_latency_s", "mean_ttft_s", "evictions", "timeline"}


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("bench") / "t.jsonl"
    result = runner.invoke(app, ["synth", "--graph", "codegen", "--workflows", "20", "--seed", "3",
                                 "--out", str(path)])
    assert result.exit_code == 0, result.output
    assert "20 workflows" in result.output
    return path


@pytest.mark.slow
def test_replay_without_policy_runs_every_replay_policy_with_the_contract_keys(trace, tmp_path):
    out, png = tmp_path / "r.json", tmp_path / "r.png"
    result = runner.invoke(app, ["replay", str(trace), "--predictor", "oracle",
                                 "--concurrency", "4", "--profile", "h100-qwen2.5-32b", "--device-tokens", "40000",
                                 "--json", str(out), "--plot", str(png)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert list(data) == available_policies(REPLAY)
    assert {"lru", "lae", "he", "pbkv", "pbkv-aggressive", "kvflow", "belady"} <= set(data)
    for name, summary in data.items():
        assert REQUIRED <= set(summary), name
        assert 0.0 <= summary["hit_rate"] <= 1.0 and summary["device_tokens"] == 40000
        assert summary["timeline"] and {"t_start", "t_end", "hit_rate"} <= set(summary["timeline"][0])
    assert png.stat().st_size > 1000 and png.read_bytes()[:4] == b"\x89PNG"
    assert "belady" in result.output  # the table


@pytest.mark.slow
def test_replay_is_deterministic(trace, tmp_path):
    outs = []
    for i in range(2):
        out = tmp_path / f"{i}.json"
        result = runner.invoke(app, ["replay", str(trace), "--policy", "he", "--predictor", "markov",
                                     "--device-tokens", "30000", "--json", str(out)])
        assert result.exit_code == 0, result.output
        data = json.loads(out.read_text())["he"]
        outs.append((data["hit_rate"], data["evictions"], data["mean_latency_s"]))
    assert outs[0] == outs[1]


@pytest.mark.slow
def test_truncated_line_is_skipped_with_a_warning_naming_the_line(trace, tmp_path):
    lines = trace.read_text().splitlines()
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines[:5] + ['{"type":"invocation","v":1,"app":"co'] + lines[5:]) + "\n")
    proc = subprocess.run([sys.executable, "-m", "pbkv_server.cli.bench", "replay", str(bad), "--policy", "lru",
                           "--device-tokens", "30000", "--json", str(tmp_path / "o.json")],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert f"{bad}:6: skipped 1 of " in proc.stderr and "not valid JSON" in proc.stderr
    assert "Traceback" not in proc.stderr


def _bad(args) -> str:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    text = result.output + (result.stderr if result.stderr_bytes is not None else "")
    assert "Traceback" not in text
    return text


def test_unknown_version_is_a_clear_error(tmp_path):
    path = tmp_path / "v2.jsonl"
    path.write_text('{"type":"invocation","v":2}\n')
    assert "unsupported trace version" in _bad(["replay", str(path), "--policy", "lru"])


def test_trace_without_invocations_is_a_clear_error(tmp_path):
    path = tmp_path / "ends.jsonl"
    path.write_text('{"type":"workflow_end","v":1,"app":"a","workflow_id":"w","t":1.0,"status":"completed"}\n')
    assert "no invocation" in _bad(["replay", str(path), "--policy", "lru"])


def test_missing_file_is_a_clear_error(tmp_path):
    assert "No such file" in _bad(["replay", str(tmp_path / "none.jsonl"), "--policy", "lru"])


@pytest.mark.parametrize("args,message", [
    (["--policy", "fifo"], "unknown policy 'fifo' in --policy; known: lru,"),
    (["--profile", "tpu"], "unknown hardware profile"),
    (["--predictor", "noise:x"], "noise lambda"),
    (["--predictor", "magic"], "unknown predictor"),
    (["--predictor", "/no/such/model.pt"], "predictor model file not found: /no/such/model.pt"),
    (["--concurrency", "0"], "concurrency"),
])
def test_bad_options_are_clear_errors(trace, args, message):
    assert message in _bad(["replay", str(trace), *args])


def test_synth_rejects_unknown_graph_and_existing_output(tmp_path, trace):
    assert "unknown graph" in _bad(["synth", "--graph", "nope", "--out", str(tmp_path / "x.jsonl")])
    assert "exists" in _bad(["synth", "--out", str(trace)])


def test_synth_help_says_an_existing_output_is_refused_as_synth_does(tmp_path, trace):
    result = runner.invoke(app, ["synth", "--help"])
    assert result.exit_code == 0
    words = " ".join(result.output.replace("│", " ").split())  # help wrapped in a box at any width
    assert "appended" not in words and "must not exist yet" in words
    before = trace.read_bytes()
    assert "exists" in _bad(["synth", "--out", str(trace)])
    assert trace.read_bytes() == before  # refused, and nothing was appended


def test_profiles_table_fits_80_columns_with_whole_names(monkeypatch):
    from rich.console import Console

    import pbkv_server.cli.bench as bench_cli
    from pbkv_server.hardware.profiles import PROFILES

    # an 80-column terminal whatever COLUMNS the test run has (the console writes to the runner's stdout)
    monkeypatch.setattr(bench_cli, "console", Console(width=80))
    result = runner.invoke(app, ["profiles"])
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert "…" not in result.output
    assert max(len(line) for line in lines) <= 80
    for name, p in PROFILES.items():  # each row starts with the whole name and ends with host tokens
        row = [line for line in lines if line.split() and line.split()[0] == name]
        assert len(row) == 1, name
        host = p.host_kv_tokens
        assert row[0].split()[-1] == (f"{host / 1e6:.2f}M" if host >= 1e6 else f"{host / 1e3:.1f}k")


def test_replay_with_a_model_for_another_app_is_a_clear_error(trace, tmp_path):
    model = tmp_path / "hover.pt"
    write_model(model, "hover", ["claim", "verify"])
    text = _bad(["replay", str(trace), "--policy", "lru", "--predictor", str(model)])
    assert "trained for app 'hover', not 'codegen'" in text


@pytest.mark.slow
def test_replay_with_a_model_for_the_traces_app_runs(trace, tmp_path):
    model = tmp_path / "codegen.pt"
    write_model(model, "codegen", ["planner", "coder", "tester", "analyzer"])
    out = tmp_path / "r.json"
    result = runner.invoke(app, ["replay", str(trace), "--policy", "he", "--predictor", str(model),
                                 "--device-tokens", "30000", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["he"]["predictor"] == str(model)


def test_profiles_lists_every_profile_with_its_source():
    result = runner.invoke(app, ["profiles"])
    assert result.exit_code == 0
    for name in ("a6000x2-qwen3-32b-tp2", "a6000-qwen3-14b", "h100-qwen2.5-32b"):
        assert name in result.output
    assert "config.json" in result.output


def test_live_replay_subcommand_is_registered_when_its_module_exists(monkeypatch):
    import importlib.machinery
    import types

    import pbkv_server.cli.bench as cli

    calls = []
    module = types.ModuleType("pbkv_server.loadgen.live_replay")
    module.__spec__ = importlib.machinery.ModuleSpec("pbkv_server.loadgen.live_replay", loader=None)

    def command(target: str) -> None:
        """Fake live replay."""
        calls.append(target)

    module.command = command
    monkeypatch.setitem(sys.modules, "pbkv_server.loadgen.live_replay", module)
    monkeypatch.setattr(cli.app, "registered_commands", list(cli.app.registered_commands))
    cli._register_live_replay()
    result = runner.invoke(cli.app, ["live-replay", "http://127.0.0.1:1"])
    assert result.exit_code == 0, result.output
    assert calls == ["http://127.0.0.1:1"]


def test_a_file_that_is_not_a_model_is_a_clear_error(trace, tmp_path):
    junk = tmp_path / "model.pt"
    junk.write_bytes(b"not a model")
    text = _bad(["replay", str(trace), "--policy", "lru", "--predictor", str(junk)])
    assert "model" in text.lower() and str(junk.name) in text


def test_output_paths_are_checked_before_any_run(trace, tmp_path):
    # A directory or a path under a regular file cannot be written: exit 2 up front (the error
    # comes before the table, so no policy was run).
    for option, path in (("--json", tmp_path), ("--plot", tmp_path), ("--json", trace / "o.json")):
        text = _bad(["replay", str(trace), "--policy", "lru", option, str(path)])
        assert f"{option} {path}" in text and "lru " not in text.split("error")[0]


def test_engine_settings_are_checked_before_any_run(trace):
    # pbkv-aggressive checks rho only at its first prefetch; the CLI rejects it before lru runs.
    assert "--rho must be in [0, 1]" in _bad(["replay", str(trace), "--policy", "lru,pbkv-aggressive", "--rho", "2"])
    assert "--gamma" in _bad(["replay", str(trace), "--policy", "he", "--gamma", "0"])
    assert "--device-tokens must be >= 1 token, got 0" in _bad(["replay", str(trace), "--policy", "lru",
                                                                "--device-tokens", "0"])
    assert "--host-tokens must be >= 0 tokens, got -1" in _bad(["replay", str(trace), "--policy", "lru",
                                                                "--host-tokens", "-1"])
    assert "--page-size must be >= 1 token, got 0" in _bad(["replay", str(trace), "--policy", "lru", "--page-size", "0"])
    assert "--horizon must be >= 1, got 0" in _bad(["replay", str(trace), "--policy", "lru", "--horizon", "0"])
    assert "--timeline-bins must be >= 1" in _bad(["replay", str(trace), "--policy", "lru", "--timeline-bins", "0"])


def test_synth_with_bad_arguments_creates_no_file(tmp_path):
    out = tmp_path / "x.jsonl"
    for args in (["--workflows", "0"], ["--block-chars", "3"], ["--graph", "nope"]):
        _bad(["synth", "--out", str(out), *args])
        assert not out.exists(), args  # a later good call must not be refused with "exists"
    assert runner.invoke(app, ["synth", "--out", str(out), "--workflows", "2"]).exit_code == 0


def test_synth_to_an_unwritable_place_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert "is not a directory" in _bad(["synth", "--out", str(blocker / "x.jsonl"), "--workflows", "2"])


def test_tables_fit_80_columns_without_cutting_figures():
    from rich.console import Console

    from pbkv_server.sim.report import breakdown_table, latency_table, results_table

    row = {"hit_rate": 0.2441, "host_hit_rate": 0.2735, "mean_latency_s": 1364.12, "p99_latency_s": 4321.5,
           "mean_ttft_s": 70.025, "evictions": 123456, "prefetched_tokens": 3_869_610,
           "latency_ms": {"eviction_decision": {"mean_ms": 0.0312}}, "gap_closed": -0.1234, "prefill_saved": 0.5079,
           "latency_speedup": 1.1834, "latency_capture": -0.1234,
           "latency_breakdown_s": {"queue_s": 1000.5, "load_s": 12.25, "prefill_s": 100.75, "decode_s": 200.5,
                                   "tool_s": 50.12}}
    rows = {"pbkv-aggressive": row, "lru": dict(row, prefetched_tokens=0, gap_closed=None, latency_capture=None)}
    console = Console(width=80, record=True, file=open("/dev/null", "w"))
    for table in (results_table(rows), latency_table(rows), breakdown_table(rows)):
        console.print(table)
    text = console.export_text()
    assert "…" not in text and max(map(len, text.splitlines())) <= 80
    for cell in ("pbkv-aggressive", "0.244", "-0.12", "0.274", "0.518", "0.508", "1364.1", "4321.5", "70.025",
                 "123456", "3.87M", "0.031", "1.18x", "1000.5", "12.25"):
        assert cell in text, cell
    lru = [line.split() for line in text.splitlines() if line.startswith("lru")]
    assert lru[0][2] == "-" and lru[1][-1] == "-"  # gap closed, latency capture undefined


def test_plot_is_written_at_exactly_the_given_path(tmp_path):
    from pbkv_server.sim.report import plot_timelines

    timeline = [{"t_start": 0.0, "t_end": 1.0, "hit_rate": 0.5}, {"t_start": 1.0, "t_end": 2.0, "hit_rate": None}]
    path = tmp_path / "chart"  # no extension: matplotlib alone would write chart.png
    plot_timelines(path, {"lru": {"hit_rate": 0.5, "timeline": timeline}})
    assert path.read_bytes()[:4] == b"\x89PNG" and not (tmp_path / "chart.png").exists()


@pytest.mark.slow
def test_truncated_last_line_is_skipped_and_the_rest_replayed(trace, tmp_path):
    """A recorder killed mid-write leaves half a last line: it is skipped with a warning naming it,
    and every complete invocation is still replayed."""
    text = trace.read_text()
    lines = text.splitlines()
    n_inv = sum('"type":"invocation"' in line for line in lines)
    cut = tmp_path / "cut.jsonl"
    cut.write_text(text + lines[1][: len(lines[1]) // 2])  # no newline: the writer died mid-line
    out = tmp_path / "o.json"
    proc = subprocess.run([sys.executable, "-m", "pbkv_server.cli.bench", "replay", str(cut), "--policy", "lru",
                           "--device-tokens", "30000", "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert f"{cut}:{len(lines) + 1}" in proc.stderr and "Traceback" not in proc.stderr
    assert json.loads(out.read_text())["lru"]["requests"] == n_inv


def test_synth_rejects_a_directory_and_an_unbounded_workflow_count(tmp_path):
    result = runner.invoke(app, ["synth", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "is a directory" in result.output
    huge = runner.invoke(app, ["synth", "--workflows", "100000000000", "--out", str(tmp_path / "x.jsonl")])
    assert huge.exit_code == 2 and not (tmp_path / "x.jsonl").exists()


def test_replay_reports_the_lru_guard_and_no_lru_guard_turns_it_off(trace, tmp_path):
    figures = {}
    for flag in ("--lru-guard", "--no-lru-guard"):
        out = tmp_path / f"{flag}.json"
        result = runner.invoke(app, ["replay", str(trace), "--policy", "lru,pbkv", "--predictor", "markov",
                                     "--device-tokens", "30000", "--no-gap", flag, "--json", str(out)])
        assert result.exit_code == 0, result.output
        figures[flag] = json.loads(out.read_text())
    on, off = figures["--lru-guard"], figures["--no-lru-guard"]
    guard = on["pbkv"]["guard"]
    assert set(guard) == {"switches", "fallback_evictions", "fallback_eviction_share", "ghost_hit_rate",
                          "ghost_host_hit_rate"}
    assert 0.0 <= guard["fallback_eviction_share"] <= 1.0 and 0.0 < guard["ghost_hit_rate"] <= 1.0
    assert "guard" not in off["pbkv"] and "guard" not in on["lru"]  # lru is not guarded
    assert on["lru"]["hit_rate"] == off["lru"]["hit_rate"]


def test_replay_no_hints_serves_the_trace_as_a_plain_client_sends_it(trace, tmp_path):
    """--no-hints: pbkv has nothing of ours to act on and replays exactly as lru does (its order for
    cache without hints); with hints the same trace replays differently, so the check can fail."""
    figures = {}
    for flag in ("--hints", "--no-hints"):
        out = tmp_path / f"{flag}.json"
        result = runner.invoke(app, ["replay", str(trace), "--policy", f"{BASELINE_POLICY},{DEFAULT_POLICY}",
                                     "--predictor", "oracle", "--device-tokens", "30000", "--no-gap", flag,
                                     "--json", str(out)])
        assert result.exit_code == 0, result.output
        figures[flag] = json.loads(out.read_text())
    plain, hinted = figures["--no-hints"], figures["--hints"]
    for key in ("mean_latency_s", "hit_rate", "evictions"):
        assert plain[DEFAULT_POLICY][key] == plain[BASELINE_POLICY][key], key
    assert hinted[DEFAULT_POLICY]["mean_latency_s"] != hinted[BASELINE_POLICY]["mean_latency_s"]
    assert plain[BASELINE_POLICY]["requests"] == hinted[BASELINE_POLICY]["requests"]
    # the results say how the trace was sent
    assert [plain[p]["hints"] for p in plain] == [False, False] and hinted[DEFAULT_POLICY]["hints"] is True


def test_replay_no_hints_notes_the_policies_that_act_only_on_client_signals(trace):
    """--no-hints with sglang-session or ttl-pin ran silently though both then replay as lru (the
    signals they act on are gone): one note on stderr, the replay still runs."""
    note = ("note: --no-hints: sglang-session (SGLang session id), ttl-pin (cache TTL) act on what the client "
            "sends, which --no-hints removes; they replay as lru here")
    for policies, flag, expected in (("lru,sglang-session,ttl-pin", "--no-hints", [note]),
                                     ("lru,sglang-session,ttl-pin", "--hints", []),
                                     (f"{BASELINE_POLICY},{DEFAULT_POLICY}", "--no-hints", [])):
        result = runner.invoke(app, ["replay", str(trace), "--policy", policies, "--device-tokens", "30000",
                                     "--no-gap", flag])
        assert result.exit_code == 0, result.output
        assert [line for line in result.stderr.splitlines() if line.startswith("note:")] == expected, flag
        assert "note:" not in result.stdout


@pytest.mark.parametrize("args,message", [
    (["--horizon", "1000000000"], "--horizon must be in 1..64"),
    (["--replicas", "1000000"], "--replicas must be in 1..1024"),
    (["--plot", "/proc/pbkv-test/x.png"], "--plot /proc/pbkv-test/x.png: cannot be created: /proc is not writable"),
])
def test_inputs_that_hung_or_failed_late_are_one_line_at_once(trace, args, message):
    # issue 35: --horizon 1e9 and --replicas 1e6 printed nothing for minutes
    text = _bad(["replay", str(trace), "--policy", "lru", *args])
    assert message in text and "━" not in text, text  # no progress bar: nothing was replayed


def test_replay_prints_and_writes_the_bench_serving_figures(trace, tmp_path):
    out = tmp_path / "r.json"
    result = runner.invoke(app, ["replay", str(trace), "--policy", "lru", "--no-gap", "--concurrency", "4",
                                 "--slo-ttft", "1000", "--slo-tpot", "100", "--json", str(out)], terminal_width=80)
    assert result.exit_code == 0, result.output
    s = json.loads(out.read_text())["lru"]
    for metric in ("ttft", "tpot", "itl", "e2e_latency", "workflow_latency"):
        assert {f"{stat}_{metric}_ms" for stat in ("mean", "median", "p90", "p99")} <= set(s), metric
    assert s["median_ttft_ms"] <= s["p90_ttft_ms"] <= s["p99_ttft_ms"]
    assert s["completed"] == s["requests"] and (s["slo_ttft_ms"], s["slo_tpot_ms"]) == (1000, 100)
    assert s["request_goodput"] == pytest.approx(s["slo_attainment"] * s["request_throughput"])
    assert s["hit_rate"] + s["host_hit_rate"] <= s["hit_rate_ceiling"] + 1e-12
    assert "TTFT" in result.output and "goodput" in result.output and "ceil-" in result.output


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
@pytest.mark.parametrize("flag", ["--slo-ttft", "--slo-tpot"])
def test_a_zero_or_not_finite_slo_is_a_clear_error(trace, flag, value):
    # nan was refused by click's range check as "greater than or equal to 0", and 0 passed it
    assert f"{flag} must be a positive number of milliseconds" in _bad(["replay", str(trace), flag, value])


@pytest.mark.parametrize("command", ["replay", "advise"])
def test_a_folder_a_missing_file_and_another_tools_log_are_named_as_such(tmp_path, command):
    (tmp_path / "traces").mkdir()
    raw = tmp_path / "trace_0001.json"  # a kv-cache-tester conversation, not converted
    raw.write_text(json.dumps({"id": "c1", "requests": [{"t": 0.0, "in": 100, "out": 10, "hash_ids": [1, 2]}]}) + "\n")
    cases = {tmp_path / "traces": f"{tmp_path / 'traces'} is a directory; give a trace file (.jsonl)",
             tmp_path / "none.jsonl": f"cannot read {tmp_path / 'none.jsonl'}: No such file or directory",
             raw: "no trace version 'v'); if it is another tool's log, convert it first (pbkv-sdk import --help"}
    for path, line in cases.items():
        result = runner.invoke(app, [command, str(path)])
        assert result.exit_code == 2, result.output
        assert line in " ".join(result.output.split()), result.output
        assert "Errno" not in result.output


@pytest.mark.parametrize("command", ["replay", "advise"])
def test_a_large_trace_is_announced_before_it_is_read(command, trace, monkeypatch):
    # a day of coding-agent traffic is gigabytes: a minute of reading must not be silence
    import pbkv_contract.trace
    import pbkv_server.cli.bench as bench

    def stop(path):
        raise OSError("stopped where the reading starts")

    monkeypatch.setattr(pbkv_contract.trace, "read_trace", stop)
    size = trace.stat().st_size
    monkeypatch.setattr(bench, "ANNOUNCE_READ_BYTES", size)  # this trace counts as large
    said = runner.invoke(app, [command, str(trace)]).output
    assert said.index(f"reading {trace} ({size / 1e9:.1f} GB) ...") < said.index("stopped where the reading starts")
    monkeypatch.setattr(bench, "ANNOUNCE_READ_BYTES", size + 1)
    said = runner.invoke(app, [command, str(trace)]).output
    assert "stopped where the reading starts" in said and "reading" not in said.replace("the reading", "")


@pytest.mark.parametrize("command", ["replay", "advise"])
def test_a_file_of_random_bytes_is_one_line(command, tmp_path):
    # it printed the reader's "skipped N of N lines" warning, then the error saying the same
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_bytes(bytes(range(256)) * 8 + b"\nnot a trace\n")
    proc = subprocess.run([sys.executable, "-m", "pbkv_server.cli.bench", command, str(garbage)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: trace holds no invocation records (") and f"first: {garbage}:1:" in lines[0]


def test_skipped_lines_are_still_a_warning_when_the_trace_has_records(tmp_path, caplog):
    import logging

    from pbkv_contract.trace import read_trace

    good = tmp_path / "good.jsonl"
    runner.invoke(app, ["synth", "--workflows", "1", "--out", str(good)])
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text("garbage\n" + good.read_text())
    with caplog.at_level(logging.WARNING):
        assert read_trace(mixed)
    assert [r.getMessage().split(";")[0] for r in caplog.records] == [
        f"{mixed}:1: skipped 1 of {len(good.read_text().splitlines()) + 1} lines that cannot be used"]


@pytest.mark.parametrize("args", [["--router", "round-robin"], ["--router", "cache-aware"], ["--router", "affinity"],
                                  ["--replicas", "1", "--router", "round-robin"]])
def test_a_router_without_replicas_is_refused_in_one_line(trace, args):
    """``--router`` on one replica was silently accepted (one engine replays, no router runs); the
    default value typed out is refused too: it is as much a forgotten ``--replicas``."""
    _bad(["replay", str(trace), *args])
    result = runner.invoke(app, ["replay", str(trace), *args])
    assert result.output == "error: --router needs --replicas > 1 (one replica replays on one engine, without a router)\n"


def test_replay_help_names_the_policies_and_shows_no_markup():
    result = runner.invoke(app, ["replay", "--help"], env={"COLUMNS": "80", "TERMINAL_WIDTH": "80"})
    assert result.exit_code == 0, result.output
    words = " ".join(result.output.replace("│", " ").split())
    assert "``" not in result.output and ":mod:" not in result.output and "_POLICY" not in result.output
    assert f"baseline's ({BASELINE_POLICY}) and h_ref the offline reference's ({REFERENCE_POLICY})" in words
    assert f"speedup vs {BASELINE_POLICY} and latency capture" in words
