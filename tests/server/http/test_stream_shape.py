"""Regression case 9 (docs/regressions.md): SSE stream shape, the usage-only chunk, and n (choices per request).

pbkv-server answers one choice per request: n from 2 to 128 is a 400 that says so (never a silent
single choice), n outside 1-128 is a 400 like OpenAI's. Streams are checked with a strict SSE
parser written here and with the official openai client's stream accumulator.
"""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from pbkv_server.scenarios.tokenizer import count_tokens, prompt_tokens

MESSAGES = [{"role": "system", "content": "You are a careful assistant."},
            {"role": "user", "content": "Summarise the claim about the 1998 film in two sentences."}]


def strict_sse(text: str) -> list[dict]:
    """Parse an OpenAI SSE body strictly: only ``data:`` lines, one per event, ``[DONE]`` last."""
    assert text.endswith("\n\n"), "every event ends with a blank line"
    events = text[:-2].split("\n\n")
    assert events[-1] == "data: [DONE]" and all(e != "data: [DONE]" for e in events[:-1])
    chunks = []
    for event in events[:-1]:
        assert event.startswith("data: ") and "\n" not in event, repr(event[:80])
        chunks.append(json.loads(event[len("data: "):]))
    return chunks


def _stream(server, **body) -> tuple[httpx.Response, list[dict]]:
    resp = httpx.post(server.base_url + "/chat/completions",
                      json={"model": "m", "messages": MESSAGES, "max_tokens": 8, "stream": True, **body}, timeout=30)
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
    return resp, strict_sse(resp.text)


def _common_shape(chunks: list[dict]) -> None:
    ids, models = {c["id"] for c in chunks}, {c["model"] for c in chunks}
    assert len(ids) == 1 and len(models) == 1 and "" not in ids and "" not in models
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    content = [c for c in chunks if c["choices"]]
    assert {ch["index"] for c in content for ch in c["choices"]} == {0}
    finishes = [ch["finish_reason"] for c in content for ch in c["choices"] if ch["finish_reason"] is not None]
    assert finishes == ["length"]  # max_tokens=8 cuts the reply: exactly one finish_reason
    assert content[0]["choices"][0]["delta"]["role"] == "assistant"


def test_stream_with_include_usage_ends_with_one_usage_chunk_then_done(start_server):
    server = start_server(policy="lru")
    _, chunks = _stream(server, stream_options={"include_usage": True})
    _common_shape(chunks)
    usage_chunks = [c for c in chunks if not c["choices"]]
    assert len(usage_chunks) == 1 and usage_chunks[0] is chunks[-1]
    assert all(c["usage"] is None for c in chunks[:-1])  # OpenAI: usage null on every other chunk
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    usage = chunks[-1]["usage"]
    assert usage["completion_tokens"] == count_tokens(text) <= 8
    assert usage["prompt_tokens"] == prompt_tokens(MESSAGES)
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert usage["prompt_tokens_details"] == {"cached_tokens": 0}  # first time: 0, not null


def test_stream_without_include_usage_has_no_usage_chunk_and_no_usage_key(start_server):
    server = start_server(policy="lru")
    _, chunks = _stream(server)
    _common_shape(chunks)
    assert all(c["choices"] for c in chunks) and all("usage" not in c for c in chunks)


def test_openai_client_accumulates_the_stream_into_the_non_streamed_answer(start_server):
    server = start_server(policy="lru")
    client = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)
    # No max_tokens: the accumulator's parse step refuses a reply cut by the length limit.
    with client.chat.completions.stream(model="m", messages=MESSAGES, stream_options={"include_usage": True}) as stream:
        final = stream.get_final_completion()
    plain = client.chat.completions.create(model="m", messages=MESSAGES)
    assert len(final.choices) == 1 and final.choices[0].index == 0
    assert final.choices[0].message.content == plain.choices[0].message.content
    assert final.choices[0].finish_reason == plain.choices[0].finish_reason == "stop"
    assert final.usage.completion_tokens == plain.usage.completion_tokens
    assert final.usage.prompt_tokens == plain.usage.prompt_tokens
    # The streamed request put the prompt in the cache once; the plain one hit it.
    assert plain.usage.prompt_tokens_details.cached_tokens > 0


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("route, body", [
    ("/chat/completions", {"messages": MESSAGES}),
    ("/completions", {"prompt": "Once upon a time"}),
])
def test_n_above_one_is_a_400_saying_it_is_not_supported(start_server, route, body, stream):
    server = start_server(policy="lru")
    extra = {"stream_options": {"include_usage": True}} if stream else {}
    resp = httpx.post(server.base_url + route, json={"model": "m", "n": 2, "stream": stream, "max_tokens": 8,
                                                     **extra, **body}, timeout=30)
    assert resp.status_code == 400
    err = resp.json()["error"]
    assert (err["param"], err["code"], err["type"]) == ("n", "unsupported_value", "invalid_request_error")
    assert "not supported" in err["message"] and "one choice" in err["message"]


@pytest.mark.parametrize("n", [0, 129, -1])
def test_n_outside_openai_range_is_a_400_invalid_value(start_server, n):
    server = start_server(policy="lru")
    resp = httpx.post(server.base_url + "/chat/completions", json={"model": "m", "messages": MESSAGES, "n": n}, timeout=30)
    assert resp.status_code == 400
    assert resp.json()["error"] == {"message": f"n must be an integer from 1 to 128, got {n}",
                                    "type": "invalid_request_error", "param": "n", "code": "invalid_value"}


def test_openai_client_sees_a_bad_request_error_for_n_two(start_server):
    server = start_server(policy="lru")
    client = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="m", messages=MESSAGES, n=2)
    assert caught.value.param == "n" and caught.value.code == "unsupported_value"
