"""A real SGLang server on this machine's CPU, started through ``pbkv-server --engine sglang``.

For tests and benchmarks without a GPU: the tiny random model of :mod:`.tiny_model`, SGLang's CPU
engine with plain-torch layers, one torch thread, idle sleeping. :class:`CpuServer` starts the
launcher in its own process group on 127.0.0.1, waits for ``GET /v1/models`` (``/health`` would run
a generation), and stops it with SIGTERM (which the launcher forwards to SGLang). It imports no
SGLang: the server runs in the interpreter given (default: :func:`.launch.sglang_python`).

What such a server shows is cache behaviour (radix tree, eviction order, hints, end signals);
its latency, a 2-layer model on a CPU, says nothing about a GPU.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import httpx

from pbkv_server.testing.local_cluster import free_port

from pbkv_server.backends.sglang.launch import sglang_python

__all__ = ["CpuServer", "cpu_server_args"]

#: ``--mem-fraction-static`` of the probe that first ran SGLang here; the pool itself is
#: ``--max-total-tokens`` tokens.
_MEM_FRACTION = "0.3"


def cpu_server_args(model_dir: str | Path, port: int, max_total_tokens: int, *extra: str) -> list[str]:
    """``sglang.launch_server`` arguments for the CPU engine (README, "Try the SGLang plugin on CPU").

    ``--enable-cache-report`` and ``SGLANG_USE_CPU_ENGINE=1`` are not here: the launcher adds them.
    ``--sleep-on-idle`` keeps an idle scheduler from spinning on a core.
    """
    return ["--model-path", str(model_dir), "--device", "cpu", "--attention-backend", "torch_native",
            "--sampling-backend", "pytorch", "--disable-cuda-graph", "--disable-overlap-schedule",
            "--max-total-tokens", str(max_total_tokens), "--mem-fraction-static", _MEM_FRACTION,
            "--skip-server-warmup", "--sleep-on-idle", "--host", "127.0.0.1", "--port", str(port), *extra]


class CpuServer:
    """``pbkv-server --engine sglang --policy POLICY -- <cpu_server_args>`` as a child process group.

    Args:
        policy: the launcher's ``--policy`` (``lru``, ``pbkv``, ``pbkv-he``, ``pbkv-lae``, ...).
        model_dir: a model folder (e.g. from :func:`.tiny_model.build_tiny_model`).
        log_path: the server's stdout and stderr are appended here.
        max_total_tokens: KV pool, tokens.
        extra_args: more ``sglang.launch_server`` arguments.
        python: interpreter with SGLang (default :func:`.launch.sglang_python`).

    Attributes:
        url: ``http://127.0.0.1:PORT``; proc: the launcher process once launched.
    """

    #: Seconds :meth:`wait_ready` waits from the launch (start-up is 15-40 s on 2 busy cores).
    start_timeout_s = 240.0
    #: Seconds :meth:`stop` waits after SIGTERM before killing the group.
    stop_timeout_s = 60.0

    def __init__(self, policy: str, model_dir: str | Path, log_path: str | Path, max_total_tokens: int = 4096,
                 extra_args: tuple[str, ...] = (), python: str | None = None) -> None:
        self.policy = policy
        self.log_path = Path(log_path)
        self.python = python or sglang_python()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.args = cpu_server_args(model_dir, self.port, max_total_tokens, *extra_args)
        self.proc: subprocess.Popen | None = None
        self._launched_at = 0.0

    def launch(self) -> "CpuServer":
        """Start the launcher (returns at once; see :meth:`wait_ready`).

        Raises:
            RuntimeError: the SGLang environment has no ``pbkv-server`` (run scripts/setup_sglang.sh).
        """
        launcher = Path(self.python).with_name("pbkv-server")
        if not launcher.exists():
            raise RuntimeError(f"{launcher} not found: run scripts/setup_sglang.sh (installs this project into "
                               "the SGLang environment)")
        cmd = [str(launcher)]
        # One torch thread: on a small shared machine, OpenMP threads spin-waiting for a busy core
        # made each decode step about 30x slower (57 ms vs 1.7 ms per token measured here).
        env = {**os.environ, "PBKV_SGLANG_PYTHON": self.python, "OMP_NUM_THREADS": "1"}
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([*cmd, "--engine", "sglang", "--policy", self.policy, "--", *self.args],
                                         stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                         start_new_session=True)
        self._launched_at = time.monotonic()
        return self

    def wait_ready(self) -> "CpuServer":
        """Block until ``GET /v1/models`` answers 200.

        Raises:
            RuntimeError: the server exited or did not answer within :attr:`start_timeout_s`
                (the message holds the tail of its log); a server that timed out is killed.
        """
        if self.proc is None:
            raise RuntimeError("launch() first")
        deadline = self._launched_at + self.start_timeout_s
        with httpx.Client(base_url=self.url, timeout=2.0) as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"{self.policy} server exited with {self.proc.returncode}:\n{self.log_tail()}")
                try:
                    if client.get("/v1/models").status_code == 200:
                        return self
                except httpx.HTTPError:
                    pass
                time.sleep(0.5)
        self.kill()
        raise RuntimeError(f"{self.policy} server did not answer within {self.start_timeout_s:.0f} s:\n"
                           f"{self.log_tail()}")

    def start(self) -> "CpuServer":
        """:meth:`launch`, then :meth:`wait_ready`."""
        return self.launch().wait_ready()

    @property
    def exited(self) -> bool:
        """True once the launcher process has exited (or was never launched)."""
        return self.proc is None or self.proc.poll() is not None

    def terminate(self) -> None:
        """SIGTERM to the launcher, without waiting (it forwards the signal to SGLang)."""
        if not self.exited:
            self.proc.send_signal(signal.SIGTERM)

    def stop(self) -> int | None:
        """:meth:`terminate` and wait; returns the launcher's exit status, or ``None`` if the group had
        to be killed after :attr:`stop_timeout_s`."""
        if self.proc is None:
            return None
        self.terminate()
        try:
            return self.proc.wait(self.stop_timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def kill(self) -> None:
        """SIGKILL the server's process group (its own session, so nothing else is hit)."""
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(10)

    def log_tail(self, chars: int = 4000) -> str:
        """The last ``chars`` characters of the server log."""
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return text[-chars:]

    def flush(self) -> None:
        """Empty the radix cache (``POST /flush_cache``; no request may be running).

        Raises:
            RuntimeError: SGLang refused (a request is still running).
        """
        r = httpx.post(f"{self.url}/flush_cache", timeout=60)
        if r.status_code != 200:
            raise RuntimeError(f"flush_cache: HTTP {r.status_code} {r.text[:200]}")
