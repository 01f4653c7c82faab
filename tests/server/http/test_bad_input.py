"""Bad input over real HTTP: clear OpenAI-style errors, and malformed hints never fail a request."""

from __future__ import annotations

import httpx

from pbkv_contract.hints import END_PATH, GRAPH_PATH, Hints

from .server_http_fixtures import chat, metric

USER = [{"role": "user", "content": "Hello there, how are you?"}]


def _is_openai_error(resp: httpx.Response, status: int) -> dict:
    assert resp.status_code == status
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    return err


def test_invalid_json_is_400_with_openai_error_object(start_server):
    server = start_server()
    with httpx.Client(base_url=server.url, timeout=30) as client:
        resp = client.post("/v1/chat/completions", content=b'{"model": "m", "messages": [',
                           headers={"content-type": "application/json"})
        err = _is_openai_error(resp, 400)
        assert err["type"] == "invalid_request_error" and err["code"] == "invalid_json"
        # Valid JSON of the wrong shape is a 400 naming the field.
        assert _is_openai_error(client.post("/v1/chat/completions", json={"messages": "hi"}), 400)["param"] == "messages"
        assert _is_openai_error(client.post("/v1/chat/completions", json=[1, 2]), 400)["code"] == "invalid_request"
        assert _is_openai_error(chat(client, USER, max_tokens=0), 400)["param"] == "max_tokens"
        # Unknown routes answer OpenAI-style too.
        assert _is_openai_error(client.get("/v1/nothing-here"), 404)["type"] == "not_found_error"


def test_body_over_size_limit_is_413(start_server):
    server = start_server(max_body_bytes=10_000)
    big = [{"role": "user", "content": "x" * 20_000}]
    with httpx.Client(base_url=server.url, timeout=30) as client:
        err = _is_openai_error(chat(client, big), 413)
        assert err["code"] == "request_too_large"
        # A body without Content-Length (chunked upload) is cut off at the limit as well.
        chunks = (b'{"messages": [{"role": "user", "content": "' + b"y" * 5000 for _ in range(4))
        resp = client.post("/v1/chat/completions", content=chunks)
        _is_openai_error(resp, 413)
        assert chat(client, USER).status_code == 200  # the server is fine afterwards


def test_prompt_larger_than_device_is_400_context_length(start_server):
    server = start_server(device_tokens=500)
    with httpx.Client(base_url=server.url, timeout=30) as client:
        err = _is_openai_error(chat(client, [{"role": "user", "content": "word " * 2000}]), 400)
    assert err["code"] == "context_length_exceeded"


def test_malformed_hints_are_ignored_counted_and_the_request_served(start_server):
    server = start_server()
    bad_headers = [
        {"X-PBKV-Workflow-Id": "has spaces!", "X-PBKV-Agent": "a", "X-PBKV-Step": "0"},
        {"X-PBKV-Workflow-Id": "wf-1", "X-PBKV-Agent": "a", "X-PBKV-Step": "minus-one"},
        {"X-PBKV-Agent": "a", "X-PBKV-Step": "0"},  # id missing
    ]
    with httpx.Client(base_url=server.url, timeout=30) as client:
        for headers in bad_headers:
            resp = client.post("/v1/chat/completions", json={"messages": USER}, headers=headers)
            assert resp.status_code == 200 and resp.json()["choices"][0]["message"]["content"]
            assert resp.headers["X-PBKV-Hints"] == "ignored"
        body_bad = client.post("/v1/chat/completions",
                               json={"messages": USER, "custom_params": {"pbkv": {"workflow_id": "w", "step": 0}}})
        assert body_bad.status_code == 200 and body_bad.headers["X-PBKV-Hints"] == "ignored"
        good = client.post("/v1/chat/completions", json={"messages": USER}, headers=Hints("wf-ok", "a", 0).to_headers())
        assert good.headers["X-PBKV-Hints"] == "ok"
        plain = client.post("/v1/chat/completions", json={"messages": USER})
        assert plain.headers["X-PBKV-Hints"] == "anonymous"
        text = client.get("/metrics").text
    assert metric(text, "pbkv_malformed_hints_total") == 4
    # Only the well-formed workflow became active in the engine.
    assert metric(text, "pbkv_active_workflows") == 1


