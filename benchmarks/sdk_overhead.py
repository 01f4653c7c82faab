"""Time the PBKV SDK adds to one LLM request (stamping, body hints, trace recording).

Each mode sends the same chat-completions POST (a 6-message, ~2.4 kB body) through an
``httpx.Client`` whose innermost transport answers at once from memory (``httpx.MockTransport``),
so the figure is the SDK's own CPU time, not network time. Modes run interleaved in rounds, to
spread drift evenly; per mode we report the median time per request and the median added over
the baseline client (plain transport, no workflow), in microseconds.

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

import httpx

import pbkv_sdk
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


def _mock() -> httpx.MockTransport:
    payload = json.dumps(RESPONSE).encode()
    return httpx.MockTransport(lambda request: httpx.Response(200, content=payload, headers={"content-type": "application/json"}))


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
    clients = {
        "baseline (plain httpx)": (httpx.Client(transport=_mock()), None),
        "stamping (4 headers)": (httpx.Client(transport=PBKVTransport(_mock())), dict()),
        "stamping + body hints": (httpx.Client(transport=PBKVTransport(_mock(), body_hints=True)), dict()),
        "stamping + trace recording": (httpx.Client(transport=PBKVTransport(_mock())), dict(trace_path=trace_path)),
    }
    samples: dict[str, list[float]] = {name: [] for name in clients}
    for name, (client, _) in clients.items():  # warm-up
        _time_requests(client, 50)
    for _ in range(args.rounds):
        for name, (client, wf_kwargs) in clients.items():
            if wf_kwargs is None:
                samples[name] += _time_requests(client, args.requests)
                continue
            with pbkv_sdk.workflow(app="bench", server_url="http://127.0.0.1:9", end_timeout_s=0.01, **wf_kwargs):
                with pbkv_sdk.agent("verifier"):
                    samples[name] += _time_requests(client, args.requests)
    flush_all(30.0)
    base = statistics.median(samples["baseline (plain httpx)"])
    print(f"python {sys.version.split()[0]}, httpx {httpx.__version__}, {args.rounds} x {args.requests} requests per mode")
    print(f"{'mode':32s} {'median us/request':>18s} {'added us (median)':>18s}")
    for name, values in samples.items():
        med = statistics.median(values)
        print(f"{name:32s} {med:18.1f} {med - base:18.1f}")


if __name__ == "__main__":
    main()
