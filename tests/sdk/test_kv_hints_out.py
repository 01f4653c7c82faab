"""Envelope out: with ``kv_hints`` on, stamped LLM requests carry PBKV's intent as actions of the
engines' KV-hint envelope, which the one parser (:func:`pbkv_contract.hints.parse_kv_hints`)
reads back; without it, bodies are sent as they were."""

from __future__ import annotations

import json

import httpx

import pbkv_sdk
from pbkv_contract.hints import parse_kv_hints
from pbkv_sdk import kv_hints as kvout

URL = "http://engine.test:8000/v1/chat/completions"


def _client(seen, body_hints=False):
    def handler(request):
        seen.append(json.loads(request.content))
        return httpx.Response(200, json={"choices": []})

    return httpx.Client(transport=pbkv_sdk.PBKVTransport(httpx.MockTransport(handler), body_hints=body_hints))


def _kinds(body):
    env, reason = parse_kv_hints(body)
    assert reason is None
    return [(a.action_type, a.workflow_id) for a in env.actions]


def test_no_envelope_unless_opted_in(monkeypatch):
    monkeypatch.delenv("PBKV_KV_HINTS", raising=False)
    seen = []
    client = _client(seen)
    with pbkv_sdk.workflow(app="a", workflow_id="w-off", server_url="http://127.0.0.1:1"):
        client.post(URL, json={"model": "m", "messages": []})
    assert "kv_hints" not in seen[0] and seen[0] == {"model": "m", "messages": []}


def test_opted_in_requests_carry_retain_prefetch_and_the_final_evict(monkeypatch):
    monkeypatch.delenv("PBKV_KV_HINTS", raising=False)
    seen = []
    client = _client(seen)
    with pbkv_sdk.workflow(app="a", workflow_id="w-on", server_url="http://127.0.0.1:1", kv_hints=True) as wf:
        client.post(URL, json={"model": "m", "messages": []})
        client.post(URL, json={"model": "m", "messages": []})
        wf.mark_final()
        client.post(URL, json={"model": "m", "messages": []})
    assert _kinds(seen[0]) == [("kv.retain", "w-on")]
    assert _kinds(seen[1]) == [("kv.retain", "w-on"), ("kv.prefetch", "w-on")]
    assert _kinds(seen[2]) == [("kv.evict", "w-on")]
    final = seen[2]["kv_hints"]["actions"][0]["payload"]
    assert final["execute_at"] == "request_completion" and final["include_current_request"] is True
    assert seen[0]["kv_hints"]["message_id"] == "w-on-0" and "custom_params" not in seen[0]
    assert all(w != "w-on" for _, w in kvout.pending_ends())  # its end went with its final request


def test_an_end_without_a_final_request_rides_on_the_next_request_and_env_opts_in(monkeypatch):
    monkeypatch.setenv("PBKV_KV_HINTS", "1")
    seen = []
    client = _client(seen, body_hints=True)
    with pbkv_sdk.workflow(app="a", workflow_id="w-ended", server_url="http://127.0.0.1:1"):
        client.post(URL, json={"model": "m", "messages": []})
    assert ("http://engine.test:8000", "w-ended") in kvout.pending_ends()
    with pbkv_sdk.workflow(app="a", workflow_id="w-next", server_url="http://127.0.0.1:1"):
        client.post(URL, json={"model": "m", "messages": []})
    assert _kinds(seen[1]) == [("kv.retain", "w-next"), ("kv.evict", "w-ended")]
    assert seen[1]["kv_hints"]["actions"][1]["payload"]["include_current_request"] is False
    assert seen[0]["custom_params"]["kv_hints"] == seen[0]["kv_hints"]  # SGLang's OpenAI route
    assert all(w != "w-ended" for _, w in kvout.pending_ends())


def test_a_body_that_is_not_json_goes_out_unchanged(monkeypatch):
    sent = []

    def handler(request):
        sent.append(request.content)
        return httpx.Response(200, json={})

    client = httpx.Client(transport=pbkv_sdk.PBKVTransport(httpx.MockTransport(handler)))
    with pbkv_sdk.workflow(app="a", workflow_id="w-raw", server_url="http://127.0.0.1:1", kv_hints=True):
        client.post(URL, content=b"not json")
    assert sent == [b"not json"]
