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

from pbkv_server.cli.server import ServeSettings, app
from pbkv_server.http.config import ServerConfig


def test_flags_build_the_server_config():
    cfg = ServeSettings(policy="pbkv", predictors=["hover=/models/hover.pt", "markov"], idle_retire_s=0,
                       host="127.0.0.1", port=0, pace=0.5, device_tokens=4096)
    assert cfg.predictors == {"hover": "/models/hover.pt", "*": "markov"}
    assert cfg.idle_retire_s is None and cfg.pace == 0.5 and cfg.device_tokens == 4096
    # A predictive policy without --predictor learns online (context); lru needs none.
    assert ServeSettings(policy="he", predictors=[], idle_retire_s=60).predictors == {"*": "context"}
    assert ServeSettings(policy="lru", predictors=[], idle_retire_s=60).predictors == {}
    with pytest.raises(ValueError):
        ServeSettings(policy="lru", predictors=["a=markov", "a=uniform"], idle_retire_s=1)


def test_no_lru_guard_reaches_the_engine_config():
    from pbkv_server.http.service import engine_config_from

    assert engine_config_from(ServeSettings(policy="pbkv", predictors=[], idle_retire_s=60)).lru_guard
    off = ServeSettings(policy="pbkv", predictors=[], idle_retire_s=60, lru_guard=False)
    assert not engine_config_from(off).lru_guard


def test_unknown_policy_exits_2_with_a_clear_message():
    result = CliRunner().invoke(app, ["--policy", "nope", "--port", "0"])
    assert result.exit_code == 2
    assert "unknown policy 'nope'" in result.output
    # the list is what the server runs: not the simulator's offline references, which it refuses
    from pbkv_server.engine.policies import SERVER, available_policies

    assert f"the server runs {', '.join(available_policies(SERVER))}" in result.output
    assert "opt" not in available_policies(SERVER) and ", opt," not in result.output


def test_sglang_engine_hands_over_policy_and_extra_args(monkeypatch):
    calls = []
    fake = types.ModuleType("pbkv_server.backends.sglang.launch")
    fake.main = lambda policy, args: calls.append((policy, args)) or (3 if policy == "kvflow" else 0)
    monkeypatch.setitem(sys.modules, "pbkv_server.backends.sglang.launch", fake)
    result = CliRunner().invoke(app, ["--engine", "sglang", "--policy", "lae", "--", "--model-path", "Qwen/Qwen3-14B"])
    assert result.exit_code == 0, result.output
    assert calls == [("lae", ["--model-path", "Qwen/Qwen3-14B"])]
    # The launcher's exit status (the SGLang server's) becomes the command's.
    assert CliRunner().invoke(app, ["--engine", "sglang", "--policy", "kvflow"]).exit_code == 3


def test_sglang_engine_without_plugin_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "pbkv_server.backends.sglang.launch", None)  # import raises ImportError
    result = CliRunner().invoke(app, ["--engine", "sglang"])
    assert result.exit_code == 2 and "needs the SGLang plugin" in result.output


def test_console_script_serves_until_interrupted(free_port):
    exe = os.path.join(os.path.dirname(sys.executable), "pbkv-server")
    proc = subprocess.Popen([exe, "--port", str(free_port), "--policy", "lae", "--device-tokens", "5000"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120  # a fresh interpreter imports the server: slow under load
        health = None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                health = httpx.get(f"http://127.0.0.1:{free_port}/health", timeout=5).json()
                break
            except httpx.TransportError:
                time.sleep(0.1)
        assert health is not None, proc.stdout.read() if proc.poll() is not None else "no answer"
        assert health["policy"] == "lae" and health["device_tokens"] == 5000
        resp = httpx.post(f"http://127.0.0.1:{free_port}/v1/chat/completions",
                          json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}, timeout=30)
        assert resp.status_code == 200
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=60)
    # uvicorn shuts down gracefully, then re-raises the signal: 130 is the shell's code for SIGINT.
    output = proc.stdout.read()
    assert code in (0, 130) and "Traceback" not in output, output
    assert f"http://127.0.0.1:{free_port}/v1" in output


def _startup_error(args: list[str]) -> str:
    """Run the CLI in-process; assert exit 2 with one ``pbkv-server:`` line and no traceback."""
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("pbkv-server: "), result.output
    assert "Traceback" not in result.output
    return lines[0]


def test_unknown_profile_is_one_line_listing_known_profiles():
    from pbkv_server.hardware.profiles import DEFAULT_PROFILE

    line = _startup_error(["--profile", "nope", "--port", "0"])
    assert "unknown hardware profile 'nope'" in line and DEFAULT_PROFILE in line


