"""Request stamping: httpx transports that add the hint protocol v1 fields to every LLM request.

Framework integrations need none of this by hand: while one is instrumented, httpx's default
transports stamp (:mod:`pbkv_sdk.autopatch`). Elsewhere, hand :func:`http_client` /
:func:`async_http_client` to an OpenAI client, or wrap an existing client with :func:`wrap_client`.

For each request to an LLM endpoint (path ending in ``/chat/completions``, ``/completions`` or
``/generate``) made inside a workflow (see :mod:`pbkv_sdk.context`), the transport

1. reserves the workflow's next step and adds the four ``X-PBKV-*`` headers (a fifth,
   ``X-PBKV-Internal: 1``, on framework-internal calls such as speaker selection) (and, with
   ``body_hints``, ``custom_params.pbkv`` in the JSON body, the route SGLang keeps, and SGLang's
   own top-level ``session_id`` = the workflow id unless the app set one), plus the workflow id
   in the router's affinity header (``X-SMG-Routing-Key``, :mod:`pbkv_sdk.routing`); with the
   workflow's ``kv_hints`` on, the engines' KV-hint envelope (:mod:`pbkv_sdk.kv_hints`);
2. reads the answer's headers (the server's verdict on the hints, the worker a router names,
   hints a router dropped) and, when the workflow records a trace, watches the response stream
   (first token time, bytes) and hands the finished call to the recorder thread.

Agent and app names are checked with the hint protocol's own rule
(:func:`pbkv_contract.hints.name_problem`, the one pbkv-server applies) before they are sent. A
name that encodes to more than 128 characters is sent cut to fit (one warning: two such names may
collide). A name the server would ignore (a control character, not a string) is not sent: the
request goes out without hints, is not recorded in the trace, and one warning names it, says why
and what the server would have done.

Requests outside a workflow, and non-LLM requests, pass through untouched. Stamping fails open:
any error in it logs one warning and the request goes out unstamped.
"""

from __future__ import annotations

import contextvars
import functools
import json
import logging
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator, Iterator

import httpx

from pbkv_sdk.context import ENV_BODY_HINTS, Workflow, current_agent, current_internal, current_workflow
from pbkv_sdk.env import env_flag
from pbkv_contract.hints import BODY_KEY, MAX_FIELD_CHARS, Hints, fit_name, name_problem
from pbkv_sdk.recorder import FIRST_TOKEN_RE, CallCapture, TraceRecorder
from pbkv_sdk.routing import note_hint_verdict, note_response
from pbkv_sdk.once import WarnOnce

log = logging.getLogger(__name__)

#: Request paths treated as LLM calls (OpenAI chat/completions, SGLang native).
LLM_PATH_SUFFIXES = ("/chat/completions", "/completions", "/generate")
#: Header of the OpenAI SDKs counting retries of one request ("0" on the first attempt).
RETRY_COUNT_HEADER = "x-stainless-retry-count"
#: Agent name sent when a workflow is active but no agent was set.
DEFAULT_AGENT = "unknown"
#: App name sent when the workflow has none.
DEFAULT_APP = "default"
# request.extensions key of a request this SDK stamped
_STAMPED = "pbkv_stamped"


def http_client(*, body_hints: bool | None = None, inner: httpx.BaseTransport | None = None, **client_kwargs: Any) -> httpx.Client:
    """A sync ``httpx.Client`` whose LLM requests are stamped; pass it as ``http_client=`` to OpenAI clients.

    Args:
        body_hints: also put the hints in ``custom_params.pbkv`` (default ``$PBKV_BODY_HINTS == "1"``).
            Only for servers that accept ``custom_params`` (SGLang, pbkv-server), not api.openai.com.
        inner: the transport that really sends (default ``httpx.HTTPTransport()``).
        **client_kwargs: passed to ``httpx.Client`` (timeout, limits, ...); default timeout 600 s.
    """
    client_kwargs.setdefault("timeout", httpx.Timeout(600.0, connect=10.0))
    return httpx.Client(transport=PBKVTransport(inner, body_hints=body_hints), **client_kwargs)


