"""Workflow end over SGLang's HTTP server, forwarded to the scheduler processes.

``POST /pbkv/v1/workflows/{workflow_id}/end`` (hint protocol v1, ``docs/architecture.md``) is added to
SGLang's FastAPI ``app`` in the HTTP process. It sends a :class:`PBKVEndWorkflowReq` through the
tokenizer manager's scheduler socket (the channel SGLang's own control requests use); each
scheduler's request dispatcher, extended by :func:`extend_scheduler_dispatcher`, hands it to its
PBKV cache. The route answers 204 at once (idempotent; unknown ids are fine).

The same function adds ``GET /pbkv/v1/kv_hints`` and ``X-PBKV-KV-Hints`` on every answer: the
KV-hint envelope actions the plugin reads (:mod:`pbkv_contract.kv_hint_caps`; SDKs send envelope
actions only to a server that advertises them).

Also here: :func:`headers_to_custom_params`, which copies ``X-PBKV-*`` headers of an OpenAI request
into ``custom_params.pbkv`` (SGLang drops most headers before the scheduler), and
:func:`end_session_workflow`, which makes SGLang's own ``/close_session`` a workflow end.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import Request
from sglang.srt.managers.io_struct import BaseReq

from pbkv_contract.hints import BODY_KEY, END_PATH, END_STATUSES, HintError, parse_hints, validate_workflow_id
from pbkv_contract.kv_hint_caps import KV_HINTS_PATH, document
from pbkv_server.backends.kv_hint_http import AdvertiseKvHints

log = logging.getLogger(__name__)

__all__ = ["PBKVEndWorkflowReq", "install_http_routes", "dispatch_to_scheduler", "extend_scheduler_dispatcher",
           "handle_end_workflow", "end_session_workflow", "headers_to_custom_params", "END_ROUTE",
           "KV_HINT_EFFECTS"]

#: FastAPI path of the end route.
END_ROUTE = END_PATH


class PBKVEndWorkflowReq(BaseReq, kw_only=True):
    """IPC message HTTP process -> scheduler: workflow ``workflow_id`` ended with ``status``."""

    workflow_id: str
    status: str = "completed"


#: What each envelope action does in the SGLang plugin (:mod:`.workflows`), for ``GET /pbkv/v1/kv_hints``.
KV_HINT_EFFECTS = {
    "retain": "payload.priority becomes the request's priority when it set none; another active "
              "workflow's idle clock restarts",
    "demote": "the workflow is retired (its own: once the request finished)",
    "evict": "the workflow is retired (its own: once the request finished)",
    "fetch": "another active workflow's idle clock restarts; SGLang loads a request's host-tier hits "
             "at admission, and the plugin's prefetch rounds run by value",
}


def install_http_routes(app: Any) -> bool:
    """Add the end route, ``GET /pbkv/v1/kv_hints`` and the ``X-PBKV-KV-Hints`` answer header to
    SGLang's FastAPI ``app`` (idempotent; before the app serves, as the plugin registers in the
    launcher before SGLang parses its arguments). Returns True if added now."""
    if any(getattr(r, "path", None) == END_ROUTE for r in app.routes):
        return False
    app.add_api_route(END_ROUTE, _end_workflow_endpoint, methods=["POST"], status_code=204,
                      name="pbkv_end_workflow")
    app.add_api_route(KV_HINTS_PATH, _kv_hints_endpoint, methods=["GET"], name="pbkv_kv_hints")
    try:
        app.add_middleware(AdvertiseKvHints)
    except RuntimeError:  # the app already serves (Starlette builds its stack once): GET route only
        log.warning("PBKV: X-PBKV-KV-Hints not added (SGLang's app already started); GET %s still answers",
                    KV_HINTS_PATH)
    return True


async def _kv_hints_endpoint():
    """The envelope actions the plugin reads, and what each does here."""
    from fastapi.responses import JSONResponse

    return JSONResponse(document(effects=KV_HINT_EFFECTS))


async def _end_workflow_endpoint(workflow_id: str, request: Request):
    """Validate, forward to the schedulers, answer 204 (400 with a reason on bad input)."""
    from fastapi.responses import JSONResponse, Response
    from sglang.srt.entrypoints import http_server

    try:
        validate_workflow_id(workflow_id)
        status = "completed"
        raw = await request.body()
        if raw.strip():
            body = json.loads(raw)
            if not isinstance(body, dict):
                raise HintError("body must be a JSON object")
            status = body.get("status", "completed")
            if status not in END_STATUSES:
                raise HintError(f"status must be one of {list(END_STATUSES)}")
    except (HintError, ValueError) as exc:
        return JSONResponse({"error": str(exc)}, status_code=400)
    state = http_server.get_global_state()
    if state is None:
        return JSONResponse({"error": "server not ready"}, status_code=503)
    await dispatch_to_scheduler(state.tokenizer_manager, PBKVEndWorkflowReq(workflow_id=workflow_id, status=status))
    return Response(status_code=204)


async def dispatch_to_scheduler(tokenizer_manager: Any, message: PBKVEndWorkflowReq) -> None:
    """Send ``message`` on the tokenizer manager's scheduler socket (fire and forget)."""
    send = getattr(tokenizer_manager, "_async_dispatch_to_scheduler", None)
    if send is not None:
        await send(message)
        return
    from sglang.srt.managers.io_struct import async_sock_send

    await async_sock_send(tokenizer_manager.send_to_scheduler, message)


