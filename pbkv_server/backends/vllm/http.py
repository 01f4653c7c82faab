"""PBKV on vLLM's OpenAI server: an ASGI middleware (``vllm serve --middleware``).

vLLM's API server passes neither ``X-PBKV-*`` headers nor the ``custom_params`` body field to its
engine core; its ``vllm_xargs`` body field reaches the scheduler's ``Request`` as
``sampling_params.extra_args`` (strings and numbers only). :class:`PBKVMiddleware`

- parses each JSON POST's hints with :func:`pbkv_contract.hints.parse_hints` (headers win over
  ``custom_params.pbkv``) and writes them into ``vllm_xargs`` as ``pbkv_workflow_id``,
  ``pbkv_agent``, ``pbkv_step``, ``pbkv_app`` (:data:`~.workflows.FLAT_KEYS`); a malformed hint is
  forwarded as ``pbkv_malformed`` (the reason), so the engine core counts it and serves the
  request anonymously; a body that is not JSON is passed on untouched; the body's KV-hint
  envelope (``kv_hints``, or Dynamo's ``kv_hint`` at the top or in ``kv_transfer_params``; vLLM
  0.33.0's HTTP server reads none of them) travels JSON-encoded as ``vllm_xargs.pbkv_kv_hints``;
- answers ``POST /pbkv/v1/workflows/{workflow_id}/end`` (hint protocol v1: optional JSON body
  ``{"status": ...}``; 204, 400 with a reason, 503 without a control socket) by sending the end to
  the engine core (:func:`~.control.send_end`, socket ``PBKV_VLLM_CONTROL``);
- advertises the envelope actions the backend reads (:mod:`pbkv_contract.kv_hint_caps`):
  ``X-PBKV-KV-Hints`` on every answer, and ``GET /pbkv/v1/kv_hints`` answered with
  :data:`KV_HINT_EFFECTS`, so that the SDK sends envelope actions to this server only.

Imports no vLLM.
"""

from __future__ import annotations

import json
import logging
import os
import re
from typing import Any, Awaitable, Callable

from pbkv_contract.hints import (BODY_KEY, END_STATUSES, KV_HINT_KEY_DYNAMO, KV_HINTS_KEY, HintError, find_kv_hints,
                                 parse_hints, validate_workflow_id)

from pbkv_contract.kv_hint_caps import KV_HINTS_PATH, document
from pbkv_server.backends.kv_hint_http import advertising

from .control import send_end
from .settings import ENV_CONTROL
from .workflows import FLAT_KEYS, KV_HINTS_XARG, MALFORMED_KEY

log = logging.getLogger(__name__)

__all__ = ["PBKVMiddleware", "hinted_body", "KV_HINT_EFFECTS"]

_END_RE = re.compile(r"^/pbkv/v1/workflows/([^/]+)/end$")
#: Largest body the middleware rewrites (bigger ones pass untouched), bytes.
MAX_REWRITE_BYTES = 64 << 20
#: What each envelope action does in the vLLM backend (:mod:`.workflows`), for ``GET /pbkv/v1/kv_hints``.
KV_HINT_EFFECTS = {
    "retain": "another active workflow's idle clock restarts (its cache keeps its lookahead rank); "
              "the request's own workflow is active anyway",
    "demote": "the workflow is retired, its blocks go first (its own: at request_finished)",
    "evict": "the workflow is retired, its blocks go first (its own: at request_finished)",
    "fetch": "as retain: vLLM's offload API loads host KV only for a request being scheduled, which "
             "the workflow's next request then does",
}


