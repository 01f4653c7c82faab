"""``pbkv-bench advise``: regime, speedups over LRU and the verdict; capacity by the profile rule."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from pbkv_contract.trace import read_trace
from pbkv_server.cli.bench import app
from pbkv_server.sim.advise import advise, advised_policies, custom_profile
from pbkv_server.hardware.profiles import PROFILES, get_profile
from pbkv_server.sim.synth.agents import write_trace

runner = CliRunner()


def _trace(tmp_path, graph, n, seed):
    path = tmp_path / f"{graph}.jsonl"
    write_trace(str(path), graph=graph, workflows=n, seed=seed)
    return path


def test_chat_trace_says_no_gain(tmp_path):
    trace = _trace(tmp_path, "chat", 20, 1)
    plot, out = tmp_path / "advise.png", tmp_path / "advise.json"
    result = runner.invoke(app, ["advise", str(trace), "--profile", "h100-qwen2.5-32b", "--concurrency", "8",
                                 "--plot", str(plot), "--json", str(out)])
    assert result.exit_code == 0, result.output
    verdict = [line for line in result.output.splitlines() if line.startswith("verdict:")]
    assert len(verdict) == 1 and "no gain" in verdict[0], result.output
    data = json.loads(out.read_text())
    # the headline policies and what SGLang (the default --engine) ships
    assert list(data["speedup"]) == advised_policies("sglang")
    assert {"lru", "lae", "he", "pbkv", "sglang-session", "sglang-priority", "opt"} <= set(data["speedup"])
    # speedup is L_lru / L_policy, from the replayed latencies
    for p, s in data["speedup"].items():
        assert s == pytest.approx(data["latency_s"]["lru"] / data["latency_s"][p])
    # the bench_serving figures per policy and the trace's ceiling, in the JSON and two lines of text
    assert data["hit_rate_ceiling"] >= max(data["hit_rate"].values()) - 1e-12
    assert set(data["serving"]) == set(data["speedup"])
    assert data["serving"]["pbkv"]["p99_ttft_ms"] >= data["serving"]["pbkv"]["median_ttft_ms"] > 0
    assert "hit-rate ceiling (an infinite cache on this trace)" in result.output
    assert [line for line in result.output.splitlines() if line.startswith("pbkv: TTFT mean/p50/p90/p99")]
    assert data["speedup"]["opt"] < 1.03 and plot.stat().st_size > 0


def test_no_reference_skips_opt_and_keeps_every_other_figure(tmp_path, monkeypatch):
    # on a day of traffic opt (up to 8 replays) is most of advise's time: --no-reference skips it
    import pbkv_server.sim.simulator as simulator

    trace = _trace(tmp_path, "chat", 12, 1)
    replayed, simulate = [], simulator.simulate
    monkeypatch.setattr(simulator, "simulate", lambda w, c, o, **k: replayed.append(c.policy) or simulate(w, c, o, **k))
    runs = {}
    for flags in ((), ("--no-reference",)):
        out = tmp_path / f"advise{len(flags)}.json"
        result = runner.invoke(app, ["advise", str(trace), "--profile", "h100-qwen2.5-32b", "--concurrency", "4",
                                     "--json", str(out), *flags])
        assert result.exit_code == 0, result.output
        runs[flags] = (json.loads(out.read_text()), result.output)
    (full, _), (short, said) = runs[()], runs[("--no-reference",)]
    assert replayed.count("opt") == 1 and len(replayed) == 2 * len(advised_policies("sglang")) - 1
    assert list(short["speedup"]) == [p for p in advised_policies("sglang") if p != "opt"]
    assert short["speedup"] == {p: v for p, v in full["speedup"].items() if p != "opt"}  # replays are deterministic
    verdict = [line for line in said.splitlines() if line.startswith("verdict:")]
    assert verdict == ["verdict: no gain from PBKV: 1.00x LRU (offline reference not replayed); best online policy "
                       + verdict[0].split("best online policy ")[1]]


def test_memory_short_codegen_names_the_short_regime(tmp_path):
    records = read_trace(_trace(tmp_path, "codegen", 12, 2))
    a = advise(records, get_profile("h100-qwen2.5-32b"), concurrency=8, policies=("lru", "pbkv"))
    assert a.regime == "short"
    assert a.in_flight_tokens + a.live_tokens > a.device_tokens + a.host_tokens
    assert a.host_tokens == a.device_tokens  # the paper's host tier: 1x device
    assert a.speedup["lru"] == 1.0 and math.isfinite(a.speedup["pbkv"])


def test_a_request_larger_than_the_device_is_named_and_not_replayed(tmp_path):
    records = read_trace(_trace(tmp_path, "coding-agent", 2, 0))
    a = advise(records, get_profile("h100-qwen2.5-32b"))
    assert a.regime == "request too large" and not a.latency_s and a.verdict.startswith("no:")


def test_gpu_memory_and_model_follow_the_profile_rule():
    # the profiles' own GPUs, given as memory per GPU in GiB (nvidia-smi's MiB / 1024)
    assert custom_profile(81559 / 1024, "qwen2.5-32b").device_kv_tokens == PROFILES["h100-qwen2.5-32b"].device_kv_tokens
    assert custom_profile(49140 / 1024, "Qwen/Qwen3-32B", tp=8, gpu="a6000").device_kv_tokens == \
        PROFILES["a6000x8-qwen3-32b-tp8"].device_kv_tokens
    # by hand: 2 x 80 GiB, Qwen3-14B (14.8e9 params bf16; KV 2 x 40 layers x 8 heads x 128 x 2 B = 163,840 B/token)
    free = 2 * 80 * 2**30 * 0.88 - 14.8e9 * 2
    assert custom_profile(80, "qwen3-14b", tp=2).device_kv_tokens == int(free // 163_840)


def test_cli_rejects_half_a_custom_setup(tmp_path):
    trace = _trace(tmp_path, "chat", 2, 0)
    result = runner.invoke(app, ["advise", str(trace), "--gpu-memory", "80"])
    assert result.exit_code == 2 and "go together" in result.output
    result = runner.invoke(app, ["advise", str(trace), "--gpu-memory", "80", "--model", "llama"])
    assert result.exit_code == 2 and "unknown model" in result.output and "Traceback" not in result.output


def _one_error_line(result) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and "replaying" not in result.output, result.output  # before any replay
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


@pytest.mark.parametrize("args,message", [
    (["--host-ratio", "1e308"], "--host-ratio: host ratio must be a number from 0 (no host tier) to 1000"),
    (["--host-ratio", "nan"], "--host-ratio: host ratio must be a number"),
    (["--gpu-memory", "1e30", "--model", "qwen3-14b"], "GPU memory must be a positive number of GiB up to 1024"),
    (["--gpu-memory", "80", "--model", "qwen3-14b", "--tp", "100"], "--tp must be at most 72"),
    (["--predictor", "bogus"], "unknown predictor 'bogus'"),
    (["--gpu-memory", "80", "--model", "qwen3-14b", "--tp", "0"], "error: --tp must be >= 1, got 0"),  # named --concurrency
    (["--plot", "/proc/pbkv-test/x.png"], "--plot /proc/pbkv-test/x.png: cannot be created: /proc is not writable"),
])
def test_bad_inputs_are_one_line_before_any_replay(tmp_path, args, message):
    # issue 35: an OverflowError traceback, 1e30 GiB accepted, and errors only after every replay ran
    trace = _trace(tmp_path, "chat", 2, 0)
    line = _one_error_line(runner.invoke(app, ["advise", str(trace), *args]))
    assert message in line, line


@pytest.mark.parametrize("option, head", [("--json", b"{"), ("--plot", b"\x89PNG")])
def test_an_output_in_a_missing_folder_is_written_there(tmp_path, option, head):
    # the folders are made, as by every pbkv-bench output, synth --out and pbkv-sdk import --out;
    # a bare name is written as given (PNG for a plot), nothing left aside
    trace = _trace(tmp_path, "chat", 2, 0)
    out = tmp_path / "new" / "dir" / "a"
    result = runner.invoke(app, ["advise", str(trace), "--concurrency", "2", option, str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_bytes().startswith(head) and [p.name for p in out.parent.iterdir()] == ["a"]


def test_a_json_path_in_an_existing_folder_is_written(tmp_path):
    trace = _trace(tmp_path, "chat", 4, 0)
    out = tmp_path / "a.json"
    result = runner.invoke(app, ["advise", str(trace), "--concurrency", "2", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["concurrency"] == 2
    file = tmp_path / "file.txt"
    file.write_text("x")
    assert "is not a directory" in _one_error_line(runner.invoke(app, ["advise", str(trace), "--json",
                                                                       str(file / "a.json")]))