def async_http_client(
    *, body_hints: bool | None = None, inner: httpx.AsyncBaseTransport | None = None, **client_kwargs: Any
) -> httpx.AsyncClient:
    """Async twin of :func:`http_client`; pass it as ``http_async_client=`` / ``http_client=`` to async OpenAI clients."""
    client_kwargs.setdefault("timeout", httpx.Timeout(600.0, connect=10.0))
    return httpx.AsyncClient(transport=AsyncPBKVTransport(inner, body_hints=body_hints), **client_kwargs)


def wrap_client(client: httpx.Client | httpx.AsyncClient, *, body_hints: bool | None = None) -> bool:
    """Make an existing httpx client stamp its LLM requests (wraps its transport in place).

    Used for framework clients the user did not build (AutoGen's model client). Idempotent.

    Returns:
        ``True`` if the client was wrapped now, ``False`` if it already stamped.

    Raises:
        TypeError: ``client`` is not an httpx client, or is one without the ``_transport``
            attribute this relies on (an httpx release that renamed it).
    """
    if isinstance(client, httpx.AsyncClient):
        cls: type = AsyncPBKVTransport
    elif isinstance(client, httpx.Client):
        cls = PBKVTransport
    else:
        raise TypeError(f"expected an httpx client, got {type(client).__name__}")
    # httpx has no public setter for the transport; _transport is stable across 0.2x releases.
    if not hasattr(client, "_transport"):
        raise TypeError(f"this httpx {httpx.__version__} client has no _transport to wrap")
    if isinstance(client._transport, cls):
        return False
    client._transport = cls(client._transport, body_hints=body_hints)
    return True


class PBKVTransport(httpx.BaseTransport):
    """Sync transport that stamps LLM requests, then delegates to ``inner``.

    Args:
        inner: the sending transport (default ``httpx.HTTPTransport()``).
        body_hints: see :func:`http_client`.
    """

    def __init__(self, inner: httpx.BaseTransport | None = None, *, body_hints: bool | None = None):
        self.inner = inner if inner is not None else httpx.HTTPTransport()
        self.body_hints = _body_hints_default(body_hints)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Stamp ``request`` (if an LLM request inside a workflow), send it, watch the response for the trace.

        Raises only what ``inner`` raises (network errors); stamping itself never raises.
        """
        request, pending = prepare_request(request, body_hints=self.body_hints)
        response = self.inner.handle_request(request)
        return observe_response(response, pending, is_async=False)

    def close(self) -> None:
        """Close the inner transport."""
        self.inner.close()


class AsyncPBKVTransport(httpx.AsyncBaseTransport):
    """Async twin of :class:`PBKVTransport` (default inner ``httpx.AsyncHTTPTransport()``)."""

    def __init__(self, inner: httpx.AsyncBaseTransport | None = None, *, body_hints: bool | None = None):
        self.inner = inner if inner is not None else httpx.AsyncHTTPTransport()
        self.body_hints = _body_hints_default(body_hints)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Async twin of :meth:`PBKVTransport.handle_request`."""
        request, pending = prepare_request(request, body_hints=self.body_hints)
        response = await self.inner.handle_async_request(request)
        return observe_response(response, pending, is_async=True)

    async def aclose(self) -> None:
        """Close the inner transport."""
        await self.inner.aclose()


@dataclass(slots=True)
class PendingCall:
    """A stamped request waiting for its response (``recorder`` only when the workflow records)."""

    hints: Hints
    recorder: TraceRecorder | None
    t_start: float
    request_body: bytes
    internal: bool = False
    workflow: Workflow | None = None
    body_hints: bool = False
    #: origin whose KV-hint advertisement this answer teaches (set while it is not learned).
    kv_origin: str | None = None