@pytest.mark.parametrize("port", ["-1", "70000"])
def test_port_out_of_range_is_one_line(port):
    assert f"port must be in 0..65535 (0 = any free port), got {port}" in _startup_error(["--port", port])


def test_port_in_use_is_one_line_naming_the_address():
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        line = _startup_error(["--port", str(port), "--policy", "lru"])
    assert f"cannot listen on 127.0.0.1:{port}" in line and "in use" in line


@pytest.mark.parametrize("bad, message", [(["--profile", "nope"], "unknown hardware profile 'nope'"),
                                          (["--predictor", "magic"], "unknown predictor"),
                                          (["--trace-out", "/proc/nope/x"], "cannot write the trace")])
def test_a_bad_setting_is_told_before_a_busy_port(bad, message, tmp_path):
    # every setting is checked before the bind: fixing the port first only to learn of the
    # setting next is two round trips where one would do
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        line = _startup_error(["--host", "127.0.0.1", "--port", str(port), "--policy", "pbkv", *bad])
    assert message in line and "cannot listen" not in line


def test_a_busy_port_leaves_no_trace_file(tmp_path):
    import socket

    trace = tmp_path / "t.jsonl"
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        line = _startup_error(["--port", str(port), "--policy", "lru", "--trace-out", str(trace)])
    assert "cannot listen" in line and not trace.exists()


def test_host_not_on_this_machine_is_one_line():
    line = _startup_error(["--host", "192.0.2.1", "--port", "0", "--policy", "lru"])  # TEST-NET-1
    assert "cannot listen on 192.0.2.1:0" in line


@pytest.mark.parametrize("target", ["dir", "/proc/nope/x"])
def test_unwritable_trace_out_is_one_line(tmp_path, target):
    path = str(tmp_path) if target == "dir" else target
    line = _startup_error(["--port", "0", "--policy", "lru", "--trace-out", path])
    assert f"cannot write the trace {path!r}" in line


@pytest.mark.parametrize("under", ["x.jsonl", "a/x.jsonl"])
def test_trace_out_under_a_regular_file_names_it_as_not_a_directory(tmp_path, under):
    (tmp_path / "file").write_text("x")
    path = str(tmp_path / "file" / under)
    line = _startup_error(["--port", "0", "--policy", "lru", "--trace-out", path])
    assert line.endswith(f"cannot write the trace {path!r}: {tmp_path / 'file'} is a file, not a directory")


@pytest.mark.parametrize("content", ["my notes\n", '{"type": "invocation", "v": 2}\n', "\n\x00\xff binary"])
def test_trace_out_on_a_file_that_is_not_a_v1_trace_is_refused_and_kept(tmp_path, content):
    path = tmp_path / "notes.txt"
    path.write_text(content, encoding="latin-1")
    line = _startup_error(["--port", "0", "--policy", "lru", "--trace-out", str(path)])
    assert "it is not a PBKV trace" in line and str(path) in line
    assert path.read_text(encoding="latin-1") == content


def test_trace_out_appends_to_an_existing_trace_and_logs_it(tmp_path, caplog):
    from pbkv_contract.trace import TraceWriter, WorkflowEndRecord, iter_trace
    from pbkv_server.http.served_trace import ServedTrace

    path = tmp_path / "t.jsonl"
    with TraceWriter(path) as writer:
        writer.write(WorkflowEndRecord("a", "w1", 1.0, "done"))
    with caplog.at_level("INFO", logger="pbkv_server.http.served_trace"):
        served = ServedTrace(str(path))
    served.workflow_end("b", "w2", 2.0, "done")
    served.close()
    assert [r.workflow_id for r in iter_trace(path)] == ["w1", "w2"]
    assert any("appending to the existing trace" in r.getMessage() for r in caplog.records)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    caplog.clear()
    with caplog.at_level("INFO", logger="pbkv_server.http.served_trace"):
        ServedTrace(str(empty)).close()  # an empty file is a new trace: accepted, nothing to say
    assert not caplog.records


def test_unknown_log_level_is_one_line():
    assert "unknown --log-level 'banana'" in _startup_error(["--log-level", "banana", "--port", "0"])


def test_negative_idle_retire_is_rejected():
    assert "--idle-retire-s must be a finite number >= 0" in _startup_error(["--idle-retire-s", "-5", "--port", "0"])
    with pytest.raises(ValueError, match="idle_retire_s must be > 0"):
        ServerConfig(policy="lru", predictors=[], idle_retire_s=-5)


