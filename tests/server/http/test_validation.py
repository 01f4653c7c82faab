"""Request fields validated as the OpenAI API does, and bounded bodies: one clear 400 per mistake."""

from __future__ import annotations

import json

import httpx
import pytest

from .server_http_fixtures import metric

USER = [{"role": "user", "content": "Hello there"}]


def _post(server, body: dict | bytes, route: str = "/v1/chat/completions") -> httpx.Response:
    if isinstance(body, bytes):
        return httpx.post(server.url + route, content=body, headers={"content-type": "application/json"}, timeout=30)
    return httpx.post(server.url + route, json=body, timeout=30)


@pytest.mark.parametrize("fields, param, code, words", [
    ({"temperature": 5}, "temperature", "invalid_value", "less than or equal to 2"),
    ({"temperature": "0.5"}, "temperature", "invalid_type", "valid number"),
    ({"top_p": -1}, "top_p", "invalid_value", "greater than or equal to 0"),
    ({"presence_penalty": 3}, "presence_penalty", "invalid_value", "less than or equal to 2"),
    ({"tools": "x"}, "tools", "invalid_type", "valid list"),
    ({"tools": [{"type": "function", "function": {"name": "has space"}}]}, "tools[0].function.name", "invalid_value",
     "pattern"),
    ({"tool_choice": "sometimes"}, "tool_choice", "invalid_value", "'none', 'auto' or 'required'"),
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop", "invalid_value", "at most 4"),
    ({"max_tokens": 0}, "max_tokens", "invalid_value", "greater than or equal to 1"),
    ({"max_tokens": True}, "max_tokens", "invalid_type", "valid integer"),
    ({"stream": "yes"}, "stream", "invalid_type", "valid boolean"),
    ({"stream_options": {"include_usage": True}}, "stream_options", "invalid_value", "only allowed when stream is true"),
    ({"logit_bias": {"50256": -500}}, "logit_bias", "invalid_value", "greater than or equal to -100"),
    ({"model": ""}, "model", "invalid_value", "at least 1 character"),
    ({"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role", "invalid_value", "'system'"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": 3}]}]}, "messages[0].content[0].text",
     "invalid_type", "valid string"),
    ({"messages": []}, "messages", "invalid_value", "at least 1 item"),
])
def test_invalid_field_is_a_400_naming_the_field(start_server, fields, param, code, words):
    server = start_server(policy="lru")
    resp = _post(server, {"model": "m", "messages": USER, **fields})
    assert resp.status_code == 400
    err = resp.json()["error"]
    assert (err["param"], err["code"], err["type"]) == (param, code, "invalid_request_error")
    assert words in err["message"]


def test_missing_messages_and_prompt_name_the_required_parameter(start_server):
    server = start_server(policy="lru")
    chat = _post(server, {"model": "m"}).json()["error"]
    completion = _post(server, {"model": "m"}, "/v1/completions").json()["error"]
    assert (chat["code"], chat["param"]) == ("missing_required_parameter", "messages")
    assert (completion["code"], completion["param"]) == ("missing_required_parameter", "prompt")
    batch = _post(server, {"prompt": ["a", "b"]}, "/v1/completions").json()["error"]
    assert batch["code"] == "unsupported_value" and "batched prompts are not supported" in batch["message"]
    for ids in ([1, 2, 3], [[1, 2], [3]]):  # one prompt as token ids is not a batch: say what it is
        error = _post(server, {"prompt": ids}, "/v1/completions").json()["error"]
        assert (error["code"], error["param"]) == ("unsupported_value", "prompt")
        assert "token ids" in error["message"]


def test_a_message_without_content_is_refused_unless_an_assistant_calls_a_tool(start_server):
    # OpenAI requires content on every message but an assistant one that carries tool_calls or a
    # function_call (content null or left out there)
    server = start_server(policy="lru")
    for message in ({"role": "user"}, {"role": "user", "content": None}, {"role": "system", "content": None},
                    {"role": "assistant"}, {"role": "assistant", "content": None}):
        err = _post(server, {"messages": [*USER, message]}).json()["error"]
        assert (err["code"], err["param"]) == ("missing_required_parameter", "messages[1].content"), message
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    served = _post(server, {"messages": [*USER, {"role": "assistant", "content": None, "tool_calls": [call]},
                                         {"role": "tool", "tool_call_id": "c1", "content": "42"}, *USER]})
    assert served.status_code == 200, served.text


@pytest.mark.parametrize("literal", [b"NaN", b"Infinity", b"-Infinity"])
def test_nan_and_infinity_literals_are_invalid_json(start_server, literal):
    server = start_server(policy="lru")
    resp = _post(server, b'{"model": "m", "temperature": ' + literal + b', "messages": [{"role": "user", "content": "x"}]}')
    err = resp.json()["error"]
    assert resp.status_code == 400 and err["code"] == "invalid_json" and "RFC 8259" in err["message"]


def test_number_that_overflows_to_infinity_or_has_5000_digits_is_a_400(start_server):
    server = start_server(policy="lru")
    overflow = _post(server, b'{"temperature": 1e999, "messages": [{"role": "user", "content": "x"}]}')
    assert overflow.status_code == 400 and overflow.json()["error"]["param"] == "temperature"
    digits = _post(server, b'{"seed": ' + b"9" * 5000 + b', "messages": [{"role": "user", "content": "x"}]}')
    assert digits.status_code == 400 and digits.json()["error"]["code"] == "invalid_json"


def test_full_openai_body_with_tools_and_unknown_fields_is_served(start_server):
    server = start_server(policy="lru")
    body = {
        "model": "m", "messages": [
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "What is 2+2?"},
                                         {"type": "image_url", "image_url": {"url": "data:,"}}]},
            {"role": "assistant", "content": None,
             "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "4"}],
        "temperature": 0, "top_p": 1.0, "n": 1, "max_completion_tokens": 20, "max_tokens": 10.0, "seed": 7,
        "stop": ["\n\n"], "presence_penalty": -2, "frequency_penalty": 2, "logit_bias": {"50256": -100},
        "logprobs": True, "top_logprobs": 20, "parallel_tool_calls": False, "user": "u1",
        "tools": [{"type": "function", "function": {"name": "add", "description": "adds",
                                                     "parameters": {"type": "object", "properties": {}}}}],
        "tool_choice": {"type": "function", "function": {"name": "add"}},
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}},
        "prompt_cache_key": "newer-than-this-server", "verbosity": "low",  # unknown: accepted, ignored
    }
    resp = _post(server, body)
    assert resp.status_code == 200, resp.text
    assert resp.json()["usage"]["completion_tokens"] <= 20  # max_completion_tokens wins over max_tokens


