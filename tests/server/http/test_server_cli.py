"""``pbkv-server`` command line: flags reach the server, bad flags exit 2, sglang hand-over."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import types

import httpx
import pytest
from typer.testing import CliRunner

from pbkv_server.cli import app, build_config


def test_flags_build_the_server_config():
    cfg = build_config(policy="pbkv", predictor=["hover=/models/hover.pt", "markov"], idle_retire_s=0,
                       host="127.0.0.1", port=0, pace=0.5, device_tokens=4096)
    assert cfg.predictors == {"hover": "/models/hover.pt", "*": "markov"}
    assert cfg.idle_retire_s is None and cfg.pace == 0.5 and cfg.device_tokens == 4096
    # A predictive policy without --predictor learns online (markov); lru needs none.
    assert build_config(policy="he", predictor=[], idle_retire_s=60).predictors == {"*": "markov"}
    assert build_config(policy="lru", predictor=[], idle_retire_s=60).predictors == {}
    with pytest.raises(ValueError):
        build_config(policy="lru", predictor=["a=markov", "a=uniform"], idle_retire_s=1)


def test_unknown_policy_exits_2_with_a_clear_message():
    result = CliRunner().invoke(app, ["--policy", "nope", "--port", "0"])
    assert result.exit_code == 2
    assert "unknown policy 'nope'" in result.output


def test_sglang_engine_hands_over_policy_and_extra_args(monkeypatch):
    calls = []
    fake = types.ModuleType("pbkv_server.sglang.launch")
    fake.main = lambda policy, args: calls.append((policy, args)) or (3 if policy == "kvflow" else 0)
    monkeypatch.setitem(sys.modules, "pbkv_server.sglang.launch", fake)
    result = CliRunner().invoke(app, ["--engine", "sglang", "--policy", "lae", "--", "--model-path", "Qwen/Qwen3-14B"])
    assert result.exit_code == 0, result.output
    assert calls == [("lae", ["--model-path", "Qwen/Qwen3-14B"])]
    # The launcher's exit status (the SGLang server's) becomes the command's.
    assert CliRunner().invoke(app, ["--engine", "sglang", "--policy", "kvflow"]).exit_code == 3


def test_sglang_engine_without_plugin_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "pbkv_server.sglang.launch", None)  # import raises ImportError
    result = CliRunner().invoke(app, ["--engine", "sglang"])
    assert result.exit_code == 2 and "needs the SGLang plugin" in result.output


def test_console_script_serves_until_interrupted(free_port):
    exe = os.path.join(os.path.dirname(sys.executable), "pbkv-server")
    proc = subprocess.Popen([exe, "--port", str(free_port), "--policy", "lae", "--device-tokens", "5000"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 30
        health = None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                health = httpx.get(f"http://127.0.0.1:{free_port}/health", timeout=1).json()
                break
            except httpx.TransportError:
                time.sleep(0.1)
        assert health is not None, proc.stdout.read() if proc.poll() is not None else "no answer"
        assert health["policy"] == "lae" and health["device_tokens"] == 5000
        resp = httpx.post(f"http://127.0.0.1:{free_port}/v1/chat/completions",
                          json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5})
        assert resp.status_code == 200
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=15)
    # uvicorn shuts down gracefully, then re-raises the signal: 130 is the shell's code for SIGINT.
    output = proc.stdout.read()
    assert code in (0, 130) and "Traceback" not in output, output
    assert f"http://127.0.0.1:{free_port}/v1" in output
