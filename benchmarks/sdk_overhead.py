"""Time the PBKV SDK adds to one LLM request, for each stamping path.

Each mode sends the same chat-completions POST (a 6-message, ~2.4 kB body) through an
``httpx.Client`` whose innermost transport is httpx's own ``HTTPTransport`` with a connection
pool that answers at once from memory, so the figure is the SDK's own CPU time, not network time.
Modes run interleaved in rounds, to spread drift evenly; per mode we report the median time per
request and the median added over the baseline client (plain httpx, nothing patched), in
microseconds. Paths:

* explicit client: ``http_client=pbkv_sdk.http_client()`` (PBKVTransport), with and without body
  hints and trace recording;
* instrument only: the process-wide patched ``HTTPTransport`` (LangGraph, AutoGen, CrewAI,
  Agents SDK), inside a workflow context, and outside any workflow (what other traffic pays);
* OpenTelemetry: the patched transport finding the workflow through the current span
  (``pbkv_sdk.integrations.otel``), when the ``otel`` extra is installed.

Usage: ``python benchmarks/sdk_overhead.py [--requests N] [--rounds R]``
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time

import contextlib
from typing import Callable

import httpcore
import httpx

import pbkv_sdk
from pbkv_sdk import autopatch
from pbkv_sdk.recorder import flush_all
from pbkv_sdk.stamping import PBKVTransport

BODY = {
    "model": "m",
    "messages": [{"role": "system", "content": "You are the verifier of a fact-checking team. " * 8}]
    + [{"role": "user" if i % 2 else "assistant", "content": f"Note {i}: " + "evidence text " * 25} for i in range(5)],
}
RESPONSE = {
    "id": "x",
    "object": "chat.completion",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "verified"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 600, "completion_tokens": 1, "total_tokens": 601},
}


class _MemoryPool:
    """Stands in for httpcore's connection pool: every request gets the same JSON answer."""

    payload = json.dumps(RESPONSE).encode()

    def handle_request(self, request: httpcore.Request) -> httpcore.Response:
        for _ in request.stream:  # read the body, as a real connection would
            pass
        return httpcore.Response(200, headers=[(b"content-type", b"application/json")], content=self.payload)

    def close(self) -> None:
        pass


def _mock() -> httpx.HTTPTransport:
    transport = httpx.HTTPTransport()
    transport._pool = _MemoryPool()  # type: ignore[assignment]  # no public hook for a pool
    return transport


def _otel_span() -> "Callable[[], contextlib.AbstractContextManager] | None":
    """Makes an OpenTelemetry agent span (current around the requests, seen by the PBKV span processor)."""
    try:
        from opentelemetry.sdk.trace import TracerProvider

        from pbkv_sdk.integrations import otel
    except ImportError:
        return None
    os.environ.pop("OTEL_SDK_DISABLED", None)
    provider = TracerProvider()
    otel.instrument(app="bench", server_url="http://127.0.0.1:9", end_timeout_s=0.01, tracer_provider=provider)
    tracer = provider.get_tracer("bench")
    return lambda: tracer.start_as_current_span("invoke_agent", attributes={"gen_ai.agent.name": "verifier"})


def _time_requests(client: httpx.Client, n: int) -> list[float]:
    content = json.dumps(BODY).encode()
    out = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        client.post("http://bench/v1/chat/completions", content=content, headers={"content-type": "application/json"}).read()
        out.append((time.perf_counter_ns() - t0) / 1000.0)
    return out


def main() -> None:
    """Run the benchmark and print one line per mode."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=500, help="requests per mode per round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    # The workflows end against a closed port on purpose (no server needed): keep that expected
    # fail-open warning out of the printed figures.
    logging.getLogger("pbkv_sdk.ending").setLevel(logging.ERROR)
    trace_dir = tempfile.mkdtemp(prefix="pbkv-bench-")
    trace_path = os.path.join(trace_dir, "bench.jsonl")
    otel_span = _otel_span()
    # mode -> (client, workflow kwargs or None for no workflow, patched transports?)
    clients = {
        "baseline (plain httpx)": (httpx.Client(transport=_mock()), None, False),
        "explicit client: stamping": (httpx.Client(transport=PBKVTransport(_mock())), dict(), False),
        "explicit client: + body hints": (httpx.Client(transport=PBKVTransport(_mock(), body_hints=True)), dict(), False),
        "explicit client: + trace": (httpx.Client(transport=PBKVTransport(_mock())), dict(trace_path=trace_path), False),
        "instrument only: stamping": (httpx.Client(transport=_mock()), dict(), True),
        "instrument only: no workflow": (httpx.Client(transport=_mock()), None, True),
    }
    if otel_span is not None:
        clients["otel span: stamping"] = (httpx.Client(transport=_mock()), "otel", True)
    samples: dict[str, list[float]] = {name: [] for name in clients}
    for _ in range(args.rounds + 1):  # the first round warms up and is dropped
        for name, (client, wf_kwargs, patched) in clients.items():
            n = args.requests if _ else 50
            if patched:
                autopatch.acquire("bench")
            try:
                if wf_kwargs is None:
                    times = _time_requests(client, n)
                elif wf_kwargs == "otel":
                    with otel_span():
                        times = _time_requests(client, n)
                else:
                    with pbkv_sdk.workflow(app="bench", server_url="http://127.0.0.1:9", end_timeout_s=0.01, **wf_kwargs):
                        with pbkv_sdk.agent("verifier"):
                            times = _time_requests(client, n)
            finally:
                if patched:
                    autopatch.release("bench")
            if _:
                samples[name] += times
    flush_all(30.0)
    base = statistics.median(samples["baseline (plain httpx)"])
    print(f"python {sys.version.split()[0]}, httpx {httpx.__version__}, {args.rounds} x {args.requests} requests per mode")
    print(f"{'mode':34s} {'median us/request':>18s} {'added us (median)':>18s}")
    for name, values in samples.items():
        med = statistics.median(values)
        print(f"{name:34s} {med:18.1f} {med - base:18.1f}")


if __name__ == "__main__":
    main()
