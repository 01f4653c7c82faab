"""Behind a router: the affinity header on every stamped request, end signals and app graphs that
reach the replicas (targeted by the router's served-by header, else fanned out), fail-open."""

from __future__ import annotations

import logging
import socket

import openai
import pytest

import pbkv_sdk
from pbkv_sdk import ending, routing

from .fake_openai import FakeOpenAI


def _chat(client: openai.OpenAI, text: str, stream: bool = False) -> None:
    out = client.chat.completions.create(model="m", messages=[{"role": "user", "content": text}], stream=stream)
    if stream:
        list(out)


def _client(base_url: str, **kwargs) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key="x", max_retries=0, http_client=pbkv_sdk.http_client(**kwargs))


@pytest.fixture
def three(serve_asgi) -> list[FakeOpenAI]:
    """Three fake replicas on free ports (``.url`` set)."""
    fakes = []
    for _ in range(3):
        fake = FakeOpenAI()
        fake.url = serve_asgi(fake.app).url
        fake.base_url = fake.url + "/v1"
        fakes.append(fake)
    return fakes


def _closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"  # nothing listens there once the socket is closed


def test_every_stamped_request_carries_the_workflow_id_in_the_smg_routing_key(fake_llm: FakeOpenAI):
    client = _client(fake_llm.base_url)
    with pbkv_sdk.workflow(app="demo", workflow_id="wf-route", server_url=fake_llm.url):
        with pbkv_sdk.agent("a"):
            _chat(client, "one")
            _chat(client, "two", stream=True)
    _chat(client, "outside")  # not in a workflow: untouched
    keys = [r.headers.get("x-smg-routing-key") for r in fake_llm.requests]
    assert keys == ["wf-route", "wf-route", None]


def test_routing_header_name_comes_from_the_environment_and_none_switches_it_off(fake_llm: FakeOpenAI, monkeypatch):
    client = _client(fake_llm.base_url)
    monkeypatch.setenv("PBKV_ROUTING_HEADER", "X-Dynamo-Session-ID")
    with pbkv_sdk.workflow(app="demo", workflow_id="wf-dyn", server_url=fake_llm.url):
        _chat(client, "one")
    monkeypatch.setenv("PBKV_ROUTING_HEADER", "none")
    with pbkv_sdk.workflow(app="demo", workflow_id="wf-off", server_url=fake_llm.url):
        _chat(client, "two")
    first, second = (r.headers for r in fake_llm.requests)
    assert first.get("x-dynamo-session-id") == "wf-dyn" and "x-smg-routing-key" not in first
    assert "x-smg-routing-key" not in second and "x-dynamo-session-id" not in second
    assert second.get("x-pbkv-workflow-id") == "wf-off"  # the hints themselves still go out


def test_a_routing_key_the_app_set_itself_is_kept(fake_llm: FakeOpenAI):
    client = openai.OpenAI(base_url=fake_llm.base_url, api_key="x", http_client=pbkv_sdk.http_client(),
                           default_headers={"X-SMG-Routing-Key": "user-7"})
    with pbkv_sdk.workflow(app="demo", workflow_id="wf-mine", server_url=fake_llm.url):
        _chat(client, "one")
    assert fake_llm.requests[0].headers["x-smg-routing-key"] == "user-7"


def test_a_bad_routing_header_name_is_reported_once_and_the_request_still_goes_out(fake_llm, monkeypatch, caplog):
    monkeypatch.setenv("PBKV_ROUTING_HEADER", "Bad Header:")
    client = _client(fake_llm.base_url)
    with caplog.at_level(logging.WARNING, logger="pbkv_sdk"):
        for wid in ("wf-b1", "wf-b2"):
            with pbkv_sdk.workflow(app="demo", workflow_id=wid, server_url=fake_llm.url):
                _chat(client, "x")
    assert [fake_llm.hints_of(r)[0] for r in fake_llm.requests] == ["wf-b1", "wf-b2"]
    assert sum("PBKV_ROUTING_HEADER" in r.getMessage() for r in caplog.records) == 1


