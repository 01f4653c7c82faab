"""Names the server would not accept, and the server's verdict on the hints (README "Adding PBKV to
your app": if the server rejects a hint, the app runs as before and one warning is logged)."""

from __future__ import annotations

import logging

import httpx
import openai
import pytest

import pbkv_sdk
from pbkv_contract.hints import HEADERS, MAX_FIELD_CHARS, Hints
from pbkv_contract.trace import InvocationRecord, iter_trace

from .fake_openai import FakeOpenAI


def _chat(client: openai.OpenAI, text: str = "x") -> None:
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": text}])


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("pbkv_sdk")]


def _has_hints(request) -> bool:
    return any(h.lower() in request.headers for h in HEADERS)


@pytest.fixture
def pbkv_server():
    from pbkv_server.http import ServerConfig, run_in_thread

    with run_in_thread(ServerConfig(port=0, policy="lru")) as server:
        yield server


@pytest.mark.parametrize("bad, code", [("tab\there", "control character U+0009 at index 3"),
                                       ("line\nbreak", "control character U+000A at index 4"),
                                       ("né\x00e\x01", "control character U+0000 at index 2"),  # the first one, by characters
                                       ("lone\ud800surrogate", "lone surrogate U+D800 at index 4")])
def test_an_agent_name_the_server_would_ignore_is_sent_without_hints_left_out_of_the_trace_and_warned_once(
        fake_llm: FakeOpenAI, tmp_path, caplog, bad, code):
    client = openai.OpenAI(base_url=fake_llm.base_url, api_key="x", http_client=pbkv_sdk.http_client())
    trace = tmp_path / "t.jsonl"
    with caplog.at_level(logging.WARNING, logger="pbkv_sdk"):
        with pbkv_sdk.workflow(app="demo", server_url=fake_llm.url, trace_path=trace) as wf:
            for _ in range(3):
                wf.expect_llm_call()  # as an integration announces each call
            with pbkv_sdk.agent(bad):
                _chat(client)
                _chat(client)
            with pbkv_sdk.agent("checker"):
                _chat(client)
        pbkv_sdk.recorder.flush_all()
    assert len(fake_llm.requests) == 3  # every request still went out
    assert [_has_hints(r) for r in fake_llm.requests] == [False, False, True]
    assert fake_llm.hints_of(fake_llm.requests[2])[1:3] == ("checker", 0)  # no step spent on the unhinted ones
    invs = [r for r in iter_trace(trace) if isinstance(r, InvocationRecord)]
    assert [(r.agent, r.step) for r in invs] == [("checker", 0)]
    warnings = _warnings(caplog)
    assert len(warnings) == 1, warnings  # one per distinct name; no 'calls left without hints' warning at the end
    assert repr(bad) in warnings[0] and code in warnings[0]
    assert "would ignore" in warnings[0] and "without PBKV hints" in warnings[0]


def test_an_app_name_the_server_would_ignore_sends_the_workflow_without_hints(fake_llm: FakeOpenAI, caplog):
    client = openai.OpenAI(base_url=fake_llm.base_url, api_key="x", http_client=pbkv_sdk.http_client())
    with caplog.at_level(logging.WARNING, logger="pbkv_sdk"):
        with pbkv_sdk.workflow(app="my\x7fapp", server_url=fake_llm.url), pbkv_sdk.agent("planner"):
            _chat(client)
    assert not _has_hints(fake_llm.requests[0])
    warnings = _warnings(caplog)
    assert len(warnings) == 1 and "app name 'my\\x7fapp'" in warnings[0] and "U+007F at index 2" in warnings[0]


