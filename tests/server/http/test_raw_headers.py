"""Regression case 10 (server side): hint headers with raw, invalid or oversized bytes, over raw sockets.

No HTTP client library sends a control byte, raw latin-1 or invalid UTF-8 in a header, so each
request is written byte for byte. Expected: the request is served and the hint ignored and
counted, except where HTTP itself forbids the bytes (a control character, RFC 9110 5.5), which
gets a clean OpenAI-style 400 that is counted and logged once; heads over the limits get 431/414;
nothing is ever a 500 and the server keeps serving.
"""

from __future__ import annotations

import json
import logging
import socket

import pytest

from .server_http_fixtures import metric

BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "Hello there"}]}).encode()


def raw_post(server, headers: list[tuple[bytes, bytes]], body: bytes = BODY, path: bytes = b"/v1/chat/completions"):
    """POST raw bytes; returns (status, lower-case headers, decoded JSON body or None)."""
    host, port = server.url.removeprefix("http://").split(":")
    head = [b"POST " + path + b" HTTP/1.1", b"Host: x", b"Connection: close", b"Content-Type: application/json",
            b"Content-Length: %d" % len(body)] + [name + b": " + value for name, value in headers]
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(b"\r\n".join(head) + b"\r\n\r\n" + body)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head_raw, _, payload = data.partition(b"\r\n\r\n")
    lines = head_raw.decode("latin-1").split("\r\n")
    found = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split()[1]), found, json.loads(payload) if payload else None


def hint_headers(agent: bytes = b"planner", step: bytes = b"0") -> list[tuple[bytes, bytes]]:
    return [(b"X-PBKV-Workflow-Id", b"wf-raw"), (b"X-PBKV-Agent", agent), (b"X-PBKV-Step", step)]


@pytest.mark.parametrize("agent, step", [
    (b"caf\xe9", b"0"),                      # raw latin-1 byte 0xE9
    ("审核员".encode(), b"0"),                # raw UTF-8 bytes
    (b"a\xff\xfe", b"0"),                    # invalid UTF-8
    (b"a" * 8192, b"0"),                     # 8 KiB value: over the protocol's 128, under the head limit
    (b"planner", b"-1"), (b"planner", b"1e9"), (b"planner", b"abc"),
])
def test_invalid_hint_header_bytes_are_served_ignored_and_counted(start_server, agent, step):
    server = start_server(policy="lru")
    status, headers, body = raw_post(server, hint_headers(agent, step))
    assert status == 200 and body["choices"][0]["message"]["content"]
    assert headers["x-pbkv-hints"] == "ignored"
    text = raw_metrics(server)
    assert metric(text, "pbkv_malformed_hints_total") == 1 and metric(text, "pbkv_active_workflows") == 0


def test_a_hint_header_sent_twice_is_ignored_and_counted_not_resolved_to_one_copy(start_server, caplog):
    # two workflow ids on one request: either copy could file it under the wrong workflow
    server = start_server(policy="lru")
    with caplog.at_level(logging.WARNING):
        status, headers, _ = raw_post(server, [(b"X-PBKV-Workflow-Id", b"wf3"), *hint_headers()[1:],
                                               (b"X-PBKV-Workflow-Id", b"wf4")])
    assert status == 200 and headers["x-pbkv-hints"] == "ignored"
    assert server.service.workflows.get("wf3") is None and server.service.workflows.get("wf4") is None
    assert metric(raw_metrics(server), "pbkv_malformed_hints_total") == 1
    assert any("X-PBKV-Workflow-Id sent 2 times" in r.getMessage() for r in caplog.records)


def test_percent_encoded_utf8_agent_decodes_to_the_right_name(start_server):
    server = start_server(policy="lru")
    status, headers, _ = raw_post(server, hint_headers("%E5%AE%A1%E6%A0%B8%E5%91%98".encode()))
    assert status == 200 and headers["x-pbkv-hints"] == "ok"
    assert server.service.workflows.get("wf-raw") is not None
    assert list(server.service.driver.engine.workflow("wf-raw").history) == ["审核员"]


def test_control_byte_in_hint_header_is_a_counted_openai_400_logged_once(start_server, caplog):
    server = start_server(policy="lru")
    caplog.set_level(logging.WARNING, logger="pbkv_server.http.runner")
    for _ in range(3):
        status, headers, body = raw_post(server, hint_headers(b"plan\x01ner"))
        assert status == 400 and headers["content-type"] == "application/json"
        assert body["error"]["code"] == "invalid_http_request" and body["error"]["type"] == "invalid_request_error"
        assert "X-PBKV-Agent" in body["error"]["message"] and "control character" in body["error"]["message"]
    status, _, _ = raw_post(server, hint_headers(b"planner"))
    assert status == 200  # the server keeps serving
    text = raw_metrics(server)
    assert metric(text, "pbkv_rejected_requests_total", {"reason": "control_char_in_hint_header"}) == 3
    assert metric(text, "pbkv_requests_total", {"route": "chat", "status": "400"}) == 3
    warnings = [r for r in caplog.records if "control_char_in_hint_header" in r.getMessage()]
    assert len(warnings) == 1


