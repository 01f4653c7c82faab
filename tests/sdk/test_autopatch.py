"""Process-wide transport stamping: plain OpenAI clients are stamped while an integration holds
the patch, exactly once when an explicit PBKV client is used too, and not at all after release."""

from __future__ import annotations

import logging

import httpx
import openai

import pbkv_sdk
from pbkv_sdk import autopatch, ending

from .fake_openai import FakeOpenAI


def _ask(client: openai.OpenAI) -> None:
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])


def test_a_plain_client_is_stamped_only_while_the_patch_is_held(fake_llm: FakeOpenAI):
    original = httpx.HTTPTransport.handle_request
    client = openai.OpenAI(base_url=fake_llm.base_url, api_key="x")  # created before instrumenting
    autopatch.acquire("test")
    try:
        with pbkv_sdk.workflow(app="a", workflow_id="wf-p", server_url=fake_llm.url), pbkv_sdk.agent("x"):
            _ask(client)
            _ask(openai.OpenAI(base_url=fake_llm.base_url, api_key="x"))  # and one created after
    finally:
        autopatch.release("test")
    assert httpx.HTTPTransport.handle_request is original and not autopatch.active()
    with pbkv_sdk.workflow(app="a", workflow_id="wf-q", server_url=fake_llm.url):
        _ask(client)
    assert [fake_llm.hints_of(r) for r in fake_llm.requests] == [("wf-p", "x", 0, "a"), ("wf-p", "x", 1, "a"), (None, None, None, None)]


def test_an_explicit_pbkv_client_under_the_patch_reserves_one_step_per_request(fake_llm: FakeOpenAI):
    client = openai.OpenAI(base_url=fake_llm.base_url, api_key="x", http_client=pbkv_sdk.http_client())
    autopatch.acquire("test")
    try:
        with pbkv_sdk.workflow(app="a", workflow_id="wf-e", server_url=fake_llm.url) as wf:
            for _ in range(3):
                _ask(client)
    finally:
        autopatch.release("test")
    assert [fake_llm.hints_of(r)[2] for r in fake_llm.requests] == [0, 1, 2] and wf.steps == 3


def test_release_keeps_a_wrapper_another_library_put_on_top_and_switches_ours_off(fake_llm: FakeOpenAI, caplog):
    original = httpx.HTTPTransport.handle_request
    autopatch.acquire("test")
    ours = httpx.HTTPTransport.handle_request

    def theirs(self, request):  # e.g. OpenTelemetry's httpx instrumentation, installed after PBKV
        request.headers["x-other"] = "1"
        return ours(self, request)

    httpx.HTTPTransport.handle_request = theirs
    try:
        autopatch.release("test")
        assert httpx.HTTPTransport.handle_request is theirs  # their wrapper survives
        with pbkv_sdk.workflow(app="a", workflow_id="wf-o", server_url=fake_llm.url):
            _ask(openai.OpenAI(base_url=fake_llm.base_url, api_key="x"))
        assert fake_llm.requests[-1].headers.get("x-other") == "1"
        assert fake_llm.hints_of(fake_llm.requests[-1]) == (None, None, None, None)  # ours is off
        autopatch.acquire("test")  # and comes back on without wrapping twice
        with pbkv_sdk.workflow(app="a", workflow_id="wf-o2", server_url=fake_llm.url):
            _ask(openai.OpenAI(base_url=fake_llm.base_url, api_key="x"))
        assert fake_llm.hints_of(fake_llm.requests[-1])[:3] == ("wf-o2", "unknown", 0)
    finally:
        autopatch.release("test")
        httpx.HTTPTransport.handle_request = original
        autopatch._PATCHED.clear()


def test_langgraph_calls_through_an_unreachable_client_give_one_warning_that_says_how_to_fix_it(fake_llm, caplog):
    from langchain_openai import ChatOpenAI
    from langgraph.graph import END, START, MessagesState, StateGraph

    from pbkv_sdk.integrations.langchain import instrument, uninstrument

    class OtherLibraryTransport(httpx.BaseTransport):
        """Sends with the unpatched transport method, as a client built on another HTTP library would."""

        def __init__(self):
            self.inner = httpx.HTTPTransport()

        def handle_request(self, request):
            return httpx.HTTPTransport.handle_request.__wrapped__(self.inner, request)

    instrument(app="lg", server_url=fake_llm.url)
    try:
        llm = ChatOpenAI(model="m", base_url=fake_llm.base_url, api_key="x", max_retries=0,
                         http_client=httpx.Client(transport=OtherLibraryTransport()))
        graph = StateGraph(MessagesState)
        graph.add_node("writer", lambda state: {"messages": [llm.invoke(state["messages"])]})
        graph.add_edge(START, "writer")
        graph.add_edge("writer", END)
        app = graph.compile()
        with caplog.at_level(logging.WARNING, logger="pbkv_sdk"):
            for _ in range(2):
                app.invoke({"messages": [("user", "hi")]})
    finally:
        uninstrument()
    assert ending.flush(5.0)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("pbkv_sdk")]
    assert len(warnings) == 1 and "1 of 1 LLM call(s)" in warnings[0] and "http_client=pbkv_sdk.http_client()" in warnings[0]
    assert all(fake_llm.hints_of(r) == (None, None, None, None) for r in fake_llm.requests)
    assert len(fake_llm.ends) == 2  # the workflows still end