def test_end_goes_only_to_the_listed_replica_the_router_named(three: list[FakeOpenAI], monkeypatch):
    router, r1, r2 = three  # the first fake plays the router: it names r2 as the worker
    router.answer_headers = {"x-smg-routed-worker-id": r2.url}
    monkeypatch.setenv("PBKV_REPLICAS", f"{r1.url}, {r2.url}/")
    client = _client(router.base_url)
    with pbkv_sdk.workflow(app="demo", workflow_id="wf-target", server_url=router.url):
        _chat(client, "one")
        _chat(client, "two", stream=True)
    assert ending.flush(5.0)
    assert [e[:2] for e in r2.ends] == [("wf-target", "completed")]
    assert r1.ends == [] and router.ends == []  # not the router (SMG answers 404), not the other replica


def test_end_fans_out_to_every_listed_replica_when_the_router_names_none(three: list[FakeOpenAI]):
    router, r1, r2 = three
    routing.configure(replicas=[r1.url, r2.url])
    client = _client(router.base_url)
    with pbkv_sdk.workflow(app="demo", workflow_id="wf-fan", server_url=router.url):
        _chat(client, "one")
    assert ending.flush(5.0)
    assert [e[:2] for e in r1.ends] == [("wf-fan", "completed")] == [e[:2] for e in r2.ends]
    assert router.ends == []


def test_a_served_by_worker_outside_the_list_is_never_contacted(three: list[FakeOpenAI]):
    router, r1, outsider = three
    router.answer_headers = {"x-smg-routed-worker-id": outsider.url}  # untrusted answer header
    routing.configure(replicas=[r1.url])
    client = _client(router.base_url)
    with pbkv_sdk.workflow(app="demo", workflow_id="wf-out", server_url=router.url):
        _chat(client, "one")
    assert ending.flush(5.0)
    assert outsider.ends == [] and [e[0] for e in r1.ends] == ["wf-out"]


def test_a_dead_replica_in_the_list_fails_open_and_is_skipped_for_a_while(three: list[FakeOpenAI], caplog):
    router, r1, _ = three
    dead = _closed_port_url()
    routing.configure(replicas=[dead, r1.url])
    client = _client(router.base_url)
    attempts = []
    real_send = ending._Sender._send

    def counting(self, method, url, *args):
        if url.startswith(dead):
            attempts.append(url)
        return real_send(self, method, url, *args)

    with caplog.at_level(logging.DEBUG, logger="pbkv_sdk"):
        import unittest.mock as mock

        with mock.patch.object(ending._Sender, "_send", counting):
            for wid in ("wf-d1", "wf-d2", "wf-d3"):
                with pbkv_sdk.workflow(app="demo", workflow_id=wid, server_url=router.url):
                    _chat(client, "one")
                assert ending.flush(5.0)
    assert [e[0] for e in r1.ends] == ["wf-d1", "wf-d2", "wf-d3"]  # the live replica got every end
    assert len(attempts) == 3  # queued each time...
    skipped = [r for r in caplog.records if "skipped" in r.getMessage() and dead.split("//")[1] in r.getMessage()]
    assert len(skipped) == 2  # ...but only the first one waited for the dead replica
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and dead.split("//")[1] in r.getMessage()]
    assert len(warnings) == 1


def test_a_slow_replica_is_not_skipped_its_later_ends_are_still_sent(three: list[FakeOpenAI]):
    router, slow, _ = three
    slow.end_delay_s = 0.5  # answers after the 0.1 s budget: a read timeout, but the replica is alive
    routing.configure(replicas=[slow.url])
    client = _client(router.base_url)
    for wid in ("wf-s1", "wf-s2"):
        with pbkv_sdk.workflow(app="demo", workflow_id=wid, server_url=router.url, end_timeout_s=0.1):
            _chat(client, "one")
        assert ending.flush(5.0)
    assert [e[0] for e in slow.ends] == ["wf-s1", "wf-s2"]


