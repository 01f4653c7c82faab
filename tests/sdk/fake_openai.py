"""An OpenAI-compatible fake LLM server for SDK tests (FastAPI), recording every request.

Serves ``POST /v1/chat/completions`` (streaming and not, usage in both) and the PBKV workflow
end and app graph endpoints. Replies are deterministic and framework-friendly:

* a speaker-selection prompt of AutoGen's SelectorGroupChat ("select the next role from [a, b]")
  is answered with the first listed role;
* everything else gets ``"Thought: done\\nFinal Answer: reply <n>"`` (CrewAI's parser needs the
  ``Final Answer:`` line; other frameworks take it as plain text), with ``n`` a global counter.

Tests can script replies instead (``reply_fn``): a function of the request body and the request
number that returns the reply text, or a message dict with ``content`` and/or ``tool_calls``
(OpenAI's shape), so that frameworks run tool calls and handoffs against it.

Token counts are whitespace words: ``prompt_tokens`` = words of all message contents,
``completion_tokens`` = words of the reply, ``cached_tokens`` = ``prompt_tokens // 2`` (so tests can
check that the trace copies server usage verbatim).
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

_ROLE_LIST_RE = re.compile(r"select the next role from \[([^\]]*)\]", re.IGNORECASE)


@dataclass
class Recorded:
    """One LLM request as the server saw it: lower-cased headers, decoded JSON body, arrival time."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    t: float


@dataclass
class FakeOpenAI:
    """State and settings of the fake server; ``app`` is the ASGI application.

    Attributes:
        requests: every LLM request in arrival order.
        ends: ``(workflow_id, status, t)`` of every end signal received (even when answering 500).
        end_status_code: status the end endpoint answers (204, or 500 to test fail-open).
        end_delay_s: delay before the end endpoint answers (to test that the SDK never waits).
        chunk_delay_s: delay between streamed chunks, and before the first one.
        reply_delay_s: delay before any reply (streamed or not).
        reply_fn: scripted replies, see above; ``None`` for the default replies.
        send_usage: include ``usage`` in non-streamed replies (streams follow ``include_usage``).
        answer_headers: extra headers on every LLM answer (e.g. a router's served-by header).
        graphs: ``(app, body)`` of every app graph received.
    """

    requests: list[Recorded] = field(default_factory=list)
    ends: list[tuple[str, str, float]] = field(default_factory=list)
    end_status_code: int = 204
    end_delay_s: float = 0.0
    chunk_delay_s: float = 0.0
    reply_delay_s: float = 0.0
    reply_fn: Any = None
    send_usage: bool = True
    answer_headers: dict[str, str] = field(default_factory=dict)
    graphs: list[tuple[str, Any]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _counter: int = 0

    def __post_init__(self) -> None:
        self.app = FastAPI()
        self.app.post("/v1/chat/completions")(self._chat)
        self.app.post("/pbkv/v1/workflows/{workflow_id}/end")(self._end)
        self.app.put("/pbkv/v1/apps/{app_name}/graph")(self._graph)

    def hints_of(self, request: Recorded) -> tuple[str | None, str | None, int | None, str | None]:
        """``(workflow_id, agent (percent-decoded), step, app)`` headers of a recorded request."""
        from pbkv_contract.hints import decode_name

        h = request.headers
        agent = h.get("x-pbkv-agent")
        app = h.get("x-pbkv-app")
        step = h.get("x-pbkv-step")
        return (
            h.get("x-pbkv-workflow-id"),
            decode_name(agent) if agent else None,
            int(step) if step is not None else None,
            decode_name(app) if app else None,
        )

    async def _chat(self, request: Request) -> Response:
        body = await request.json()
        with self._lock:
            self.requests.append(Recorded(request.url.path, {k.lower(): v for k, v in request.headers.items()}, body, time.time()))
            self._counter += 1
            n = self._counter
        if self.reply_delay_s:
            await asyncio.sleep(self.reply_delay_s)
        messages = body.get("messages") or []
        scripted = self.reply_fn(body, n) if self.reply_fn is not None else _reply(messages, n)
        message = {"role": "assistant", "content": scripted} if isinstance(scripted, str) else {"role": "assistant", **scripted}
        reply = message.get("content") or ""
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        prompt_tokens = sum(len(_text(m).split()) for m in messages)
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": len(reply.split()),
            "total_tokens": prompt_tokens + len(reply.split()),
            "prompt_tokens_details": {"cached_tokens": prompt_tokens // 2},
        }
        model = body.get("model", "fake")
        if not body.get("stream"):
            data = {
                "id": f"chatcmpl-{n}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            }
            if self.send_usage:
                data["usage"] = usage
            return JSONResponse(data, headers=self.answer_headers)
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return StreamingResponse(self._stream(n, model, message, finish, usage if include_usage else None),
                                 media_type="text/event-stream", headers=self.answer_headers)

    async def _stream(self, n: int, model: str, message: dict[str, Any], finish: str, usage: dict[str, Any] | None):
        def event(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
            chunk = {
                "id": f"chatcmpl-{n}",
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}] if delta is not None else [],
                **extra,
            }
            return f"data: {json.dumps(chunk)}\n\n"

        yield event({"role": "assistant", "content": ""})
        words = (message.get("content") or "").split(" ")
        for i, word in enumerate(words):
            if self.chunk_delay_s:
                await asyncio.sleep(self.chunk_delay_s)
            yield event({"content": word if i == 0 else " " + word})
        for i, call in enumerate(message.get("tool_calls") or []):
            yield event({"tool_calls": [{"index": i, **call}]})
        yield event({}, finish)
        if usage is not None:
            yield event(None, usage=usage)
        yield "data: [DONE]\n\n"

    async def _end(self, workflow_id: str, request: Request) -> Response:
        body = await request.json()
        with self._lock:
            self.ends.append((workflow_id, body.get("status"), time.time()))
        if self.end_delay_s:
            await asyncio.sleep(self.end_delay_s)
        return Response(status_code=self.end_status_code)

    async def _graph(self, app_name: str, request: Request) -> Response:
        body = await request.json()
        with self._lock:
            self.graphs.append((app_name, body))
        return Response(status_code=204)


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def _reply(messages: list[dict[str, Any]], n: int) -> str:
    for message in reversed(messages):
        match = _ROLE_LIST_RE.search(_text(message))
        if match:
            roles = [r.strip().strip("'\"") for r in match.group(1).split(",") if r.strip()]
            if roles:
                return roles[0]
    return f"Thought: done\nFinal Answer: reply {n}"


def tool_call(name: str, arguments: dict[str, Any], call_id: str) -> dict[str, Any]:
    """One OpenAI ``tool_calls`` entry: call function ``name`` with JSON ``arguments``."""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