def prepare_request(request: httpx.Request, *, body_hints: bool | None = False) -> tuple[httpx.Request, PendingCall | None]:
    """Stamp ``request`` if it is an LLM request inside a workflow (the transports' first half).

    Also usable from other interception points (CrewAI's interceptor, the process-wide patch of
    :mod:`pbkv_sdk.autopatch`). A request an outer PBKV layer already stamped (marked in
    ``request.extensions``) passes through, so nested layers never reserve a step twice.
    ``body_hints=None`` takes the workflow's choice (``$PBKV_BODY_HINTS`` unless set). Never
    raises: on any error the original request is returned unstamped and one warning is logged.

    Returns:
        ``(request to send, pending call or None)``; pass the pending call to :func:`observe_response`.
    """
    wf = current_workflow()
    if wf is None or not request.url.path.endswith(LLM_PATH_SUFFIXES) or _STAMPED in request.extensions:
        return request, None
    if body_hints is None:
        body_hints = wf.body_hints
    try:
        return _stamp(request, wf, body_hints)
    except Exception as exc:  # fail open: an unstamped request is served normally
        _warn_once("stamp", "PBKV: request sent without hints (%s: %s)", type(exc).__name__, exc)
        return request, None


def observe_response(response: httpx.Response, pending: PendingCall | None, *, is_async: bool | None = None) -> httpx.Response:
    """Attach trace recording to ``response``'s byte stream (the transports' second half).

    ``is_async`` says which client reads the stream; ``None`` infers it from the stream type
    (a stream that is both, like an in-memory body, counts as sync).
    """
    if pending is None:
        return response
    wf = pending.workflow
    if pending.kv_origin is not None:  # until an origin's first answer: what it advertises
        try:
            from pbkv_sdk.kv_hints import HEADER_KV_HINTS, learn

            learn(pending.kv_origin, response.headers.get(HEADER_KV_HINTS), response.status_code)
        except Exception as exc:  # fail open: the envelope just stays off for this origin
            _warn_once("kv_hints:learn", "PBKV: KV-hint advertisement not read (%s: %s)", type(exc).__name__, exc)
    try:
        if wf is not None and wf.read_answers:
            note_response(wf, response.headers, pending.body_hints, pending.hints)
        else:  # every answer: the server's verdict on the hints (one header read)
            note_hint_verdict(response.headers, pending.body_hints, pending.hints)
    except Exception as exc:  # fail open: routing bookkeeping must never break a response
        _warn_once("route", "PBKV: answer headers not read (%s: %s)", type(exc).__name__, exc)
    if pending.recorder is None:
        return response
    try:
        sse = "text/event-stream" in response.headers.get("content-type", "")
        encoding = response.headers.get("content-encoding", "")
        if is_async is None:
            is_async = not isinstance(response.stream, httpx.SyncByteStream)
        if is_async:
            response.stream = _AsyncRecordingStream(response.stream, _Observer(pending, response, encoding, sse))
        else:
            response.stream = _RecordingStream(response.stream, _Observer(pending, response, encoding, sse))
    except Exception as exc:  # fail open: the call is just not recorded
        _warn_once("observe", "PBKV: call not recorded (%s: %s)", type(exc).__name__, exc)
    return response


# --------------------------------------------------------------------------- helpers


