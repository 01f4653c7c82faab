"""Real SGLang servers for the tests: the tiny random model on CPU, started by ``pbkv-server --engine sglang``.

One server per policy is shared by every test that needs it (see ``live_servers`` in conftest.py);
each test starts with :meth:`LiveServer.flush` so it sees an empty pool. Prompts are token ids
(``/generate``) drawn from a PRNG seeded by the test, so sizes and shared prefixes are exact.
"""

from __future__ import annotations

import itertools
import random
import sys
from pathlib import Path
from typing import Any

import httpx

from pbkv_server.testing.sglang.cpu_server import CpuServer

#: KV pool of every test server, tokens (``--max-total-tokens``).
POOL_TOKENS = 4096
#: Token ids of test prompts are drawn from [ID_LOW, vocab) of the tiny model (8,192 entries).
ID_LOW, VOCAB = 1000, 8192


_first_ids = itertools.count(ID_LOW)


def prompt_ids(n: int, seed: Any) -> list[int]:
    """``n`` token ids: a first token no other prompt of the session starts with, then ids drawn
    from a PRNG seeded by ``seed``. Two prompts thus share no prefix unless a test builds one
    (``p + q``, ``p[:50] + r``); random first tokens would match by chance (1 in 7,192 per pair)
    and turn an expected 0 cached tokens into 1."""
    rng = random.Random(f"pbkv-test:{seed}")
    first = next(_first_ids)
    assert first < VOCAB, "more prompts than distinct first tokens"
    return [first] + [rng.randrange(ID_LOW, VOCAB) for _ in range(n - 1)]


def hints(workflow_id: str, app: str, agent: str = "solo", step: int = 0) -> dict:
    """A hint-protocol v1 body object."""
    return {"workflow_id": workflow_id, "agent": agent, "step": step, "app": app}


class LiveServer(CpuServer):
    """A :class:`CpuServer` in this interpreter's environment (.venv-sglang), with ``--enable-metrics``,
    plus the requests the tests send."""

    def __init__(self, policy: str, model_dir: Path, log_path: Path) -> None:
        super().__init__(policy, model_dir, log_path, POOL_TOKENS, ("--enable-metrics",), python=sys.executable)
        self.client = httpx.Client(base_url=self.url, timeout=120.0)

    def log_size(self) -> int:
        return self.log_path.stat().st_size

    def log_since(self, offset: int) -> str:
        with open(self.log_path, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")

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
                    usage = httpx.Response(200, content=line[5:].strip()).json().get("usage") or usage
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