def test_end_for_unknown_workflow_is_204_and_end_is_idempotent(start_server):
    server = start_server()
    with httpx.Client(base_url=server.url, timeout=30) as client:
        assert client.post(END_PATH.format(workflow_id="never-seen"), json={"status": "failed"}).status_code == 204
        chat(client, USER, Hints("wf-9", "a", 0, "demo"))
        for _ in range(3):
            assert client.post(END_PATH.format(workflow_id="wf-9"), json={"status": "completed"}).status_code == 204
        assert client.post(END_PATH.format(workflow_id="wf-9")).status_code == 204  # empty body: completed
        bad = client.post(END_PATH.format(workflow_id="wf-9"), json={"status": "exploded"})
        assert _is_openai_error(bad, 400)["param"] == "status"
        text = client.get("/metrics").text
    # One real end (the first); the repeats and the unknown id changed nothing.
    assert metric(text, "pbkv_workflow_ends_total", {"status": "completed", "source": "client"}) == 1
    assert metric(text, "pbkv_retired_workflows_total") == 1 and metric(text, "pbkv_active_workflows") == 0


def test_wrong_hint_token_is_401_on_hint_endpoints_only(start_server):
    server = start_server(hint_token="s3cret", policy="kvflow")
    end = END_PATH.format(workflow_id="wf-1")
    graph = GRAPH_PATH.format(app="demo")
    edges = {"edges": {"planner": ["coder"], "coder": ["tester"], "tester": ["coder"]}}
    with httpx.Client(base_url=server.url, timeout=30) as client:
        _is_openai_error(client.post(end, json={"status": "completed"}), 401)
        _is_openai_error(client.post(end, json={"status": "completed"}, headers={"Authorization": "Bearer nope"}), 401)
        _is_openai_error(client.put(graph, json=edges, headers={"X-PBKV-Hint-Token": "wrong"}), 401)
        # LLM routes and the rest need no hint token.
        assert chat(client, USER, Hints("wf-1", "planner", 0, "demo")).status_code == 200
        assert client.get("/v1/models").status_code == 200 and client.get("/health").status_code == 200
        # The right token opens the hint endpoints.
        assert client.put(graph, json=edges, headers={"X-PBKV-Hint-Token": "s3cret"}).status_code == 204
        assert client.post(end, json={"status": "completed"}, headers={"Authorization": "Bearer s3cret"}).status_code == 204
        assert _is_openai_error(client.put(graph, json={"edges": {"a": "b"}}, headers={"X-PBKV-Hint-Token": "s3cret"}),
                                400)["code"] == "invalid_graph"
    assert server.service.driver.engine.cache.app_graphs["demo"] == {"planner": ("coder",), "coder": ("tester",),
                                                               "tester": ("coder",)}


def test_engine_failure_answers_500_and_the_server_keeps_serving(start_server):
    server = start_server(policy="lru")
    driver = server.service.driver
    real_engine = driver.engine

    def broken_step(until=None):
        raise RuntimeError("injected fault")

    real_engine.step = broken_step  # the next step raises: fault injection on the live engine
    with httpx.Client(base_url=server.url, timeout=30) as client:
        err = _is_openai_error(chat(client, USER), 500)
        assert err["code"] == "engine_failure" and "injected fault" in err["message"]
        # The driver rebuilt a fresh engine: requests are served again.
        assert driver.engine is not real_engine and driver.engine_failures == 1
        assert chat(client, USER).status_code == 200
        assert client.get("/health").json()["engine_failures"] == 1


def test_sdk_end_signal_carries_hint_token_from_environment(start_server, monkeypatch):
    """An app whose server runs with --hint-token ends its workflows via $PBKV_HINT_TOKEN."""
    from pbkv_sdk import ending

    server = start_server(hint_token="s3cret")
    with httpx.Client(base_url=server.url, timeout=30) as client:
        assert chat(client, USER, Hints("wf-tok", "planner", 0, "demo")).status_code == 200
    table = server.service.workflows
    assert table.get("wf-tok") is not None
    monkeypatch.setenv("PBKV_HINT_TOKEN", "s3cret")
    ending.end_workflow("wf-tok", "completed", server_url=server.url, timeout_s=2.0)
    assert ending.flush(5.0)
    assert table.get("wf-tok") is None and table.ended_status("wf-tok") == "completed"