def test_body_nested_deeper_than_the_limit_is_a_400_and_at_the_limit_is_served(start_server):
    server = start_server(policy="lru", max_json_depth=10)
    # The body object is level 1 and messages[0] level 3: metadata adds levels 2 and up.
    def body(depth: int) -> bytes:
        nested = "[" * (depth - 1) + "]" * (depth - 1)
        return ('{"messages": [{"role": "user", "content": "x"}], "extra": ' + nested + "}").encode()

    assert _post(server, body(10)).status_code == 200
    resp = _post(server, body(11))
    err = resp.json()["error"]
    assert resp.status_code == 400 and err["code"] == "invalid_json" and "11 levels" in err["message"]
    # Brackets inside strings do not nest.
    assert _post(server, json.dumps({"messages": [{"role": "user", "content": "[" * 50}]}).encode()).status_code == 200


def test_prompt_over_the_token_budget_is_refused_with_context_length_exceeded(start_server):
    server = start_server(policy="lru", max_prompt_tokens=100)
    ok = _post(server, {"messages": [{"role": "user", "content": "word " * 40}]})
    assert ok.status_code == 200
    for content in ("word " * 150, "x" * 10_000):  # the second is refused by its length alone
        resp = _post(server, {"messages": [{"role": "user", "content": content}]})
        err = resp.json()["error"]
        assert resp.status_code == 400 and err["code"] == "context_length_exceeded" and err["param"] == "messages"
        assert "over the limit of 100 tokens" in err["message"]
    prompt = _post(server, {"prompt": "word " * 150}, "/v1/completions").json()["error"]
    assert prompt["param"] == "prompt" and prompt["code"] == "context_length_exceeded"
    text = httpx.get(server.url + "/metrics", timeout=30).text
    assert metric(text, "pbkv_prompt_tokens_total") == ok.json()["usage"]["prompt_tokens"]  # refused: never queued


def test_huge_prompt_is_refused_without_tokenizing_it(start_server, monkeypatch):
    import pbkv_server.scenarios.tokenizer as tokenizer

    server = start_server(policy="lru", device_tokens=50_000)
    seen: list[int] = []
    real = tokenizer.token_starts
    monkeypatch.setattr(tokenizer, "token_starts", lambda text: seen.append(len(text)) or real(text))
    resp = _post(server, {"messages": [{"role": "user", "content": "lorem ipsum " * 400_000}]})  # 4.8 MB
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "context_length_exceeded"
    assert seen == []  # refused on its length: 4.8M characters are at least 686k tokens > 49,999


def test_fields_of_the_other_route_are_ignored_not_used(start_server):
    # Found by the long fuzz run: a chat body with a stray "prompt": true was a 500.
    server = start_server(policy="lru")
    chat = _post(server, {"messages": USER, "prompt": True, "max_tokens": 3})
    assert chat.status_code == 200 and chat.json()["usage"]["completion_tokens"] <= 3
    completion = _post(server, {"prompt": "Once upon", "messages": 5, "max_completion_tokens": "x", "max_tokens": 2},
                       "/v1/completions")
    assert completion.status_code == 200 and completion.json()["usage"]["completion_tokens"] <= 2