def test_over_long_agent_names_are_sent_cut_with_one_warning_each_that_they_may_collide(fake_llm: FakeOpenAI, tmp_path,
                                                                                        caplog):
    client = openai.OpenAI(base_url=fake_llm.base_url, api_key="x", http_client=pbkv_sdk.http_client())
    stem = "a" * MAX_FIELD_CHARS
    trace = tmp_path / "t.jsonl"
    with caplog.at_level(logging.WARNING, logger="pbkv_sdk"):
        with pbkv_sdk.workflow(app="demo", server_url=fake_llm.url, trace_path=trace):
            for suffix in ("-planner", "-coder", "-planner"):
                with pbkv_sdk.agent(stem + suffix):
                    _chat(client)
        pbkv_sdk.recorder.flush_all()
    assert [fake_llm.hints_of(r)[1:3] for r in fake_llm.requests] == [(stem, 0), (stem, 1), (stem, 2)]
    assert [r.agent for r in iter_trace(trace) if isinstance(r, InvocationRecord)] == [stem] * 3  # what was sent
    warnings = _warnings(caplog)
    assert len(warnings) == 2  # one per distinct name
    assert all("cut to" in w and "collide" in w for w in warnings)
    assert "-planner" in warnings[0] and "-coder" in warnings[1]


def test_the_names_the_sdk_withholds_are_exactly_those_pbkv_server_ignores(pbkv_server, caplog):
    """Both sides use the protocol's one rule: what the SDK sends is accepted ('ok'), and a name
    sent by hand is ignored exactly when the SDK withheld it or cut it to fit."""
    names = ["planner", "Ré viewer/α 100%", "tab\there", "nl\n", "nul\x00", "del\x7f", "c1\x85",
             "é" * 100, "x" * 300, "emoji \U0001F600"]
    client = openai.OpenAI(base_url=pbkv_server.url + "/v1", api_key="x", http_client=pbkv_sdk.http_client())
    sdk_verdicts, by_hand = [], []
    with caplog.at_level(logging.WARNING, logger="pbkv_sdk"):
        for name in names:
            with pbkv_sdk.workflow(app="demo", server_url=pbkv_server.url), pbkv_sdk.agent(name):
                raw = client.chat.completions.with_raw_response.create(model="m", messages=[{"role": "user", "content": "x"}])
            sdk_verdicts.append(raw.headers["x-pbkv-hints"])
            body = {"model": "m", "messages": [{"role": "user", "content": "x"}],
                    "custom_params": {"pbkv": Hints("wf-hand", name, 0, "demo").to_body()}}
            by_hand.append(httpx.post(pbkv_server.url + "/v1/chat/completions", json=body, timeout=30).headers["x-pbkv-hints"])
    withheld = [v == "anonymous" for v in sdk_verdicts]
    assert set(sdk_verdicts) == {"ok", "anonymous"}  # never 'ignored'
    assert withheld == [False, False, True, True, True, True, True, False, False, False]
    cut = [n in ("é" * 100, "x" * 300) for n in names]  # sent cut to fit (and accepted, above)
    assert [v == "ignored" for v in by_hand] == [w or c for w, c in zip(withheld, cut)]


def test_a_server_that_ignores_the_hints_gets_one_warning_that_says_where_to_look(fake_llm: FakeOpenAI, caplog):
    client = openai.OpenAI(base_url=fake_llm.base_url, api_key="x", http_client=pbkv_sdk.http_client())
    with caplog.at_level(logging.WARNING, logger="pbkv_sdk"):
        with pbkv_sdk.workflow(app="demo", server_url=fake_llm.url), pbkv_sdk.agent("planner"):
            _chat(client)  # the first answer of a workflow is read in full ...
            fake_llm.answer_headers = {"X-PBKV-Hints": "ignored"}
            _chat(client)  # ... later ones too, for the verdict
            _chat(client)
        with pbkv_sdk.workflow(app="demo", server_url=fake_llm.url), pbkv_sdk.agent("planner"):
            _chat(client)
    warnings = _warnings(caplog)
    assert len(warnings) == 1, warnings  # once per process
    assert "X-PBKV-Hints: ignored" in warnings[0] and "pbkv_malformed_hints_total" in warnings[0]
    assert "agent 'planner'" in warnings[0]