def test_deeply_nested_body_is_400_not_500(start_server):
    server = start_server(policy="lru")
    deep = b'{"messages": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"
    with httpx.Client(base_url=server.url, timeout=30) as client:
        resp = client.post("/v1/chat/completions", content=deep, headers={"content-type": "application/json"})
        err = _is_openai_error(resp, 400)
        assert err["code"] == "invalid_json" and "nested too deeply" in err["message"]
        assert chat(client, USER).status_code == 200  # the server keeps serving


def test_unicode_encode_error_anywhere_in_a_request_is_400(start_server, monkeypatch):
    server = start_server(policy="lru")

    def tokenizer_chokes(*args, **kwargs):
        "\ud800".encode("utf-8")  # raises the real UnicodeEncodeError a lone surrogate causes

    monkeypatch.setattr(server.service, "prepare", tokenizer_chokes)
    with httpx.Client(base_url=server.url, timeout=30) as client:
        raw = b'{"messages": [{"role": "user", "content": "\\ud800 x"}]}'  # JSON-escaped lone surrogate
        resp = client.post("/v1/chat/completions", content=raw, headers={"content-type": "application/json"})
        err = _is_openai_error(resp, 400)
    assert err["code"] == "invalid_text" and "surrogate" in err["message"]


def test_end_signal_with_an_invalid_workflow_id_is_400_and_valid_unknown_ids_stay_204(start_server):
    server = start_server(policy="lru")
    with httpx.Client(base_url=server.url, timeout=30) as client:
        for raw in ("a%20b", "x" * 500, "%FF", "a%2Fb"):
            resp = client.post(f"/pbkv/v1/workflows/{raw}/end", json={})
            err = _is_openai_error(resp, 400)
            assert err["code"] == "invalid_workflow_id" and err["param"] == "workflow_id", raw
        ok = "x" * 128  # the protocol's longest id, never seen by this server
        assert client.post(END_PATH.format(workflow_id=ok), json={}).status_code == 204
        assert client.post(END_PATH.format(workflow_id="never.seen:1-2_3"), json={}).status_code == 204


def test_graph_without_edges_or_with_a_bad_app_name_is_400(start_server):
    server = start_server(policy="kvflow")
    edges = {"edges": {"planner": ["coder"]}}
    with httpx.Client(base_url=server.url, timeout=30) as client:
        for body in ({}, {"edges": {}}):
            err = _is_openai_error(client.put(GRAPH_PATH.format(app="demo"), json=body), 400)
            assert err["code"] == "invalid_graph" and "no edges" in err["message"]
        for raw, why in (("%FF", "not"), ("a%09b", "control character U+0009 at index 1"),
                         ("c%C2%85", "control character U+0085 at index 1"),  # C1: hints with it are ignored too
                         ("y" * 200, "encodes to 200 chars")):
            err = _is_openai_error(client.put(f"/pbkv/v1/apps/{raw}/graph", json=edges), 400)
            assert err["code"] == "invalid_app" and err["param"] == "app" and why in err["message"], raw
        # A non-ASCII name, percent-encoded as UTF-8, is a valid app.
        assert client.put("/pbkv/v1/apps/caf%C3%A9/graph", json=edges).status_code == 204
    assert set(server.service.driver.engine.cache.app_graphs) == {"café"}


def test_client_disconnect_mid_body_is_logged_at_debug_not_as_unhandled(start_server, caplog):
    import logging
    import socket
    import time

    server = start_server(policy="lru")
    caplog.set_level(logging.DEBUG, logger="pbkv_server.http.errors")
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 1000\r\n\r\n{\"messages\": [")
        time.sleep(0.2)
    deadline = time.monotonic() + 30  # generous under load; a pass ends it early
    while time.monotonic() < deadline and not any("disconnected" in r.message for r in caplog.records):
        time.sleep(0.05)
    messages = [(r.levelno, r.message) for r in caplog.records if r.name == "pbkv_server.http.errors"]
    assert (logging.DEBUG, "client disconnected while sending POST /v1/chat/completions") in messages
    assert not any(level >= logging.ERROR for level, _ in messages)