def _stamp(request: httpx.Request, wf: Workflow, body_hints: bool) -> tuple[httpx.Request, PendingCall | None]:
    # _sendable checks and shortens names (cached); Hints.to_headers is the contract's one encoder.
    agent = _sendable("agent", current_agent() or DEFAULT_AGENT)
    app = _sendable("app", wf.app or DEFAULT_APP)
    if agent is None or app is None:  # the server would ignore the hints: send none (warned)
        wf.sent_without_hints()
        return request, None
    internal = current_internal()  # a framework-internal call tells the server too (X-PBKV-Internal)
    hints = Hints(wf.workflow_id, agent, _step_for(request, wf), app, internal)
    if wf.llm_origin is None:
        wf.llm_origin = f"{request.url.scheme}://{request.url.netloc.decode('ascii')}"
    headers = request.headers
    for name, value in hints.to_headers().items():
        headers[name] = value
    routing_key = wf.routing_header
    if routing_key is not None and routing_key not in headers:  # a key the app set itself wins
        headers[routing_key] = wf.workflow_id
    request.extensions[_STAMPED] = True  # inner PBKV layers (patched transports) leave it alone
    recorder = wf.recorder
    body = b""
    kv_origin = envelope = None
    if getattr(wf, "kv_hints", False):  # a Workflow pickled by an older SDK has none
        envelope, kv_origin = _envelope(wf, hints, request.url)
    if body_hints or recorder is not None or envelope is not None:
        body = request.read()
        if body_hints or envelope is not None:
            request = _with_body_hints(request, body, hints if body_hints else None, envelope)
            body = request.content
    return request, PendingCall(hints, recorder, time.time(), body, internal, wf, body_hints, kv_origin)


@functools.lru_cache(maxsize=4096)
def _sendable(field: str, name: object) -> str | None:
    """``name`` as the hints carry it: itself, cut to fit 128 encoded characters, or ``None``
    when the server would ignore hints with it (a warning per distinct name says so)."""
    problem = name_problem(name)
    if problem is None:
        return name  # type: ignore[return-value]  # name_problem accepts only strings
    try:
        fitted = fit_name(name)  # type: ignore[arg-type]
    except (ValueError, TypeError):  # HintError; a lone surrogate has no UTF-8 form
        fitted = None
    if fitted is not None and name_problem(fitted) is None:  # only too long: cut it
        _warn_once(f"cut:{field}:{name!r}", "PBKV: %s name %r %s; it is sent cut to %r (%d characters). Hint names "
                   "are limited to %d characters percent-encoded: names that share their first part collide, and "
                   "the server then sees them as one %s.", field, name, problem, fitted, len(fitted),
                   MAX_FIELD_CHARS, field)
        return fitted
    _warn_once(f"bad:{field}:{name!r}", "PBKV: %s name %r %s: pbkv-server would ignore hints carrying it and serve "
               "the requests anonymously, so requests under this %s name are sent without PBKV hints (and left out "
               "of the trace). Rename the %s to use hints.", field, name, problem, field, field)
    return None


def _step_for(request: httpx.Request, wf: Workflow) -> int:
    # The OpenAI SDKs resend a failed request from the same context with a retry counter > 0:
    # a retry is the same invocation, so it keeps the step of the attempt it repeats.
    last = _last_step_var.get()
    retry = request.headers.get(RETRY_COUNT_HEADER, "0")
    if retry != "0" and last is not None and last[0] is wf:
        return last[1]
    step = wf.next_step()
    _last_step_var.set((wf, step))
    return step


def _envelope(wf: Workflow, hints: Hints, url: httpx.URL) -> tuple[dict[str, Any] | None, str | None]:
    """``(envelope, origin to learn)`` of a request to ``url`` (:mod:`pbkv_sdk.kv_hints`): the
    envelope holds the actions the origin advertises, ``None`` when it advertises none of them or
    is not learned yet (then its origin is returned, for the answer to teach); ``(None, None)``
    (warned) if it cannot be built: the request goes out with its other hints (fail open)."""
    try:
        from pbkv_sdk.kv_hints import advertised, envelope_for

        origin = f"{url.scheme}://{url.netloc.decode('ascii')}"
        caps = advertised(origin)
        if caps is None:
            return None, origin
        final = getattr(wf, "final_next", False) and not getattr(wf, "final_sent", False)
        envelope, carried_end = envelope_for(wf.workflow_id, hints.step, origin, final, caps)
        if carried_end:
            wf.final_sent = True
        return envelope, None
    except Exception as exc:
        _warn_once("kv_hints", "PBKV: request sent without its kv_hints envelope (%s: %s)", type(exc).__name__, exc)
        return None, None


