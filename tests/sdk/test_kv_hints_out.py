"""Envelope out: with ``kv_hints`` on, stamped LLM requests to a server that advertises the
actions (``X-PBKV-KV-Hints``) carry PBKV's intent as actions of the engines' KV-hint envelope,
which the one parser (:func:`pbkv_contract.hints.parse_kv_hints`) reads back; without it, or to a
server that advertises nothing, bodies are sent as they were."""

from __future__ import annotations

import json

import httpx
import pytest

import pbkv_sdk
from pbkv_contract.hints import parse_kv_hints
from pbkv_contract.kv_hint_caps import HEADER_KV_HINTS, advertisement
from pbkv_sdk import kv_hints as kvout

URL = "http://engine.test:8000/v1/chat/completions"
ORIGIN = "http://engine.test:8000"


@pytest.fixture(autouse=True)
def _fresh_origins():
    kvout.reset()
    yield
    kvout.reset()


def _client(seen, body_hints=False, advert=advertisement()):
    """A client whose engine answers with ``advert`` in ``X-PBKV-KV-Hints`` (``None``: no header)."""
    def handler(request):
        seen.append(json.loads(request.content) if request.content[:1] == b"{" else request.content)
        headers = {} if advert is None else {HEADER_KV_HINTS: advert}
        return httpx.Response(200, json={"choices": []}, headers=headers)

    return httpx.Client(transport=pbkv_sdk.PBKVTransport(httpx.MockTransport(handler), body_hints=body_hints))


def _learned(advert=advertisement()):
    """Teach the SDK what the engine advertises, as its first answer would."""
    kvout.learn(ORIGIN, advert, 200)


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
    _learned()
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
    _learned()
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
    _learned()
    with pbkv_sdk.workflow(app="a", workflow_id="w-raw", server_url="http://127.0.0.1:1", kv_hints=True):
        client.post(URL, content=b"not json")
    assert sent == [b"not json"]


def test_the_first_answer_teaches_the_origin_and_the_envelope_follows_from_the_next_request(monkeypatch):
    """Nothing learned: the first request goes without the envelope (fail open); its answer's
    ``X-PBKV-KV-Hints`` is learned once, and the next request carries the envelope."""
    monkeypatch.delenv("PBKV_KV_HINTS", raising=False)
    seen = []
    client = _client(seen)
    assert kvout.advertised(ORIGIN) is None
    with pbkv_sdk.workflow(app="a", workflow_id="w-learn", server_url="http://127.0.0.1:1", kv_hints=True):
        client.post(URL, json={"model": "m", "messages": []})
        client.post(URL, json={"model": "m", "messages": []})
    assert "kv_hints" not in seen[0]
    assert _kinds(seen[1]) == [("kv.retain", "w-learn"), ("kv.prefetch", "w-learn")]
    assert kvout.advertised(ORIGIN).reads("kv.fetch", "1.3")


def test_an_engine_that_advertises_nothing_never_gets_an_envelope(monkeypatch):
    """A plain engine (no ``X-PBKV-KV-Hints``): its first answer says it reads no envelope, and no
    later request carries one, not even the final evict (the end route ends the workflow)."""
    monkeypatch.delenv("PBKV_KV_HINTS", raising=False)
    seen = []
    client = _client(seen, advert=None)
    with pbkv_sdk.workflow(app="a", workflow_id="w-plain", server_url="http://127.0.0.1:1", kv_hints=True) as wf:
        for _ in range(2):
            client.post(URL, json={"model": "m", "messages": []})
        wf.mark_final()
        client.post(URL, json={"model": "m", "messages": []})
    assert [("kv_hints" in body) for body in seen] == [False, False, False]
    assert not kvout.advertised(ORIGIN) and not wf.final_sent


def test_a_5xx_answer_teaches_nothing_and_only_advertised_actions_go(monkeypatch):
    """A 5xx (a proxy while the server starts) is not an advertisement; an engine advertising
    only ``kv.evict`` gets no retain/prefetch, and its final request carries the evict."""
    monkeypatch.delenv("PBKV_KV_HINTS", raising=False)
    assert kvout.learn(ORIGIN, None, 503) is None and kvout.advertised(ORIGIN) is None
    only_evict = advertisement(["kv.evict"])
    assert kvout.learn(ORIGIN, only_evict, 200).actions == {"kv.evict@1"}
    assert kvout.learn(ORIGIN, advertisement(), 200).actions == {"kv.evict@1"}  # learned once
    seen = []
    client = _client(seen, advert=only_evict)
    with pbkv_sdk.workflow(app="a", workflow_id="w-part", server_url="http://127.0.0.1:1", kv_hints=True) as wf:
        client.post(URL, json={"model": "m", "messages": []})
        wf.mark_final()
        client.post(URL, json={"model": "m", "messages": []})
    assert "kv_hints" not in seen[0]
    assert _kinds(seen[1]) == [("kv.evict", "w-part")] and wf.final_sent


def test_an_advertisement_of_another_protocol_gets_no_envelope(monkeypatch):
    monkeypatch.delenv("PBKV_KV_HINTS", raising=False)
    kvout.learn(ORIGIN, "protocols=2; actions=kv.retain@1,kv.evict@1", 200)
    seen = []
    client = _client(seen)
    with pbkv_sdk.workflow(app="a", workflow_id="w-v2", server_url="http://127.0.0.1:1", kv_hints=True):
        client.post(URL, json={"model": "m", "messages": []})
    assert "kv_hints" not in seen[0]


def test_discover_fails_open():
    """``discover`` of a server that is not there: nothing advertised, nothing remembered."""
    caps = kvout.discover("http://127.0.0.1:9/v1", timeout_s=0.5)
    assert not caps and kvout.advertised("http://127.0.0.1:9") is None
