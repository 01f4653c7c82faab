"""Every known bad input (oversized, malformed, out-of-range, control bytes) against a live pbkv-server over raw sockets: status, code, CPU.

Starts ``pbkv-server`` as a subprocess on a free loopback port (or probes ``--target``), sends
each input as raw bytes (so header values with control bytes, raw latin-1 or invalid UTF-8 reach
the server exactly as written, which no HTTP client library allows), and prints one row per input:
the HTTP status, the ``X-PBKV-Hints`` header or the OpenAI error code, the wall time and the
server's CPU time for that request. The last lines say whether the server still answers and
what ``/metrics`` counted.

Run: ``.venv/bin/python benchmarks/server_bad_inputs.py [--target http://127.0.0.1:8000] [--json OUT]``
"""

from __future__ import annotations

import argparse
import json
import socket
import time
from typing import Callable

from pbkv_contract.hints import BODY_KEY
from pbkv_server.engine.policies import BASELINE_POLICY

from _server_proc import cpu_s, start_server, stop_server

CHAT = "/v1/chat/completions"
USER = [{"role": "user", "content": "Hello there, how are you?"}]


def raw_request(host: str, port: int, path: str, body: bytes, headers: list[tuple[bytes, bytes]],
                method: bytes = b"POST", timeout_s: float = 120.0) -> tuple[int, dict[str, str], bytes]:
    """Send one HTTP/1.1 request as raw bytes and read the whole answer (``Connection: close``).

    Returns:
        ``(status, headers with lower-case names, body)``; status 0 when the server closed the
        connection without an answer.
    """
    head = [method + b" " + path.encode() + b" HTTP/1.1", b"Host: 127.0.0.1", b"Connection: close",
            b"Content-Type: application/json", b"Content-Length: " + str(len(body)).encode()]
    head += [name + b": " + value for name, value in headers]
    data = b"\r\n".join(head) + b"\r\n\r\n" + body
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        try:
            sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server may answer and close before it has read everything
        chunks = []
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw:
        return 0, {}, b""
    head_raw, _, rest = raw.partition(b"\r\n\r\n")
    lines = head_raw.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    found = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        found[name.strip().lower()] = value.strip()
    if found.get("transfer-encoding") == "chunked":
        rest = _dechunk(rest)
    return status, found, rest


def _dechunk(data: bytes) -> bytes:
    out = []
    while data:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0] or b"0", 16)
        if size == 0:
            break
        out.append(data[:size])
        data = data[size + 2:]
    return b"".join(out)


def _chat_body(**fields: object) -> bytes:
    return json.dumps({"model": "m", "messages": USER, **fields}).encode()


def _agent(value: bytes) -> list[tuple[bytes, bytes]]:
    return [(b"X-PBKV-Workflow-Id", b"wf-probe"), (b"X-PBKV-Agent", value), (b"X-PBKV-Step", b"0")]


def _step(value: bytes) -> list[tuple[bytes, bytes]]:
    return [(b"X-PBKV-Workflow-Id", b"wf-probe"), (b"X-PBKV-Agent", b"planner"), (b"X-PBKV-Step", value)]


def _body_hints(**pbkv: object) -> bytes:
    hints = {"workflow_id": "wf-probe", "agent": "planner", "step": 0, **pbkv}
    return _chat_body(custom_params={BODY_KEY: hints})


