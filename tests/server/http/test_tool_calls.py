"""Tool calls over HTTP: OpenAI's non-streamed and streamed shapes, seeded arguments that follow
the offered schema (checked with jsonschema), token counts, and 400s for malformed tools."""

from __future__ import annotations

import json

import httpx
import jsonschema
import openai
import pytest

from pbkv_contract.hints import Hints
from pbkv_server.scenarios.tokenizer import count_tokens

from .test_stream_shape import strict_sse

PARAMS = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "what to search for"},
        "k": {"type": "integer", "minimum": 1, "maximum": 10},
        "scope": {"type": "string", "enum": ["titles", "passages"]},
        "filters": {"type": "object", "properties": {"years": {"type": "array", "items": {"type": "integer"},
                                                               "minItems": 3}},
                    "required": ["years"]},
    },
    "required": ["query", "k", "scope", "filters"],
    "additionalProperties": False,
}
TOOLS = [{"type": "function", "function": {"name": "search_passages", "description": "Search.", "parameters": PARAMS}},
         {"type": "function", "function": {"name": "get_time"}}]
MESSAGES = [{"role": "user", "content": "Which studio released the 1998 film directed by the claimant?"}]


def _post(server, hints=None, **body):
    body = {"model": "m", "messages": MESSAGES, **body}
    return httpx.post(server.base_url + "/chat/completions", json=body, headers=hints.to_headers() if hints else {}, timeout=30)


def test_required_tool_choice_answers_with_a_schema_valid_call(start_server):
    server = start_server(policy="lru")
    resp = _post(server, tools=TOOLS[:1], tool_choice="required")
    assert resp.status_code == 200, resp.text
    choice = resp.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    message = choice["message"]
    assert message["content"] is None and message["role"] == "assistant"
    (call,) = message["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"]["name"] == "search_passages"
    arguments = json.loads(call["function"]["arguments"])
    jsonschema.Draft202012Validator(PARAMS).validate(arguments)
    # completion tokens: the call's name and arguments, counted as text is
    expected = count_tokens("search_passages") + count_tokens(call["function"]["arguments"])
    assert resp.json()["usage"]["completion_tokens"] == expected


def test_named_tool_choice_calls_that_function_and_none_answers_text(start_server):
    server = start_server(policy="lru")
    named = _post(server, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_time"}})
    (call,) = named.json()["choices"][0]["message"]["tool_calls"]
    assert call["function"] == {"name": "get_time", "arguments": "{}"}
    plain = _post(server).json()["choices"][0]
    none = _post(server, tools=TOOLS, tool_choice="none").json()["choices"][0]
    # tool_choice none: the text the same request gets without tools (the text draw is untouched)
    assert none["message"] == plain["message"] and "tool_calls" not in none["message"]
    assert none["finish_reason"] == plain["finish_reason"] == "stop"


def test_calls_are_seeded_by_workflow_step_and_agent(start_server):
    def call(server, wid, step):
        hints = Hints(workflow_id=wid, agent="researcher", step=step, app="tools")
        return _post(server, hints, tools=TOOLS[:1], tool_choice="required").json()["choices"][0]["message"]

    first, second = start_server(policy="lru", seed=3), start_server(policy="lru", seed=3)
    assert call(first, "wf-1", 0) == call(second, "wf-1", 0)  # a rerun is identical
    others = [call(first, "wf-1", 1), call(first, "wf-2", 0)]
    assert all(o["tool_calls"][0]["id"] != call(second, "wf-1", 0)["tool_calls"][0]["id"] for o in others)


def test_auto_after_a_tool_result_answers_in_text_once_rounds_are_spent(start_server):
    server = start_server(policy="lru")
    turn = [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_x", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_x", "content": "12:00"}]
    # the default ToolSettings allow 3 consecutive rounds: after 3, auto always answers in text
    resp = _post(server, messages=[*MESSAGES, *turn * 3], tools=TOOLS, tool_choice="auto")
    choice = resp.json()["choices"][0]
    assert choice["finish_reason"] == "stop" and isinstance(choice["message"]["content"], str)


