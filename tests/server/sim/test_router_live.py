"""``benchmarks/router_live.py``: bad options are one ``error:`` line before anything starts, and
SIGTERM stops the replicas and the router as Ctrl-C does. No server is started here."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import tempfile
import time

import pytest

from .sim_fixtures import load_benchmark


def _nothing_starts(monkeypatch, module) -> None:
    def started(*args, **kwargs):
        pytest.fail(f"started before refusing the options: {args}")

    for name in ("local_cluster", "free_port", "_load_claims", "_pilot_capacity", "run", "_exit_on_sigterm"):
        monkeypatch.setattr(module, name, started)


@pytest.mark.parametrize("argv, line", [
    (["--replicas", "0"], "--replicas must be >= 1, got 0"),  # ZeroDivisionError
    (["--claims", "0"], "--claims must be >= 1, got 0"),
    (["--claims", "-1"], "--claims must be >= 1, got -1"),
    (["--concurrency", "0"], "--concurrency must be >= 1, got 0"),  # hung
    (["--device-tokens", "-5"], "--device-tokens must be >= 1, got -5"),
    (["--device-tokens", "0"], "--device-tokens must be >= 1, got 0"),
    (["--failure", "--kill-at", "2"],  # a KeyError once every replica had started
     "--kill-at must be a share of the claims above 0 and at most 1, got 2.0"),
    (["--kill-at", "0"], "--kill-at must be a share of the claims above 0 and at most 1, got 0.0"),
    (["--kill-at", "nan"], "--kill-at must be a share of the claims above 0 and at most 1, got nan"),
    (["--failure", "--replicas", "1"], "--failure kills replica 1 (the second): needs --replicas >= 2, got 1"),
])
def test_a_bad_option_is_one_error_line_before_anything_starts(argv, line, monkeypatch, capsys):
    module = load_benchmark("router_live")
    _nothing_starts(monkeypatch, module)
    with pytest.raises(SystemExit) as stop:
        module.main(argv)
    assert stop.value.code == 2
    assert capsys.readouterr() == ("", f"error: {line}\n")


def test_the_edges_of_the_accepted_values_pass():
    module = load_benchmark("router_live")
    args = module.parse_args(["--claims", "1", "--concurrency", "1", "--replicas", "2", "--device-tokens", "1",
                              "--failure", "--kill-at", "1"])
    assert (args.claims, args.concurrency, args.replicas, args.device_tokens, args.kill_at) == (1, 1, 2, 1, 1.0)


def test_sigterm_runs_the_cluster_cleanup_and_removes_the_partial_files(tmp_path, monkeypatch, capsys):
    """SIGTERM (``timeout``) killed the script and left 4 replicas, the router and its port, and
    the work folder behind: now it unwinds through local_cluster's exit, a second SIGTERM during
    the cleanup does not cut it short, and the exit status is 143."""
    module = load_benchmark("router_live")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    for name in ("CREWAI_DISABLE_TELEMETRY", "OTEL_SDK_DISABLED"):  # set by the script: restored after
        monkeypatch.setenv(name, "x")
    monkeypatch.setattr(module, "_load_claims", lambda n: ["claim"] * n)
    ports = iter(range(20000, 20100))
    monkeypatch.setattr(module, "free_port", lambda: next(ports))
    events = []

    @contextlib.contextmanager
    def fake_cluster(*args, **kwargs):
        events.append("started")
        try:
            yield None
        finally:
            os.kill(os.getpid(), signal.SIGTERM)  # a second one, during the cleanup
            time.sleep(0.05)
            events.append("stopped")

    def fake_run(router, policy, claims, args, device, out, kill=None):
        out.mkdir(parents=True)
        (out / "app.jsonl").write_text("partial\n")
        with module.local_cluster(args.replicas):
            async def app():
                os.kill(os.getpid(), signal.SIGTERM)
                await asyncio.sleep(30)

            asyncio.run(app())
        pytest.fail("SIGTERM did not stop the run")

    monkeypatch.setattr(module, "local_cluster", fake_cluster)
    monkeypatch.setattr(module, "run", fake_run)
    seen = []

    def test_handler(signum, frame):  # never the default action here: that would kill pytest
        seen.append(signum)

    guard = signal.signal(signal.SIGTERM, test_handler)
    try:
        with pytest.raises(SystemExit) as stop:
            module.main(["--device-tokens", "1000", "--claims", "2"])
        restored = signal.getsignal(signal.SIGTERM)
    finally:
        signal.signal(signal.SIGTERM, guard)
    assert stop.value.code == 143
    assert events == ["started", "stopped"] and seen == []  # both signals went to the script's handler
    assert restored is test_handler  # the caller's handler is back
    assert list(tmp_path.iterdir()) == []  # the work folder and its partial files are gone
    out, err = capsys.readouterr()
    assert err.startswith(f"stopped; removed {tmp_path}/pbkv-router-live-") and err.count("\n") == 1
