"""The API-server side of the plugin (hints into ``vllm_xargs``, the end route) and the launcher.

These modules import no vLLM; the hint path is followed into a real vLLM ``ChatCompletionRequest``
and ``SamplingParams`` where vLLM is installed.
"""

import asyncio
import json

import pytest

from pbkv_server.backends.vllm.control import ControlInbox
from pbkv_server.backends.vllm.http import PBKVMiddleware, hinted_body
from pbkv_server.backends.vllm.workflows import hints_of_request

HINT = {"workflow_id": "wf-1", "agent": "planner", "step": 2, "app": "hover"}


def _asgi(method, path, body: bytes, headers=()):
    """Run one request through PBKVMiddleware around an app that echoes the body it got."""
    seen = {}

    async def app(scope, receive, send):
        msg = await receive()
        seen["body"] = msg["body"]
        seen["headers"] = dict(scope["headers"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    sent = []

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": method, "path": path,
             "headers": [(k.lower().encode(), v.encode()) for k, v in headers]}
    asyncio.run(PBKVMiddleware(app)(scope, receive, send))
    return seen, sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


def test_body_hints_become_flat_vllm_xargs():
    body = {"model": "m", "messages": [], "custom_params": {"pbkv": HINT}, "vllm_xargs": {"x": 1}}
    seen, status, _ = _asgi("POST", "/v1/chat/completions", json.dumps(body).encode(),
                            [("content-type", "application/json")])
    assert status == 200
    got = json.loads(seen["body"])
    assert got["vllm_xargs"] == {"x": 1, "pbkv_workflow_id": "wf-1", "pbkv_agent": "planner", "pbkv_step": 2,
                                 "pbkv_app": "hover"}
    assert "custom_params" not in got
    assert int(seen["headers"][b"content-length"]) == len(seen["body"])


def test_headers_win_and_malformed_headers_are_forwarded_as_malformed():
    headers = {"X-PBKV-Workflow-Id": "wf-2", "X-PBKV-Agent": "code%20r", "X-PBKV-Step": "1"}
    out = hinted_body(headers, {"custom_params": {"pbkv": HINT}})
    assert out["vllm_xargs"]["pbkv_workflow_id"] == "wf-2" and out["vllm_xargs"]["pbkv_agent"] == "code r"
    bad = hinted_body({"X-PBKV-Workflow-Id": "bad id", "X-PBKV-Agent": "a", "X-PBKV-Step": "0"}, {"model": "m"})
    assert "workflow id must be" in bad["vllm_xargs"]["pbkv_malformed"]
    plain = {"model": "m"}
    assert hinted_body({}, plain) is plain  # no hints: the body passes untouched


def test_the_kv_hint_envelope_travels_in_vllm_xargs():
    envelope = {"protocol_version": "0.1", "message_id": "m", "actions": [
        {"action_id": "a", "action_type": "kv.evict", "action_version": "1.0", "payload": {"workflow_id": "w"}}]}
    out = hinted_body({}, {"model": "m", "kv_hints": envelope})
    assert "kv_hints" not in out and json.loads(out["vllm_xargs"]["pbkv_kv_hints"]) == envelope


@pytest.mark.parametrize("shape", ["kv_hint", "kv_transfer_params.kv_hint"])
def test_dynamo_shaped_envelopes_travel_in_vllm_xargs_too(shape):
    envelope = {"protocol_version": "0.1", "message_id": "m1",
                "actions": [{"action_id": "a1", "action_type": "kv.evict", "action_version": "1.0",
                             "payload": {"session_id": "wf1"}}]}
    body = ({"model": "m", "kv_hint": envelope} if shape == "kv_hint"
            else {"model": "m", "kv_transfer_params": {"do_remote_prefill": False, "kv_hint": envelope}})
    out = hinted_body({}, body)
    assert json.loads(out["vllm_xargs"]["pbkv_kv_hints"]) == envelope
    assert "kv_hint" not in out  # the top-level field is consumed
    if shape != "kv_hint":  # vLLM's own field stays exactly as the client sent it
        assert out["kv_transfer_params"] == body["kv_transfer_params"]


def test_a_non_json_body_passes_untouched():
    seen, status, _ = _asgi("POST", "/v1/completions", b"not json", [("content-type", "application/json")])
    assert status == 200 and seen["body"] == b"not json"


@pytest.mark.parametrize("body, status", [(b"", 204), (b'{"status": "failed"}', 204), (b'{"status": "x"}', 400),
                                          (b"[1]", 400)])
def test_end_route_sends_the_end_to_the_engine_core(tmp_path, monkeypatch, body, status):
    path = str(tmp_path / "c.sock")
    inbox = ControlInbox(path)
    monkeypatch.setenv("PBKV_VLLM_CONTROL", path)
    try:
        seen, got, _ = _asgi("POST", "/pbkv/v1/workflows/wf-9/end", body)
        assert got == status and not seen  # answered by the middleware, not by vLLM
        expected = [("wf-9", "failed" if b"failed" in body else "completed")] if status == 204 else []
        assert list(inbox.drain()) == expected
    finally:
        inbox.close()


def test_end_route_errors(monkeypatch, tmp_path):
    monkeypatch.delenv("PBKV_VLLM_CONTROL", raising=False)
    assert _asgi("POST", "/pbkv/v1/workflows/wf-9/end", b"")[1] == 503
    monkeypatch.setenv("PBKV_VLLM_CONTROL", str(tmp_path / "nobody.sock"))
    assert _asgi("POST", "/pbkv/v1/workflows/wf-9/end", b"")[1] == 503
    assert _asgi("POST", "/pbkv/v1/workflows/bad%20id/end", b"")[1] == 400


def test_flat_hints_reach_a_real_vllm_request_through_chat_completion():
    pytest.importorskip("vllm.v1.core.block_pool")
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    body = hinted_body({}, {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
                            "custom_params": {"pbkv": HINT}})
    request = ChatCompletionRequest(**body)
    params = request.to_sampling_params(max_tokens=4, default_sampling_params={})
    from types import SimpleNamespace

    hints, reason = hints_of_request(SimpleNamespace(sampling_params=params))
    assert reason is None
    assert (hints.workflow_id, hints.agent, hints.step, hints.app) == ("wf-1", "planner", 2, "hover")


def test_launcher_command_and_environment():
    from pbkv_server.backends.vllm.launch import LaunchError, build_command, build_env

    cmd = build_command("pbkv-he", ["--model", "m"], python="py")
    assert cmd[:5] == ["py", "-m", "vllm.entrypoints.cli.main", "serve", "--model"]
    assert "--enable-prefix-caching" in cmd
    assert cmd[cmd.index("--middleware") + 1] == "pbkv_server.backends.vllm.http.PBKVMiddleware"
    assert json.loads(cmd[cmd.index("--kv-transfer-config") + 1])["kv_connector"] == "PBKVConnector"
    own = build_command("he", ["--kv-transfer-config", "{}"], python="py")
    assert own.count("--kv-transfer-config") == 1  # the caller's (e.g. a MultiConnector) is kept
    assert build_command("lru", ["--model", "m"], python="py") == ["py", "-m", "vllm.entrypoints.cli.main",
                                                                   "serve", "--model", "m"]
    env = build_env("he", "/tmp/x.sock", {"VLLM_PLUGINS": "other"})
    assert env["PBKV_VLLM_POLICY"] == "pbkv-he" and env["PBKV_VLLM_CONTROL"] == "/tmp/x.sock"
    assert env["VLLM_PLUGINS"] == "other,pbkv"
    assert "PBKV_VLLM_POLICY" not in build_env("lru", None, {"PBKV_VLLM_POLICY": "pbkv"})
    with pytest.raises(LaunchError, match="simulator"):
        build_command("kvflow", [])


def test_cli_engine_vllm_reports_a_missing_vllm_in_one_line(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from pbkv_server.cli.server import app

    monkeypatch.setenv("PBKV_VLLM_PYTHON", str(tmp_path / "no-python"))
    result = CliRunner().invoke(app, ["--engine", "vllm", "--", "--model", "m"])
    assert result.exit_code == 2
    assert "run scripts/setup_vllm.sh" in result.output and "Traceback" not in result.output


def _asgi_messages(method, path, body=b""):
    """All messages PBKVMiddleware sends for one request (around an app answering 201)."""
    async def app(scope, receive, send):
        await receive()
        await send({"type": "http.response.start", "status": 201, "headers": [(b"x-engine", b"vllm")]})
        await send({"type": "http.response.body", "body": b"{}"})

    sent = []

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message):
        sent.append(message)

    asyncio.run(PBKVMiddleware(app)({"type": "http", "method": method, "path": path, "headers": []}, receive, send))
    return sent


def test_every_answer_advertises_the_envelope_actions_and_get_describes_them():
    from pbkv_contract.kv_hint_caps import advertisement
    from pbkv_server.backends.vllm.http import KV_HINT_EFFECTS

    header = (b"x-pbkv-kv-hints", advertisement().encode())
    for method, path in (("GET", "/v1/models"), ("POST", "/v1/chat/completions"),
                         ("POST", "/pbkv/v1/workflows/bad id/end")):
        start = _asgi_messages(method, path, b"{}")[0]
        assert header in start["headers"], (method, path)
    start, body = _asgi_messages("GET", "/pbkv/v1/kv_hints")
    assert start["status"] == 200 and header in start["headers"]
    doc = json.loads(body["body"])
    assert doc["advertisement"] == advertisement()
    assert {a["action_type"]: a["effect"] for a in doc["actions"]}["kv.prefetch"] == KV_HINT_EFFECTS["fetch"]
    assert _asgi_messages("GET", "/v1/models")[0]["headers"][0] == (b"x-engine", b"vllm")  # vLLM's own kept