def cases() -> list[tuple[str, str, bytes, list[tuple[bytes, bytes]]]]:
    """(name, path, body, extra headers) of every bad input: oversized bodies and headers, deep JSON, invalid fields, control bytes and non-ASCII in hint headers."""
    words = (b"lorem ipsum dolor sit amet " * 520_000)[:14_000_000]
    big = b'{"model": "m", "messages": [{"role": "user", "content": "' + words + b'"}]}'
    deep = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "metadata": ' + b"[" * 200 + b"]" * 200 + b"}"
    return [
        ("X-PBKV-Agent with control byte 0x01", CHAT, _chat_body(), _agent(b"plan\x01ner")),
        ("X-PBKV-Agent raw latin-1 0xE9", CHAT, _chat_body(), _agent(b"caf\xe9")),
        ("X-PBKV-Agent raw UTF-8", CHAT, _chat_body(), _agent("café".encode())),
        ("X-PBKV-Agent invalid UTF-8 0xFF 0xFE", CHAT, _chat_body(), _agent(b"a\xff\xfe")),
        ("X-PBKV-Agent percent-encoded UTF-8", CHAT, _chat_body(), _agent(b"caf%C3%A9")),
        ("X-PBKV-Agent 8 KiB value", CHAT, _chat_body(), _agent(b"a" * 8192)),
        ("X-PBKV-Step -1", CHAT, _chat_body(), _step(b"-1")),
        ("X-PBKV-Step 1e9", CHAT, _chat_body(), _step(b"1e9")),
        ("X-PBKV-Step abc", CHAT, _chat_body(), _step(b"abc")),
        ("custom_params.pbkv.agent with control char", CHAT, _body_hints(agent="plan\u0001ner"), []),
        ("custom_params.pbkv.agent 8 KiB", CHAT, _body_hints(agent="a" * 8192), []),
        ("custom_params.pbkv.step -1", CHAT, _body_hints(step=-1), []),
        ("custom_params.pbkv.step 1e9", CHAT, _body_hints(step=1e9), []),
        ("custom_params.pbkv.step abc", CHAT, _body_hints(step="abc"), []),
        ("64 KiB header", CHAT, _chat_body(), [(b"X-Padding", b"p" * 65536)]),
        ("200 headers", CHAT, _chat_body(), [(b"X-Extra-%d" % i, b"v") for i in range(200)]),
        ("14 MB body of words", CHAT, big, []),
        ("JSON nested 200 deep", CHAT, deep, []),
        ("temperature: NaN", CHAT, _chat_body().replace(b'"model"', b'"temperature": NaN, "model"'), []),
        ("temperature: 5", CHAT, _chat_body(temperature=5), []),
        ("top_p: -1", CHAT, _chat_body(top_p=-1), []),
        ('tools: "x"', CHAT, _chat_body(tools="x"), []),
        ('stop: ["a","b","c","d","e"]', CHAT, _chat_body(stop=list("abcde")), []),
        ('messages[0].role: "wizard"', CHAT, json.dumps({"model": "m", "messages": [{"role": "wizard", "content": "x"}]}).encode(), []),
        ("n: 2", CHAT, _chat_body(n=2), []),
        ("n: 2, stream", CHAT, _chat_body(n=2, stream=True, stream_options={"include_usage": True}), []),
        ("n: 0", CHAT, _chat_body(n=0), []),
        ("n: 129", CHAT, _chat_body(n=129), []),
        ("completions n: 2", "/v1/completions", json.dumps({"model": "m", "prompt": "hi", "n": 2}).encode(), []),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default=None, help="probe a running server instead of starting one")
    parser.add_argument("--json", default=None, help="write the rows as JSON to this file")
    args = parser.parse_args()
    proc = None
    if args.target:
        url = args.target.rstrip("/")
    else:
        proc, url = start_server("--policy", BASELINE_POLICY, "--log-level", "error")
    host, port_s = url.removeprefix("http://").split(":")
    port = int(port_s)
    cpu: Callable[[], float] = (lambda: cpu_s(proc.pid)) if proc else (lambda: float("nan"))
    rows = []
    try:
        print(f"{'input':45} {'status':>6}  {'hints / error code':28} {'wall s':>7} {'server CPU s':>12}")
        for name, path, body, headers in cases():
            c0, t0 = cpu(), time.monotonic()
            try:
                status, found, payload = raw_request(host, port, path, body, headers)
            except OSError as exc:
                status, found, payload = 0, {}, repr(exc).encode()
            wall, used = time.monotonic() - t0, cpu() - c0
            detail = found.get("x-pbkv-hints", "")
            if status >= 400 or not detail:
                try:
                    detail = json.loads(payload)["error"]["code"] or ""
                except (ValueError, KeyError, TypeError):
                    detail = "non-JSON: " + payload[:40].decode("latin-1")
            if status == 200 and found.get("content-type", "").startswith("text/event-stream"):
                detail += " (stream)"
            rows.append({"input": name, "status": status, "detail": detail, "wall_s": wall, "server_cpu_s": used})
            print(f"{name:45} {status:>6}  {detail:28} {wall:7.2f} {used:12.2f}")
        status, _, _ = raw_request(host, port, CHAT, _chat_body(), [])
        _, _, metrics = raw_request(host, port, "/metrics", b"", [], method=b"GET")
        counted = [line for line in metrics.decode().splitlines()
                   if line.startswith(("pbkv_malformed_hints_total", "pbkv_rejected_requests_total", "pbkv_requests_total"))]
        print(f"afterwards a plain request gets {status}; /metrics:")
        for line in counted:
            print("  " + line)
    finally:
        if proc is not None:
            stop_server(proc)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
