"""The engines' KV-hint envelope on pbkv-server's chat route, in the three shapes the engines'
public code sends: vLLM's ``kv_hints`` block actions (``kv.retain`` / ``kv.evict``, protocol 1.0,
as Dynamo's session policy emits them), SGLang's KvHintManager actions (``kv.deref``,
``kv.demote`` of ``payload.session_id``, ``kv.prefetch``), Dynamo's ``kv_hint`` message
(``kv.fetch@1.0``, also under ``kv_transfer_params``). Unknown actions are counted and ignored,
malformed envelopes count as malformed hints; every request is served."""

from __future__ import annotations

import httpx
import pytest

from pbkv_contract.hints import Hints
from .server_http_fixtures import chat, metric, text_of_tokens


def _engine_requests(server, monkeypatch):
    seen = []
    driver = server.service.driver
    submit = driver.submit
    monkeypatch.setattr(driver, "submit", lambda req: (seen.append(req), submit(req))[1])
    return seen


def _action(action_type, payload=None, action_id="a", version="1.0"):
    out = {"action_id": action_id, "action_type": action_type, "action_version": version}
    if payload is not None:
        out["payload"] = payload
    return out


def _envelope(*actions, protocol="0.1"):
    return {"protocol_version": protocol, "message_id": "msg-1", "actions": list(actions)}


def _count(text, action, outcome):
    try:
        return metric(text, "pbkv_kv_hint_actions_total", {"action": action, "outcome": outcome})
    except KeyError:
        return 0.0


def _user(n, topic):
    return [{"role": "user", "content": text_of_tokens(n, topic)}]


def test_vllm_retain_pins_the_request_and_evict_retires_the_workflow_after_its_final_turn(start_server, monkeypatch):
    """vLLM/Dynamo block actions: ``kv.retain`` (priority 3, ttl_seconds 45) becomes the request's
    priority and pin TTL; ``kv.evict`` of the request's own workflow retires it once the request
    is served (an end, counted like the end route's), not before (the request is step 1 of the
    same workflow use, incarnation 1)."""
    server = start_server(policy="ttl-pin")
    seen = _engine_requests(server, monkeypatch)
    payload = {"execute_at": "request_completion", "include_current_request": True, "block_hashes": ["11"]}
    with httpx.Client(base_url=server.url, timeout=30) as client:
        r = chat(client, _user(60, "keep"), Hints("wf-v", "planner", 0, "app"), kv_hints=_envelope(
            _action("kv.retain", {**payload, "priority": 3, "ttl_seconds": 45.0}), protocol="1.0"))
        assert r.status_code == 200 and r.headers["X-PBKV-Hints"] == "ok"
        assert (seen[-1].priority, seen[-1].cache_ttl_s) == (3, 45.0)
        assert client.get("/health").json()["active_workflows"] == 1
        # the request's own priority wins over the retain's; the TTL still comes from the retain
        r = chat(client, _user(60, "keep"), Hints("wf-v", "coder", 1, "app"), priority=9, kv_hints=_envelope(
            _action("kv.retain", {**payload, "priority": 3}), _action("kv.evict", payload, "b"), protocol="1.0"))
        assert r.status_code == 200 and (seen[-1].priority, seen[-1].cache_ttl_s) == (9, 300.0)
        assert server.service.workflows.get("wf-v") is None  # retired after the turn was served
        assert client.get("/health").json()["active_workflows"] == 0
        text = client.get("/metrics").text
    assert _count(text, "retain", "applied") == 2 and _count(text, "evict", "applied") == 1
    assert metric(text, "pbkv_workflow_ends_total", {"status": "completed", "source": "client"}) == 1


