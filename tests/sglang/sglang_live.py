"""Real SGLang servers for the tests: the tiny random model on CPU, started by ``pbkv-server --engine sglang``.

One server per policy is shared by every test that needs it (see ``live_servers`` in conftest.py);
each test starts with :meth:`LiveServer.flush` so it sees an empty pool. Prompts are token ids
(``/generate``) drawn from a PRNG seeded by the test, so sizes and shared prefixes are exact.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

#: KV pool of every test server, tokens (``--max-total-tokens``).
POOL_TOKENS = 4096
#: Token ids of test prompts are drawn from [ID_LOW, vocab) of the tiny model (8,192 entries).
ID_LOW, VOCAB = 1000, 8192
START_TIMEOUT_S = 240.0
STOP_TIMEOUT_S = 60.0


def prompt_ids(n: int, seed: Any) -> list[int]:
    """``n`` token ids determined by ``seed`` (distinct seeds: prompts that share nothing)."""
    rng = random.Random(f"pbkv-test:{seed}")
    return [rng.randrange(ID_LOW, VOCAB) for _ in range(n)]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sglang_args(model_dir: Path, port: int, pool_tokens: int = POOL_TOKENS) -> list[str]:
    """``sglang.launch_server`` arguments of the test servers (README, "Try the SGLang plugin on CPU").

    ``--enable-cache-report`` and ``SGLANG_USE_CPU_ENGINE=1`` are left out on purpose: the launcher adds them.
    """
    return ["--model-path", str(model_dir), "--device", "cpu", "--attention-backend", "torch_native",
            "--sampling-backend", "pytorch", "--disable-cuda-graph", "--disable-overlap-schedule",
            "--max-total-tokens", str(pool_tokens), "--mem-fraction-static", "0.3", "--skip-server-warmup",
            "--enable-metrics", "--host", "127.0.0.1", "--port", str(port)]


class LiveServer:
    """``pbkv-server --engine sglang --policy POLICY -- <sglang_args>`` in its own process group.

    Args:
        policy: the launcher's ``--policy``.
        model_dir: the tiny model folder.
        log_path: the server's stdout and stderr go here.

    Attributes:
        url: ``http://127.0.0.1:PORT``; proc: the launcher process (``None`` before :meth:`start`).
    """

    def __init__(self, policy: str, model_dir: Path, log_path: Path) -> None:
        self.policy = policy
        self.model_dir = model_dir
        self.log_path = log_path
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.client = httpx.Client(base_url=self.url, timeout=120.0)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> "LiveServer":
        """:meth:`launch` and :meth:`wait_ready`."""
        return self.launch().wait_ready()

    def launch(self) -> "LiveServer":
        """Start the launcher process (returns at once)."""
        launcher = Path(sys.executable).with_name("pbkv-server")
        # One torch thread: on a small shared machine OpenMP threads that spin-wait for a busy core
        # make each decode step 30x slower (measured: 57 ms vs 1.7 ms per token).
        env = {**os.environ, "PBKV_SGLANG_PYTHON": sys.executable, "OMP_NUM_THREADS": "1"}
        env.pop("SGLANG_USE_CPU_ENGINE", None)  # the launcher must set it for --device cpu
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [str(launcher), "--engine", "sglang", "--policy", self.policy, "--",
                 *sglang_args(self.model_dir, self.port)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        self._launched_at = time.monotonic()
        return self

    def wait_ready(self) -> "LiveServer":
        """Wait until ``GET /v1/models`` answers (``/health`` would run a generation).

        Raises:
            RuntimeError: the server exited or did not answer in time (the message holds its log tail).
        """
        assert self.proc is not None, "launch() first"
        deadline = self._launched_at + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.policy} server exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if self.client.get("/v1/models", timeout=2.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.kill()
        raise RuntimeError(f"{self.policy} server did not answer within {START_TIMEOUT_S:.0f} s:\n{self.log_tail()}")

    def stop(self) -> int | None:
        """SIGTERM to the launcher (which forwards it to SGLang); returns the launcher's exit status.
        A server still alive after :data:`STOP_TIMEOUT_S` has its process group killed (status None)."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.terminate()
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.kill()
                return None
        return self.proc.returncode

    def terminate(self) -> None:
        """Send SIGTERM to the launcher without waiting."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL the server's own process group (it was started in a new session)."""
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(10)

    def log_tail(self, chars: int = 4000) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return text[-chars:]

    def log_size(self) -> int:
        return self.log_path.stat().st_size

    def log_since(self, offset: int) -> str:
        with open(self.log_path, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")

    # ------------------------------------------------------------------ requests
    def flush(self) -> None:
        """Empty the radix cache (no request may be running)."""
        r = self.client.post("/flush_cache")
        assert r.status_code == 200, r.text

    def generate(self, ids: list[int], hints: dict | None = None, max_new_tokens: int = 1) -> dict:
        """``/generate`` with ``input_ids`` (greedy, ``ignore_eos``); returns ``meta_info``."""
        params: dict[str, Any] = {"max_new_tokens": max_new_tokens, "ignore_eos": True, "temperature": 0.0}
        if hints is not None:
            params["custom_params"] = {"pbkv": hints}
        r = self.client.post("/generate", json={"input_ids": ids, "sampling_params": params})
        assert r.status_code == 200, r.text
        return r.json()["meta_info"]

    def cached(self, ids: list[int]) -> int:
        """Tokens of ``ids`` the cache holds now, read from a probe request (anonymous, one output token).
        A prompt held entirely reports ``len(ids) - 1``: SGLang always recomputes the last token."""
        return self.generate(ids)["cached_tokens"]

    def chat(self, text: str, headers: dict | None = None, body_hints: dict | None = None, max_tokens: int = 1) -> dict:
        """Streaming ``/v1/chat/completions``; returns the final ``usage`` object."""
        body: dict[str, Any] = {"model": "default", "messages": [{"role": "user", "content": text}],
                                "max_tokens": max_tokens, "temperature": 0.0, "stream": True,
                                "stream_options": {"include_usage": True}}
        if body_hints is not None:
            body["custom_params"] = {"pbkv": body_hints}
        usage = None
        with self.client.stream("POST", "/v1/chat/completions", json=body, headers=headers or {}) as r:
            assert r.status_code == 200, r.read()
            for line in r.iter_lines():
                if line.startswith("data:") and '"usage"' in line and line[5:].strip() != "[DONE]":
                    chunk = httpx.Response(200, content=line[5:].strip()).json()
                    usage = chunk.get("usage") or usage
        assert usage is not None, "no usage chunk in the stream"
        return usage

    def end(self, workflow_id: str, status: str = "completed") -> int:
        """``POST /pbkv/v1/workflows/{id}/end``; returns the HTTP status."""
        return self.client.post(f"/pbkv/v1/workflows/{workflow_id}/end", json={"status": status}).status_code

    def metric(self, name: str) -> float:
        """Sum of every sample of Prometheus metric ``name`` on ``/metrics`` (0 if absent)."""
        total = 0.0
        for line in self.client.get("/metrics").text.splitlines():
            if line.startswith(name) and line[len(name)] in " {":
                total += float(line.rsplit(" ", 1)[1])
        return total


def hints(workflow_id: str, app: str, agent: str = "solo", step: int = 0) -> dict:
    """A hint-protocol v1 body object."""
    return {"workflow_id": workflow_id, "agent": agent, "step": step, "app": app}