def handle_end_workflow(scheduler: Any, message: PBKVEndWorkflowReq) -> None:
    """Scheduler side: retire the workflow in this process's PBKV cache (no reply is sent)."""
    from .cache import PBKVRadixCache

    cache = getattr(scheduler, "tree_cache", None)
    if not isinstance(cache, PBKVRadixCache):
        log.debug("PBKV end for %s ignored: tree cache is %s", message.workflow_id, type(cache).__name__)
        return None
    try:
        cache.end_workflow(message.workflow_id, message.status)
    except ValueError:
        log.warning("PBKV end for %s with bad status %r ignored", message.workflow_id, message.status)
    if getattr(cache, "enable_session_radix_cache", False):
        # a client sending both forms names its SGLang session after its workflow: close it too
        cache.release_radix_session(message.workflow_id)
    return None


def end_session_workflow(result: Any, scheduler: Any, recv_req: Any = None, *args: Any, **kwargs: Any) -> None:
    """AFTER hook of ``Scheduler.close_session``: SGLang's ``/close_session`` also ends the PBKV
    workflow of the same id (a request that named only a session belongs to it), then closes the
    session in the book (the policy's ``on_session_close``, and the session's hold on its ended
    turns goes), as the embedded engine's ``close_session``. Never raises."""
    from .cache import PBKVRadixCache

    try:
        recv_req = recv_req if recv_req is not None else kwargs.get("recv_req")
        sid = getattr(recv_req, "session_id", None)
        cache = getattr(scheduler, "tree_cache", None)
        if isinstance(sid, str) and isinstance(cache, PBKVRadixCache):
            cache.end_workflow(sid, "completed")
            cache.book.close_session(sid)
    except Exception:
        log.debug("PBKV: session close not applied to the workflow book", exc_info=True)
    return None


def extend_scheduler_dispatcher(result: Any, scheduler: Any, *args: Any, **kwargs: Any) -> None:
    """AFTER hook of ``Scheduler.init_request_dispatcher``: route :class:`PBKVEndWorkflowReq`."""
    from sglang.utils import TypeBasedDispatcher

    scheduler._request_dispatcher += TypeBasedDispatcher(
        [(PBKVEndWorkflowReq, lambda message: handle_end_workflow(scheduler, message))])
    return None


def headers_to_custom_params(result: Any, serving: Any, request: Any, raw_request: Any = None, *a, **kw):
    """AFTER hook of ``OpenAIServing*._convert_to_internal_request``: ``X-PBKV-*`` headers ->
    ``sampling_params.custom_params.pbkv`` when the body carries no hints. Never raises."""
    try:
        raw_request = raw_request if raw_request is not None else kw.get("raw_request")
        if raw_request is None:
            return None
        adapted = result[0] if isinstance(result, tuple) else result
        params = getattr(adapted, "sampling_params", None)
        if not isinstance(params, dict):
            return None
        custom = params.get("custom_params") or {}
        if isinstance(custom, dict) and BODY_KEY in custom:
            return None
        hints, reason = parse_hints(dict(raw_request.headers), None)
        if hints is None:
            if reason is not None:
                log.debug("PBKV: malformed hint headers ignored (%s)", reason)
            return None
        params["custom_params"] = {**(custom if isinstance(custom, dict) else {}), BODY_KEY: hints.to_body()}
    except Exception:
        log.debug("PBKV: header hints not copied", exc_info=True)
    return None