def test_end_to_an_smg_router_without_a_replica_list_names_the_fix(serve_asgi, caplog):
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    smg = FastAPI()  # answers like SMG 1.13 does for /pbkv/v1/... (measured on the real router)

    @smg.post("/pbkv/v1/workflows/{wid}/end")
    async def _unknown(wid: str):
        return JSONResponse({"error": {"code": "unknown_url"}}, status_code=404, headers={"x-smg-error-code": "unknown_url"})

    url = serve_asgi(smg).url
    with caplog.at_level(logging.WARNING, logger="pbkv_sdk"):
        pbkv_sdk.end_workflow("wf-smg", server_url=url)
        assert ending.flush(5.0)
    (msg,) = [r.getMessage() for r in caplog.records if "end signal" in r.getMessage()]
    assert "SMG router" in msg and "PBKV_REPLICAS" in msg


def test_hints_dropped_on_the_way_are_reported_once_with_the_fix(fake_llm: FakeOpenAI, caplog):
    fake_llm.answer_headers = {"X-PBKV-Hints": "anonymous"}  # what pbkv-server answers behind SMG
    client = _client(fake_llm.base_url)
    with caplog.at_level(logging.WARNING, logger="pbkv_sdk"):
        for wid in ("wf-h1", "wf-h2"):
            with pbkv_sdk.workflow(app="demo", workflow_id=wid, server_url=fake_llm.url):
                _chat(client, "x")
        body_client = _client(fake_llm.base_url, body_hints=True)
        with pbkv_sdk.workflow(app="demo", workflow_id="wf-h3", server_url=fake_llm.url):
            _chat(body_client, "x")  # body hints on: no warning about headers
    found = [r.getMessage() for r in caplog.records if "X-PBKV-Hints: anonymous" in r.getMessage()]
    assert len(found) == 1 and "PBKV_BODY_HINTS=1" in found[0]


def test_declare_graph_reaches_every_listed_replica(three: list[FakeOpenAI]):
    router, r1, r2 = three
    routing.configure(replicas=[r1.url, r2.url])
    edges = {"planner": ["coder"], "coder": ["tester"], "tester": []}
    assert routing.declare_graph("fin app", edges, server_url=router.url) == 2
    assert ending.flush(5.0)
    assert r1.graphs == [("fin app", {"edges": edges})] == r2.graphs
    assert router.graphs == []
    routing.configure(replicas=[])
    assert routing.declare_graph("solo", {"a": ["b"]}, server_url=router.base_url) == 1  # /v1 dropped
    assert ending.flush(5.0)
    assert router.graphs == [("solo", {"edges": {"a": ["b"]}})]
    for bad in ({"a": "b"}, {"a": 3}, {"a": [1]}, [("a", ["b"])]):
        with pytest.raises(ValueError, match="edges"):
            routing.declare_graph("solo", bad)


def test_replica_lists_are_checked_and_normalised(monkeypatch, caplog):
    with pytest.raises(ValueError, match="replica URL"):
        routing.configure(replicas=["localhost:8000"])
    with pytest.raises(ValueError, match="at most"):
        routing.configure(replicas=[f"http://10.0.0.{i % 250}:{8000 + i}" for i in range(routing.MAX_REPLICAS + 1)])
    with pytest.raises(ValueError, match="header name"):
        routing.configure(routing_header="two words")
    monkeypatch.setenv("PBKV_REPLICAS", "http://A:1/v1/, bogus, http://a:1 https://b")
    with caplog.at_level(logging.WARNING, logger="pbkv_sdk"):
        assert routing.replicas() == ("http://a:1", "https://b")
    assert any("bogus" in r.getMessage() for r in caplog.records)
    assert routing.end_targets(["http://a:1/"]) == ("http://a:1",)
    assert routing.end_targets(["http://c:1", "not a url"]) == ("http://a:1", "https://b")
    monkeypatch.delenv("PBKV_REPLICAS")
    assert routing.end_targets(["http://a:1"]) is None
