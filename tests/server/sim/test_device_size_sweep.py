"""``benchmarks/device_size_sweep.py``: each size's speedup is lru's mean latency over the
policy's, replayed at that size (checked against direct replays), and bad options are one line."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from pbkv_contract.trace import read_trace
from pbkv_server.hardware.profiles import get_profile
from pbkv_server.predictors import make_predictor
from pbkv_server.sim.simulator import ReplayConfig, ReplayOptions, load_workload, simulate
from pbkv_server.sim.synth.agents import write_trace

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "benchmarks" / "device_size_sweep.py"


@pytest.fixture(scope="module")
def sweep_module():
    spec = importlib.util.spec_from_file_location("device_size_sweep", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def chat_mix(tmp_path_factory):
    path = tmp_path_factory.mktemp("sweep") / "chatmix.jsonl"
    write_trace(str(path), graph="chat-mix", workflows=12, seed=1)
    return path


def _latency(records, policy: str, device: int) -> float:
    config = ReplayConfig(policy, get_profile("h100-qwen2.5-32b"), device_tokens=device, host_tokens=device)
    return simulate(load_workload(records), config,
                    ReplayOptions(concurrency=8, predictor=make_predictor("markov", 3, records))).summary["mean_latency_s"]


def test_each_size_is_lru_over_the_policy_replayed_there(sweep_module, chat_mix):
    records = read_trace(str(chat_mix))
    out = sweep_module.sweep(records, ["pbkv"], get_profile("h100-qwen2.5-32b"), 8, 30_000, 1.0, "markov",
                             offsets=(-3, 0, 5), step=7)
    rows = out["pbkv"]
    assert [r["device"] for r in rows] == [29_979, 30_000, 30_035]
    for r in rows:  # host tier = 1x the swept device, as the direct replays
        assert r["speedup"] == _latency(records, "lru", r["device"]) / _latency(records, "pbkv", r["device"])
    line = sweep_module.summary_line("pbkv", rows)
    assert line.startswith("pbkv: speedup vs lru over 3 sizes mean ")


@pytest.mark.parametrize("args,message", [
    (["--policies", "lru"], "lru is the baseline"),
    (["--offsets", "1,,2"], "item 2 is empty"),
    (["--step", "0"], "--step 0: must be >= 1"),
    (["--offsets=a"], "'a' is not a whole number of steps"),
    (["--offsets=0,0,0"], "--offsets '0,0,0': 0 given more than once"),  # counted as "3 sizes" before
    (["--offsets=-8,8,+8"], "--offsets '-8,8,+8': 8 given more than once"),
    (["--offsets=-40000"], "every swept device must be at least 1 token"),
    (["--host-ratio", "nan"], "--host-ratio nan: must be in [0, "),
    (["--concurrency", "0"], "--concurrency 0: must be >= 1"),
])
def test_bad_options_are_one_line(chat_mix, args, message):
    run = subprocess.run([sys.executable, str(SCRIPT), "--trace", str(chat_mix), "--device", "30000", *args],
                         capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 2
    assert message in run.stderr and len(run.stderr.strip().splitlines()) == 1, run.stderr


def test_json_replaces_only_an_earlier_sweep(sweep_module, chat_mix, tmp_path):
    """``--json`` overwrote any JSON file, e.g. an earlier ``advise`` result (a new-user check): it is
    refused in one line before any replay; an earlier sweep (what :func:`sweep` returns) is not."""
    advised = tmp_path / "advise.json"
    advised.write_text('{"profile": "p", "regime": "r", "verdict": "v"}')
    replayed = tmp_path / "replay.json"
    replayed.write_text('{"lru": {"hit_rate": 0.5}}')
    for path in (advised, replayed):
        before = path.read_bytes()
        run = subprocess.run([sys.executable, str(SCRIPT), "--trace", str(tmp_path / "missing.jsonl"), "--device", "30000",
                              "--json", str(path)], capture_output=True, text=True, cwd=ROOT)
        assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1, run.stderr
        assert run.stderr.startswith(f"error: --json {path}: holds JSON that is not an earlier result")  # not the trace
        assert path.read_bytes() == before
    records = read_trace(str(chat_mix))
    earlier = sweep_module.sweep(records, ["pbkv"], get_profile("h100-qwen2.5-32b"), 8, 30_000, 1.0, "markov",
                                 offsets=(0,), step=1)
    assert sweep_module.is_sweep_result(json.loads(json.dumps(earlier)))
    assert not sweep_module.is_sweep_result({"pbkv": [{"device": 1, "speedup": 1.0}]})