def test_sglang_demote_of_another_session_deref_of_its_own_and_prefetch(start_server):
    """SGLang KvHintManager shapes: ``kv.demote`` with ``payload.session_id`` retires that
    workflow before the request is queued; ``kv.deref`` (empty payload) retires the request's own
    once served; ``kv.prefetch`` without a payload of a workflow with nothing on the host has no
    effect (counted so)."""
    server = start_server(policy="pbkv")
    with httpx.Client(base_url=server.url, timeout=30) as client:
        assert chat(client, _user(50, "other"), Hints("agent-42", "worker", 0, "app")).status_code == 200
        assert chat(client, _user(50, "mine"), Hints("wf-s", "lead", 0, "app")).status_code == 200
        assert client.get("/health").json()["active_workflows"] == 2
        r = chat(client, _user(50, "mine"), Hints("wf-s", "lead", 1, "app"), kv_hints=_envelope(
            _action("kv.demote", {"session_id": "agent-42", "session_generation": 0}, "demote-0"),
            _action("kv.prefetch", None, "p0")))
        assert r.status_code == 200 and r.headers["X-PBKV-Hints"] == "ok"
        assert server.service.workflows.get("agent-42") is None
        assert server.service.workflows.get("wf-s") is not None
        r = chat(client, _user(50, "mine"), Hints("wf-s", "lead", 2, "app"),
                 kv_hints=_envelope(_action("kv.deref", {}, "d0")))
        assert r.status_code == 200 and client.get("/health").json()["active_workflows"] == 0
        text = client.get("/metrics").text
    assert _count(text, "demote", "applied") == 1 and _count(text, "evict", "applied") == 1
    assert _count(text, "fetch", "no_effect") == 1


@pytest.mark.parametrize("shape", ["kv_hint", "kv_transfer_params", None])
def test_dynamo_fetch_loads_the_workflows_host_cache_back(start_server, shape):
    """Dynamo's ``kv_hint`` message with a ``kv.fetch@1.0`` action (top level, or under
    ``kv_transfer_params`` as its vLLM bridge sends it) on wf-a's next turn: wf-a's cache, which
    wf-b pushed to the host tier, comes back to the device before the request is queued, in the
    room of wf-b's retired cache (LRU never prefetches on its own), so the turn's hits are all
    device hits. Without the fetch (``None``) the same turn finds its prefix on the host."""
    server = start_server(policy="lru", device_tokens=600, host_tokens=2000, max_batch=1)
    prompt_a = _user(200, "alpha")
    with httpx.Client(base_url=server.url, timeout=30) as client:
        first = chat(client, prompt_a, Hints("wf-a", "lead", 0, "app"), max_tokens=2)
        prompt_tokens = int(first.headers["X-PBKV-Prompt-Tokens"])
        for i in range(2):  # wf-b fills the device: wf-a's prefix goes to the host tier
            assert chat(client, _user(250, f"beta{i}"), Hints("wf-b", "lead", i, "app"), max_tokens=2).status_code == 200
        # wf-b is over: its cache is retired, the room a fetch may take (never active cache)
        assert client.post("/pbkv/v1/workflows/wf-b/end", json={"status": "completed"}).status_code == 204
        before = metric(client.get("/metrics").text, "pbkv_prefetched_tokens_total")
        envelope = _envelope(_action("kv.fetch", {"source_control_endpoint": "tcp://h:1", "block_hashes": [17],
                                                  "mode": "copy"}, "action-1"))
        body = {"kv_hint": envelope} if shape == "kv_hint" else (
            {"kv_transfer_params": {"kv_hint": envelope}} if shape else {})
        again = chat(client, prompt_a, Hints("wf-a", "lead", 1, "app"), max_tokens=2, **body)
        assert again.status_code == 200 and again.headers["X-PBKV-Hints"] == "ok"
        text = client.get("/metrics").text
    loaded = metric(text, "pbkv_prefetched_tokens_total") - before
    host, cached = int(again.headers["X-PBKV-Host-Cached-Tokens"]), int(again.headers["X-PBKV-Cached-Tokens"])
    if shape is None:
        assert loaded == 0 and host > 0 and _count(text, "fetch", "applied") == 0
    else:
        assert _count(text, "fetch", "applied") == 1 and loaded > 0
        assert host == 0 and cached >= loaded and cached <= prompt_tokens


@pytest.mark.parametrize(("action_type", "key", "kind"), [("kv.retain", "workflow_id", "retain"),
                                                        ("kv.prefetch", "session_id", "fetch")])