@pytest.mark.parametrize("token", ["", "  "])
def test_empty_hint_token_is_rejected_not_silently_disabled(token, monkeypatch):
    assert "--hint-token (or PBKV_HINT_TOKEN) is empty" in _startup_error(["--hint-token", token, "--port", "0"])
    monkeypatch.setenv("PBKV_HINT_TOKEN", token)
    assert "is empty" in _startup_error(["--port", "0"])
    with pytest.raises(ValueError, match="hint_token must not be empty"):
        ServerConfig(policy="lru", predictors=[], idle_retire_s=1, hint_token=token)


def test_sglang_engine_without_sglang_env_says_to_run_setup_script(monkeypatch, tmp_path):
    # An interpreter that exists but has no sglang (a bare venv-less python with an empty path).
    fake = tmp_path / "python"
    fake.write_text(f"#!/bin/sh\nexec {sys.executable} -I -S \"$@\"\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PBKV_SGLANG_PYTHON", str(fake))
    result = CliRunner().invoke(app, ["--engine", "sglang", "--", "--model-path", "m"])
    assert result.exit_code == 2, result.output
    assert f"sglang is not installed for {fake}" in result.output
    assert "scripts/setup_sglang.sh" in result.output
    monkeypatch.setenv("PBKV_SGLANG_PYTHON", str(tmp_path / "missing-python"))
    result = CliRunner().invoke(app, ["--engine", "sglang"])
    assert result.exit_code == 2 and "cannot run" in result.output and "setup_sglang.sh" in result.output


def test_empty_host_is_refused_rather_than_listening_on_all_interfaces():
    assert "--host is empty" in _startup_error(["--host", "", "--port", "0"])


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_idle_retire_must_be_finite(value):
    assert "--idle-retire-s must be a finite number" in _startup_error(["--idle-retire-s", value, "--port", "0"])


@pytest.mark.parametrize("value", ["inf", "1e308", "1001", "nan", "-1", "-inf"])
def test_pace_must_be_finite_and_bounded(value):  # an infinite or huge pace held every request for ever
    line = _startup_error(["--pace", value, "--port", "0"])
    assert line == (f"pbkv-server: --pace must be a finite number from 0 to 1000 (0 = as fast as possible), "
                    f"got {float(value):g}")


def test_server_config_refuses_a_huge_pace():
    with pytest.raises(ValueError, match="pace must be a number from 0 to 1000, got 1e"):
        ServerConfig(policy="lru", pace=1e9)
    with pytest.raises(ValueError, match="pace must be a number from 0 to 1000, got nan"):
        ServerConfig(policy="lru", pace=float("nan"))
    assert ServerConfig(policy="lru", pace=1000.0).pace == 1000.0


def test_host_ratio_that_overflows_the_host_size_is_a_clear_error():
    assert "host ratio must be a number from 0" in _startup_error(["--host-ratio", "1e308", "--port", "0"])


def test_limit_flags_reach_the_server_config():
    cfg = ServeSettings(policy="lru", predictors=[], idle_retire_s=1, max_body_bytes=1000, max_header_bytes=2048,
                       max_headers=10, max_prompt_tokens=300)
    assert (cfg.max_body_bytes, cfg.max_header_bytes, cfg.max_headers, cfg.max_prompt_tokens) == (1000, 2048, 10, 300)
    default = ServeSettings(policy="lru", predictors=[], idle_retire_s=1)
    assert (default.max_header_bytes, default.max_headers, default.max_prompt_tokens) == (16 * 1024, 100, None)
    with pytest.raises(ValueError, match="max_header_bytes must be >= 1024"):
        ServeSettings(policy="lru", predictors=[], idle_retire_s=1, max_header_bytes=100)


def test_limit_flags_below_their_minimum_exit_2():
    for args in (["--max-header-bytes", "100"], ["--max-headers", "0"], ["--max-prompt-tokens", "0"],
                 ["--max-body-bytes", "0"]):
        result = CliRunner().invoke(app, [*args, "--port", "0"])
        assert result.exit_code == 2, (args, result.output)


def test_a_missing_scenario_module_is_the_users_not_an_extra(tmp_path, monkeypatch):
    # issue 35: "--scenario nomod:X" said: pbkv-server needs the "server" extra
    line = _startup_error(["--scenario", "nomod_of_the_user:X", "--port", "0"])
    assert "no module named 'nomod_of_the_user'" in line and "extra" not in line, line
    (tmp_path / "user_scenario.py").write_text("import module_the_user_forgot\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    line = _startup_error(["--scenario", "user_scenario:X", "--port", "0"])
    assert "'user_scenario' imports 'module_the_user_forgot', which is not installed" in line, line
    assert "extra" not in line