def test_streamed_call_matches_the_non_streamed_one(start_server):
    server = start_server(policy="lru")
    full = _post(server, tools=TOOLS[:1], tool_choice="required").json()
    resp = _post(server, tools=TOOLS[:1], tool_choice="required", stream=True, stream_options={"include_usage": True})
    chunks = strict_sse(resp.text)
    deltas = [c["choices"][0] for c in chunks if c["choices"]]
    head = deltas[0]["delta"]
    (expected,) = full["choices"][0]["message"]["tool_calls"]
    assert head["role"] == "assistant" and head["content"] is None
    assert head["tool_calls"] == [{"index": 0, "id": expected["id"], "type": "function",
                                   "function": {"name": "search_passages", "arguments": ""}}]
    fragments = [d["delta"]["tool_calls"][0] for d in deltas[1:-1]]
    assert len(fragments) > 2 and all(set(f) == {"index", "function"} and f["index"] == 0 for f in fragments)
    assert "".join(f["function"]["arguments"] for f in fragments) == expected["function"]["arguments"]
    assert deltas[-1] == {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "tool_calls"}
    assert [d["finish_reason"] for d in deltas[:-1]] == [None] * (len(deltas) - 1)
    usage = chunks[-1]["usage"]  # (the second request hits the cache: only cached_tokens differ)
    assert chunks[-1]["choices"] == [] and all(usage[k] == full["usage"][k] for k in ("prompt_tokens",
                                                                                   "completion_tokens"))


def test_openai_client_reads_calls_non_streamed_and_streamed(start_server):
    server = start_server(policy="lru")
    client = openai.OpenAI(base_url=server.base_url, api_key="x")
    done = client.chat.completions.create(model="m", messages=MESSAGES, tools=TOOLS, tool_choice="required")
    call = done.choices[0].message.tool_calls[0]
    assert done.choices[0].finish_reason == "tool_calls" and call.function.name in ("search_passages", "get_time")
    with client.chat.completions.stream(model="m", messages=MESSAGES, tools=TOOLS, tool_choice="required") as stream:
        final = stream.get_final_completion()
    streamed = final.choices[0].message.tool_calls[0]
    assert (streamed.id, streamed.function.name, streamed.function.arguments) == (
        call.id, call.function.name, call.function.arguments)
    assert final.choices[0].finish_reason == "tool_calls"


def test_max_tokens_cuts_the_arguments_with_finish_length(start_server):
    server = start_server(policy="lru")
    resp = _post(server, tools=TOOLS[:1], tool_choice="required", max_tokens=8).json()
    choice = resp["choices"][0]
    assert choice["finish_reason"] == "length" and resp["usage"]["completion_tokens"] <= 8
    arguments = choice["message"]["tool_calls"][0]["function"]["arguments"]
    assert arguments and count_tokens("search_passages") + count_tokens(arguments) == resp["usage"]["completion_tokens"]


@pytest.mark.parametrize("body, param", [
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}]},
     "tools[0].function.parameters.type"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"type": "strnig"}}}}}]}, "tools[0].function.parameters.properties.a.type"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"required": "a"}}}]},
     "tools[0].function.parameters.required"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"$defs": {"A": {"enum": []}}}}}]},
     "tools[0].function.parameters.$defs.A.enum"),
    ({"tools": [{"type": "function"}]}, "tools[0].function"),
    ({"tools": [{"type": "function", "function": {"name": "has space"}}]}, "tools[0].function.name"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "other"}}}, "tool_choice.function.name"),
    ({"tools": TOOLS, "tool_choice": {"type": "function"}}, "tool_choice.function"),
])
def test_malformed_tools_get_one_clear_400(start_server, body, param):
    server = start_server(policy="lru")
    resp = _post(server, **body)
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["param"] == param and "\n" not in error["message"] and error["type"] == "invalid_request_error"


def test_a_scenario_that_declines_is_overruled_only_when_a_call_is_forced(start_server):
    server = start_server(policy="lru", scenario="tests.server.http.server_http_fixtures:DeclineToolsScenario")
    forced = _post(server, tools=TOOLS[:1], tool_choice="required").json()["choices"][0]
    assert forced["finish_reason"] == "tool_calls" and forced["message"]["tool_calls"]
    auto = [_post(server, messages=[{"role": "user", "content": f"question {i}"}], tools=TOOLS).json()["choices"][0]
            for i in range(5)]
    assert all(c["finish_reason"] == "stop" and "tool_calls" not in c["message"] for c in auto)