def test_a_retain_or_fetch_from_another_request_keeps_a_workflow_in_a_long_tool_call(action_type, key, kind):
    """wf-tool waits on a long tool call while wf-lead's request retains (or prefetches) it: its
    idle clock restarts, as in the vLLM and SGLang backends (``WorkflowTable.keep``). The
    lifecycle clock is set by hand (idle_retire_s 10 s): wf-tool last ran at 0, the hint comes at
    8, so at 12 it has been idle 4 s and stays (without the hint: 12 s, retired); at 18.5 both
    workflows are 10.5 s idle and retired. A hint for the ended wf-tool then has no effect and does
    not start it again."""
    from dataclasses import replace

    from pbkv_server.http import ServerConfig, run_in_thread
    from pbkv_server.http.service import engine_config_from

    now = [0.0]
    config = ServerConfig(port=0, policy="lru", idle_retire_s=10.0)
    server = run_in_thread(config, make_engine_config=lambda: replace(
        engine_config_from(config), lifecycle_clock=lambda: now[0]))
    hint = _envelope(_action(action_type, {key: "wf-tool"}))
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            assert chat(client, _user(40, "tool"), Hints("wf-tool", "coder", 0, "app"), max_tokens=2).status_code == 200
            assert chat(client, _user(40, "lead"), Hints("wf-lead", "lead", 0, "app"), max_tokens=2).status_code == 200
            now[0] = 8.0
            r = chat(client, _user(40, "lead"), Hints("wf-lead", "lead", 1, "app"), max_tokens=2, kv_hints=hint)
            assert r.status_code == 200 and r.headers["X-PBKV-Hints"] == "ok"
            now[0] = 12.0  # an anonymous request steps the engine, whose step runs the idle sweep
            assert chat(client, _user(10, "anon"), max_tokens=2).status_code == 200
            assert server.service.workflows.get("wf-tool") is not None
            assert client.get("/health").json()["active_workflows"] == 2
            now[0] = 18.5
            assert chat(client, _user(10, "anon"), max_tokens=2).status_code == 200
            assert client.get("/health").json()["active_workflows"] == 0
            r = chat(client, _user(40, "new"), Hints("wf-new", "lead", 0, "app"), max_tokens=2, kv_hints=hint)
            assert r.status_code == 200 and server.service.workflows.get("wf-tool") is None
            text = client.get("/metrics").text
    finally:
        server.stop()
    assert metric(text, "pbkv_workflow_ends_total", {"status": "cancelled", "source": "idle"}) == 2
    assert _count(text, kind, "applied") == 1 and _count(text, kind, "no_effect") == 1


def test_unknown_actions_are_counted_and_ignored_and_a_malformed_envelope_is_a_malformed_hint(start_server):
    server = start_server(policy="pbkv")
    with httpx.Client(base_url=server.url, timeout=30) as client:
        base = metric(client.get("/metrics").text, "pbkv_malformed_hints_total")
        # an unknown type and an unknown major version next to a valid hint: served, hints ok
        r = chat(client, _user(30, "u"), Hints("wf-u", "lead", 0, "app"), kv_hints=_envelope(
            _action("kv.share", {}), _action("kv.evict", {}, "b", version="2.0")))
        assert r.status_code == 200 and r.headers["X-PBKV-Hints"] == "ok"
        assert server.service.workflows.get("wf-u") is not None  # the 2.0 evict was not taken
        # only unknown actions on an anonymous request: what it sent was not taken
        r = chat(client, _user(30, "u"), kv_hints=_envelope(_action("kv.share", {})))
        assert r.status_code == 200 and r.headers["X-PBKV-Hints"] == "ignored"
        # an envelope of an unknown protocol: all its actions ignored, no error
        r = chat(client, _user(30, "u"), Hints("wf-u", "lead", 1, "app"),
                 kv_hints=_envelope(_action("kv.evict", {}), protocol="9.0"))
        assert r.status_code == 200 and server.service.workflows.get("wf-u") is not None
        text = client.get("/metrics").text
        assert _count(text, "unknown", "ignored") == 4
        assert metric(text, "pbkv_malformed_hints_total") == base
        # malformed: counted as malformed hints, the request served (hints still apply / anonymous)
        for bad in ("evict please", {"protocol_version": "0.1", "actions": []},
                    _envelope({"action_id": "a", "action_type": "kv.evict", "action_version": "1.0", "payload": []})):
            r = chat(client, _user(30, "m"), Hints("wf-m", "lead", 0, "app"), kv_hints=bad)
            assert r.status_code == 200 and r.headers["X-PBKV-Hints"] == "ok"
        r = chat(client, _user(30, "m"), kv_hints=[1, 2])
        assert r.status_code == 200 and r.headers["X-PBKV-Hints"] == "ignored"
        assert metric(client.get("/metrics").text, "pbkv_malformed_hints_total") == base + 4
        assert server.service.workflows.get("wf-m") is not None


