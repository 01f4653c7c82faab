"""Shared helpers of the server benchmarks: start pbkv-server as a subprocess, read its /proc figures."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx

from pbkv_server.testing.local_cluster import free_port
from pbkv_server.sim.metrics import percentile  # noqa: F401  (the benchmarks' one percentile rule)


def start_server(*flags: str) -> tuple[subprocess.Popen, str]:
    """Start ``pbkv-server --port FREE FLAGS...`` (stdout discarded) and wait until ``/health`` answers.

    Returns:
        ``(process, base url)``; stop it with :func:`stop_server`.

    Raises:
        RuntimeError: the server exited or did not answer within 60 s.
    """
    port = free_port()
    exe = os.path.join(os.path.dirname(sys.executable), "pbkv-server")
    proc = subprocess.Popen([exe, "--port", str(port), *flags], stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, proc)
    except BaseException:
        stop_server(proc)
        raise
    return proc, url


def stop_server(proc: subprocess.Popen) -> None:
    """Interrupt the server (graceful uvicorn shutdown) and wait for it."""
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=30)


def wait_ready(url: str, proc: subprocess.Popen, timeout_s: float = 60) -> None:
    """Poll ``url/health`` until it answers 200; raise ``RuntimeError`` if the process exits or time runs out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"pbkv-server exited with {proc.returncode}")
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.1)
    raise RuntimeError("pbkv-server did not become ready")


def rss_mib(pid: int) -> float:
    """Resident set size of process ``pid`` in MiB (``VmRSS`` of /proc/PID/status)."""
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (fields 14 and 15 of /proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