def hinted_body(headers: dict[str, str], body: Any) -> Any:
    """``body`` with the request's hints in ``vllm_xargs`` (a new dict), or ``body`` itself when
    it carries no hints or is not a JSON object. Never raises."""
    if not isinstance(body, dict):
        return body
    hints, reason = parse_hints(headers, body)
    # any of the three shapes (vLLM/SGLang ``kv_hints``, Dynamo's ``kv_hint`` at the top or in
    # ``kv_transfer_params``) travels on in one xarg; the engine's book reads it as ``kv_hints``
    _, envelope = find_kv_hints(body)
    if hints is None and reason is None and envelope is None:
        return body
    xargs = body.get("vllm_xargs")
    xargs = dict(xargs) if isinstance(xargs, dict) else {}
    for key in (*FLAT_KEYS.values(), MALFORMED_KEY, KV_HINTS_XARG):
        xargs.pop(key, None)
    if hints is not None:
        for field, value in hints.to_body().items():
            xargs[FLAT_KEYS[field]] = value
    elif reason is not None:
        xargs[MALFORMED_KEY] = reason[:200]
    if envelope is not None:
        xargs[KV_HINTS_XARG] = json.dumps(envelope)
    # the top-level envelope fields are ours to consume (vLLM 0.33.0's server reads neither);
    # ``kv_transfer_params`` is vLLM's own (connectors read it) and stays as it came
    out = {k: v for k, v in body.items() if k not in ("custom_params", KV_HINTS_KEY, KV_HINT_KEY_DYNAMO)}
    custom = body.get("custom_params")
    if isinstance(custom, dict) and set(custom) - {BODY_KEY}:  # keep what else the client sent
        out["custom_params"] = {k: v for k, v in custom.items() if k != BODY_KEY}
    out["vllm_xargs"] = xargs
    return out


class PBKVMiddleware:
    """Pure ASGI middleware (module docstring). ``app``: the wrapped ASGI app."""

    def __init__(self, app: Callable[..., Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        send = advertising(send)
        if scope.get("method") == "GET" and scope.get("path") == KV_HINTS_PATH:
            await _answer(send, 200, document(effects=KV_HINT_EFFECTS))
            return
        if scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        match = _END_RE.match(scope.get("path", ""))
        body = await _read_body(receive)
        if match is not None:
            await _end_route(match.group(1), body, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", [])}
        new_body = body
        if len(body) <= MAX_REWRITE_BYTES and "json" in headers.get("content-type", "json"):
            try:
                decoded = json.loads(body) if body else None
                hinted = hinted_body(headers, decoded)
                if hinted is not decoded:
                    new_body = json.dumps(hinted).encode()
            except (ValueError, UnicodeDecodeError):
                pass  # not JSON: vLLM answers it
        if new_body is not body:
            scope = dict(scope)
            scope["headers"] = [(k, v) for k, v in scope.get("headers", []) if k.lower() != b"content-length"]
            scope["headers"].append((b"content-length", str(len(new_body)).encode()))
        await self.app(scope, _replay(new_body, receive), send)


async def _read_body(receive: Callable) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replay(body: bytes, receive: Callable) -> Callable:
    sent = False

    async def replay() -> dict:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # http.disconnect etc.

    return replay


async def _end_route(workflow_id: str, body: bytes, send: Callable) -> None:
    try:
        validate_workflow_id(workflow_id)
        status = "completed"
        if body.strip():
            decoded = json.loads(body)
            if not isinstance(decoded, dict):
                raise HintError("body must be a JSON object")
            status = decoded.get("status", "completed")
            if status not in END_STATUSES:
                raise HintError(f"status must be one of {list(END_STATUSES)}")
    except (HintError, ValueError) as exc:
        await _answer(send, 400, {"error": str(exc)})
        return
    path = os.environ.get(ENV_CONTROL, "").strip()
    if not path:
        await _answer(send, 503, {"error": f"{ENV_CONTROL} is not set: start vLLM with pbkv-server --engine vllm"})
        return
    if not send_end(path, workflow_id, status):
        await _answer(send, 503, {"error": "the engine core is not listening for workflow ends"})
        return
    await _answer(send, 204, None)


async def _answer(send: Callable, status: int, payload: Any) -> None:
    body = b"" if payload is None else json.dumps(payload).encode()
    headers = [(b"content-length", str(len(body)).encode())]
    if payload is not None:
        headers.append((b"content-type", b"application/json"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