def test_the_openapi_document_states_the_envelope_fields(start_server):
    doc = httpx.get(start_server().url + "/openapi.json", timeout=30).json()
    for schema in ("ChatCompletionRequest", "CompletionRequest"):
        props = doc["components"]["schemas"][schema]["properties"]
        assert "protocol_version" in props["kv_hints"]["description"] and "kv.fetch" in props["kv_hints"]["description"]
        assert "kv_hint" in props and "kv_transfer_params" in props


def test_the_sdk_sends_the_envelope_to_pbkv_server_only_when_opted_in(start_server):
    """The SDK's envelope out, read by a real pbkv-server: opted in, each request retains its
    workflow, and the request the framework marks final retires it once served, before the end
    route is called; not opted in, the server sees no envelope."""
    import pbkv_sdk
    from pbkv_sdk import kv_hints as kvout

    kvout.reset()
    server = start_server(policy="pbkv")
    client = pbkv_sdk.http_client()
    url = server.url + "/v1/chat/completions"
    body = {"model": "m", "messages": _user(30, "sdk")}
    with pbkv_sdk.workflow(app="app", workflow_id="wf-plain", server_url=server.url, kv_hints=False):
        assert client.post(url, json=body).status_code == 200
        text = httpx.get(server.url + "/metrics", timeout=30).text
        assert _count(text, "retain", "applied") == 0
    with pbkv_sdk.workflow(app="app", workflow_id="wf-sdk", server_url=server.url, kv_hints=True) as wf:
        assert client.post(url, json=body).headers["X-PBKV-Hints"] == "ok"  # no envelope yet: it teaches
        assert kvout.advertised(server.url).reads("kv.retain", "1.0")
        assert client.post(url, json=body).status_code == 200
        assert server.service.workflows.get("wf-sdk") is not None
        wf.mark_final()
        assert client.post(url, json=body).status_code == 200
        assert server.service.workflows.get("wf-sdk") is None  # the envelope ended it, not the end route
        text = httpx.get(server.url + "/metrics", timeout=30).text
    assert _count(text, "retain", "applied") == 1 and _count(text, "evict", "applied") == 1
    client.close()
    kvout.reset()


def test_the_server_advertises_the_actions_it_reads_on_every_answer_and_on_get(start_server):
    """``X-PBKV-KV-Hints`` on every answer (LLM, errors, health) and ``GET /pbkv/v1/kv_hints``
    with the same advertisement; the SDK's ``discover`` reads it."""
    from pbkv_contract.kv_hint_caps import advertisement, parse_advertisement
    from pbkv_sdk import kv_hints as kvout

    server = start_server()
    answers = [httpx.post(server.url + "/v1/chat/completions", json={"model": "m", "messages": _user(5, "a")}, timeout=30),
               httpx.post(server.url + "/v1/chat/completions", content=b"{", timeout=30),
               httpx.get(server.url + "/health", timeout=30), httpx.get(server.url + "/no/such/route", timeout=30)]
    assert [r.status_code for r in answers] == [200, 400, 200, 404]
    assert all(r.headers["X-PBKV-KV-Hints"] == advertisement() for r in answers)
    doc = httpx.get(server.url + "/pbkv/v1/kv_hints", timeout=30).json()
    assert doc["advertisement"] == advertisement() and len(doc["actions"]) == 7
    assert {a["kind"] for a in doc["actions"]} == {"retain", "demote", "evict", "fetch"}
    assert all(a["effect"] for a in doc["actions"])
    kvout.reset()
    assert kvout.discover(server.url + "/v1") == parse_advertisement(advertisement())
    assert kvout.advertised(server.url) == parse_advertisement(advertisement())
    kvout.reset()