def test_control_byte_in_another_header_is_a_400_with_its_own_reason(start_server):
    server = start_server(policy="lru")
    status, _, body = raw_post(server, [(b"X-Trace", b"a\x7fb")])
    assert status == 400 and body["error"]["code"] == "invalid_http_request"
    assert metric(raw_metrics(server), "pbkv_rejected_requests_total", {"reason": "invalid_header"}) == 1


def test_heads_over_the_limits_get_431_or_414_and_the_worker_survives(start_server):
    server = start_server(policy="lru", max_header_bytes=4096, max_headers=20)
    big = raw_post(server, [(b"X-Padding", b"p" * 65536)])
    many = raw_post(server, [(b"X-Extra-%d" % i, b"v") for i in range(30)])
    long_path = raw_post(server, [], path=b"/v1/chat/completions?" + b"q" * 5000)
    assert (big[0], many[0], long_path[0]) == (431, 431, 414)
    assert big[2]["error"]["code"] == "request_header_too_large" and "--max-header-bytes" in big[2]["error"]["message"]
    assert "--max-headers" in many[2]["error"]["message"]
    # At the limits themselves the request is served: 20 fields, and a head just under 4 KiB.
    assert raw_post(server, [(b"X-Extra-%d" % i, b"v") for i in range(13)])[0] == 200  # 7 fields of our own
    assert raw_post(server, [(b"X-Padding", b"p" * 3500)])[0] == 200
    text = raw_metrics(server)
    for reason in ("header_too_large", "too_many_headers", "uri_too_long"):
        assert metric(text, "pbkv_rejected_requests_total", {"reason": reason}) == 1


def test_a_header_still_streaming_past_the_limit_is_cut_off_without_buffering_it(start_server):
    server = start_server(policy="lru", max_header_bytes=4096)
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Endless: ")
        answer = b""
        try:
            for _ in range(400):  # up to 400 KiB of one header value that never ends
                sock.sendall(b"v" * 1024)
        except (BrokenPipeError, ConnectionResetError):
            pass
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except ConnectionResetError:
            pass
    assert answer.startswith(b"HTTP/1.1 431 ")


def test_control_character_in_body_hint_agent_is_malformed_not_a_valid_agent(start_server):
    server = start_server(policy="lru")
    for agent in ("plan\u0001ner", "plan\u007fner", "x\u0085y"):
        body = json.loads(BODY)
        body["custom_params"] = {"pbkv": {"workflow_id": "wf-body", "agent": agent, "step": 0}}
        status, headers, _ = raw_post(server, [], json.dumps(body).encode())
        assert status == 200 and headers["x-pbkv-hints"] == "ignored", agent
    # Percent-encoded in a header, the same character is refused after decoding too.
    assert raw_post(server, hint_headers(b"plan%01ner"))[1]["x-pbkv-hints"] == "ignored"
    assert metric(raw_metrics(server), "pbkv_malformed_hints_total") == 4
    assert server.service.workflows.get("wf-body") is None


def raw_metrics(server) -> str:
    import httpx

    return httpx.get(server.url + "/metrics", timeout=30).text


@pytest.mark.parametrize("sent", [
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
    % len(BODY) + BODY[:10],  # a body shorter than its Content-Length
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Le",  # a head that stops half-way
])
def test_a_request_that_stops_arriving_gets_408_and_its_connection_closes(start_server, sent, caplog):
    """Such a request used to hold its connection forever (uvicorn's keep-alive timeout runs only
    between requests); the socket's own 30 s timeout is the test's bound, far above 0.2 s."""
    server = start_server(policy="lru", read_timeout_s=0.2)
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(sent)
        answer = b""
        while chunk := sock.recv(65536):  # the server closes the connection: recv returns b""
            answer += chunk
    head, _, payload = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 ") and b"connection: close" in head.lower()
    assert json.loads(payload)["error"]["code"] == "request_timeout"
    assert metric(raw_metrics(server), "pbkv_rejected_requests_total", {"reason": "request_timeout"}) == 1
    # the server keeps serving; a paused client's app task ended without an error logged
    assert raw_post(server, [])[0] == 200
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