def _with_body_hints(request: httpx.Request, body: bytes, hints: Hints | None,
                     envelope: dict[str, Any] | None = None) -> httpx.Request:
    """``request`` with ``custom_params.pbkv`` (``hints``) and / or the ``kv_hints`` envelope in
    its JSON body. A body that is not a JSON object raises ``ValueError`` when hints go in it;
    an envelope alone is then left out (warned), the request sent as it was."""
    try:
        data = json.loads(body or b"{}")
    except ValueError:
        data = None
    if not isinstance(data, dict):
        if hints is None:
            _warn_once("kv_hints:body", "PBKV: kv_hints envelope not sent: the request body is not a JSON object")
            return request
        raise ValueError("request body is not a JSON object")
    if hints is not None:
        custom = data.get("custom_params")
        custom = dict(custom) if isinstance(custom, dict) else {}
        custom[BODY_KEY] = hints.to_body()
        data["custom_params"] = custom
        data.setdefault("session_id", hints.workflow_id)  # SGLang's form: the workflow is also a session
    if envelope is not None:
        from pbkv_sdk.kv_hints import add_to_body

        add_to_body(data, envelope, custom_params=hints is not None)
    content = json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    headers = [(k, v) for k, v in request.headers.multi_items() if k.lower() != "content-length"]
    return httpx.Request(request.method, request.url, headers=headers, content=content, extensions=request.extensions)


class _Observer:
    """Shared part of the recording streams: first-token time, body bytes, one submit at the end."""

    def __init__(self, pending: PendingCall, response: httpx.Response, encoding: str, sse: bool):
        self.pending, self.status, self.encoding, self.sse = pending, response.status_code, encoding, sse
        # Parsed later on the recorder thread: the server's token counts there are the trace's
        # fallback when the body has no usage (a stream without include_usage).
        self.headers = response.headers
        self.parts: list[bytes] = []
        self.t_first: float | None = None
        self.done = False

    def see(self, chunk: bytes) -> None:
        if self.t_first is None and chunk and (not self.sse or FIRST_TOKEN_RE.search(chunk)):
            self.t_first = time.time()
        self.parts.append(chunk)

    def close(self) -> None:
        """Response closed: record it if it was read to its end (clients stop at ``[DONE]``)."""
        if self.done or not self.parts:
            return
        if not self.sse or b"[DONE]" in b"".join(self.parts[-2:]):
            self.finish()

    def finish(self) -> None:
        if self.done:
            return
        self.done = True
        p = self.pending
        p.recorder.submit(
            CallCapture(
                app=p.hints.app or "default",
                workflow_id=p.hints.workflow_id,
                step=p.hints.step,
                agent=p.hints.agent,
                t_start=p.t_start,
                t_first=self.t_first,
                t_end=time.time(),
                request_body=p.request_body,
                response_body=b"".join(self.parts),
                content_encoding=self.encoding,
                status_code=self.status,
                response_headers=self.headers,
                internal=p.internal,
            )
        )


class _RecordingStream(httpx.SyncByteStream):
    def __init__(self, inner: httpx.SyncByteStream, observer: _Observer):
        self._inner = inner
        self._obs = observer

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._inner:
            self._obs.see(chunk)
            yield chunk
        self._obs.finish()

    def close(self) -> None:
        self._inner.close()
        self._obs.close()


class _AsyncRecordingStream(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream, observer: _Observer):
        self._inner = inner
        self._obs = observer

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            self._obs.see(chunk)
            yield chunk
        self._obs.finish()

    async def aclose(self) -> None:
        await self._inner.aclose()
        self._obs.close()


def _body_hints_default(value: bool | None) -> bool:
    return env_flag(ENV_BODY_HINTS) if value is None else value


#: One warning per kind of trouble; names made up per request are capped (beyond, debug level).
_WARNED = WarnOnce(log, suffix=" (further occurrences at debug level)")
_last_step_var: contextvars.ContextVar[tuple[Workflow, int] | None] = contextvars.ContextVar("pbkv_last_step", default=None)


_warn_once = _WARNED
