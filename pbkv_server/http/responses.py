"""OpenAI response bodies of pbkv-server: full chat/text completions and their SSE streams.

Shapes follow the OpenAI API: ``chat.completion`` / ``text_completion`` objects with ``usage``
(``prompt_tokens_details.cached_tokens``); streams of ``chat.completion.chunk`` events, the role
first, ``usage: null`` on every chunk when ``stream_options.include_usage`` is set and a final
usage chunk with empty ``choices``, then ``data: [DONE]``.

A tool-call answer is ``message.tool_calls`` with ``content: null`` and ``finish_reason:
"tool_calls"``; streamed, its first delta carries the role and each call's ``index``, ``id``,
``type`` and ``function.name`` with empty ``arguments``, and the following deltas carry the
arguments text in fragments of a few tokens (``tool_calls[{index, function: {arguments}}]``), as
OpenAI streams them.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any, AsyncIterator

from pbkv_server.http.driver import EngineFailure, Submission
from pbkv_server.http.errors import error_body
from pbkv_server.http.exchange import Completion, Prepared
from pbkv_server.scenarios.tokenizer import token_starts

__all__ = ["full_response", "stream_events", "model_card"]

# Words per streamed content chunk: real servers stream a token or a few per chunk.
_WORDS_PER_CHUNK = 4
# Tokens per streamed fragment of a tool call's arguments.
_TOKENS_PER_ARGS_CHUNK = 4
_CHUNK_RE = re.compile(r"\S+\s*|\s+")


#: ``owned_by`` of the models this server lists.
MODEL_OWNER = "pbkv"

def model_card(model_id: str) -> dict[str, Any]:
    """The ``model`` object of ``/v1/models``."""
    return {"id": model_id, "object": "model", "created": 0, "owned_by": MODEL_OWNER}


def full_response(prep: Prepared, result: Completion) -> dict[str, Any]:
    """The non-streamed ``chat.completion`` or ``text_completion`` body."""
    created = int(time.time())
    if prep.kind == "chat":
        choice: dict[str, Any] = {
            "index": 0,
            "message": ({"role": "assistant", "content": None, "tool_calls": prep.tool_calls} if prep.tool_calls
                        else {"role": "assistant", "content": prep.text}),
            "logprobs": None,
            "finish_reason": prep.finish_reason,
        }
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": prep.text, "logprobs": None, "finish_reason": prep.finish_reason}
        obj = "text_completion"
    return {
        "id": prep.request_id,
        "object": obj,
        "created": created,
        "model": prep.model,
        "choices": [choice],
        "usage": result.usage(),
        "system_fingerprint": "pbkv-sim",
    }


async def stream_events(service: Any, prep: Prepared, sub: Submission) -> AsyncIterator[str]:
    """SSE lines of a streamed answer; the first token has already arrived when it is called.

    The role chunk and the first words go out at once, the rest when the engine finishes the
    request (the engine reports first token and completion, not every token). An engine failure
    mid-stream ends the stream with an OpenAI error event.
    """
    created = int(time.time())
    # First token has arrived: the events in ``first`` go out now, ``rest`` when decoding ends.
    if prep.tool_calls:
        heads = [{"index": i, "id": c["id"], "type": "function",
                  "function": {"name": c["function"]["name"], "arguments": ""}} for i, c in enumerate(prep.tool_calls)]
        pieces = [_delta(prep, created, {"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
                  for i, c in enumerate(prep.tool_calls) for piece in _fragments(c["function"]["arguments"])]
        head = _delta(prep, created, {"role": "assistant", "content": None, "tool_calls": heads})
    else:
        words = _CHUNK_RE.findall(prep.text)
        pieces = [_chunk(prep, created, "".join(words[i : i + _WORDS_PER_CHUNK]), None)
                  for i in range(0, len(words), _WORDS_PER_CHUNK)]
        head = _chunk(prep, created, "" if prep.kind == "chat" else None, None, role=True)
    for event in (head, *pieces[:1]):
        yield event
    try:
        result = await service.finish(prep, sub)
    except EngineFailure as exc:
        yield "data: " + json.dumps(error_body(500, str(exc), "engine_failure")) + "\n\n"
        return
    for event in pieces[1:]:
        yield event
    yield _chunk(prep, created, None, prep.finish_reason)
    if prep.include_usage:
        obj = "chat.completion.chunk" if prep.kind == "chat" else "text_completion"
        usage = {"id": prep.request_id, "object": obj, "created": created, "model": prep.model,
                 "choices": [], "usage": result.usage()}
        yield "data: " + json.dumps(usage, separators=(",", ":")) + "\n\n"
    yield "data: [DONE]\n\n"


def _fragments(arguments: str) -> list[str]:
    """``arguments`` in pieces of :data:`_TOKENS_PER_ARGS_CHUNK` tokens (none for an empty string)."""
    starts = token_starts(arguments)[::_TOKENS_PER_ARGS_CHUNK]
    return [arguments[a:b] for a, b in zip(starts, [*starts[1:], len(arguments)])]


def _delta(prep: Prepared, created: int, delta: dict[str, Any]) -> str:
    """A chat chunk with ``delta`` and no finish reason."""
    data = {"id": prep.request_id, "object": "chat.completion.chunk", "created": created, "model": prep.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}]}
    if prep.include_usage:
        data["usage"] = None
    return "data: " + json.dumps(data, separators=(",", ":")) + "\n\n"


def _chunk(prep: Prepared, created: int, content: str | None, finish: str | None, role: bool = False) -> str:
    if prep.kind == "chat":
        delta: dict[str, Any] = {}
        if role:
            delta["role"] = "assistant"
        if content is not None:
            delta["content"] = content
        choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        obj = "chat.completion.chunk"
    else:
        choice = {"index": 0, "text": content or "", "logprobs": None, "finish_reason": finish}
        obj = "text_completion"
    data = {"id": prep.request_id, "object": obj, "created": created, "model": prep.model, "choices": [choice]}
    if prep.include_usage:
        data["usage"] = None  # OpenAI sends usage: null on every chunk but the last when asked for usage
    return "data: " + json.dumps(data, separators=(",", ":")) + "\n\n"
