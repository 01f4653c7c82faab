"""Process-wide stamping: while any integration is instrumented, httpx's default transports stamp.

This is what makes ``instrument(...)`` the only line a user adds: the OpenAI SDK (and so
LangChain's ``ChatOpenAI``, AutoGen's ``OpenAIChatCompletionClient``, CrewAI's and the OpenAI
Agents SDK's OpenAI providers) sends through an ``httpx.Client`` / ``httpx.AsyncClient`` whose
innermost transport is ``httpx.HTTPTransport`` / ``httpx.AsyncHTTPTransport``. Their public
transport methods (``handle_request`` / ``handle_async_request``) are wrapped at class level,
the way OpenTelemetry's httpx instrumentation does it, so clients created before or after
instrumenting, by the user or by a framework, are all covered without passing ``http_client=``.

The wrapper costs one context-variable read per request outside workflows; inside a workflow
it is :func:`pbkv_sdk.stamping.prepare_request` / :func:`~pbkv_sdk.stamping.observe_response`,
which skip a request another PBKV layer already stamped (an explicit ``pbkv_sdk.http_client()``
or CrewAI interceptor), so a step is never reserved twice.

Resolvers: tracing-based integrations (OpenTelemetry, the OpenAI Agents SDK) do not set the
SDK's context variables; they register a resolver (:func:`add_resolver`) that finds the workflow
and agent of the current span when a request is sent outside any PBKV workflow context.

Holders: each integration :func:`acquire` s the patch under its own name and :func:`release` s it
on ``uninstrument``; the original methods come back when the last holder leaves. If some other
library wrapped the methods after us, ours stay in place (removing them would drop its wrapper)
but switch themselves off.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable

import httpx

from pbkv_sdk.context import Workflow, current_workflow, reset_agent, reset_workflow, set_agent, set_workflow
from pbkv_sdk.stamping import observe_response, prepare_request

log = logging.getLogger(__name__)

__all__ = ["acquire", "release", "holders", "active", "add_resolver", "remove_resolver", "Resolver"]

#: Finds ``(workflow, agent)`` for a request sent outside any PBKV workflow context, or ``None``.
Resolver = Callable[[], "tuple[Workflow, str | None] | None"]


def acquire(holder: str) -> None:
    """Turn process-wide stamping on for ``holder`` (an integration name); idempotent per holder."""
    with _LOCK:
        _HOLDERS.add(holder)
        if not _PATCHED:
            _patch()


def release(holder: str) -> None:
    """Drop ``holder``; when none is left, httpx's transports get their own methods back."""
    with _LOCK:
        _HOLDERS.discard(holder)
        if not _HOLDERS and _PATCHED:
            _unpatch()


def add_resolver(resolver: Resolver) -> None:
    """Register ``resolver`` (consulted in order, for requests made outside a PBKV workflow context)."""
    with _LOCK:
        if resolver not in _RESOLVERS:
            _RESOLVERS.append(resolver)


def remove_resolver(resolver: Resolver) -> None:
    """Unregister ``resolver`` (no-op if absent)."""
    with _LOCK:
        if resolver in _RESOLVERS:
            _RESOLVERS.remove(resolver)


def holders() -> frozenset[str]:
    """The integrations currently holding the patch."""
    return frozenset(_HOLDERS)


def active() -> bool:
    """Whether httpx's default transports stamp requests now."""
    return bool(_HOLDERS) and bool(_PATCHED)


# --------------------------------------------------------------------------- internals

_LOCK = threading.Lock()
_HOLDERS: set[str] = set()
_RESOLVERS: list[Resolver] = []
# class -> (attribute name, original function, our wrapper); empty when not patched
_PATCHED: dict[type, tuple[str, Callable[..., Any], Callable[..., Any]]] = {}


def _patch() -> None:
    sync_original = httpx.HTTPTransport.handle_request
    async_original = httpx.AsyncHTTPTransport.handle_async_request

    def handle_request(self: httpx.HTTPTransport, request: httpx.Request) -> httpx.Response:
        if not _HOLDERS or (current_workflow() is None and not _RESOLVERS):  # the fast path of other traffic
            return sync_original(self, request)
        request, pending = _prepare(request)
        return observe_response(sync_original(self, request), pending, is_async=False)

    async def handle_async_request(self: httpx.AsyncHTTPTransport, request: httpx.Request) -> httpx.Response:
        if not _HOLDERS or (current_workflow() is None and not _RESOLVERS):
            return await async_original(self, request)
        request, pending = _prepare(request)
        return observe_response(await async_original(self, request), pending, is_async=True)

    for cls, name, original, wrapper in (
        (httpx.HTTPTransport, "handle_request", sync_original, handle_request),
        (httpx.AsyncHTTPTransport, "handle_async_request", async_original, handle_async_request),
    ):
        wrapper.__wrapped__ = original  # type: ignore[attr-defined]
        wrapper.__doc__ = original.__doc__
        setattr(cls, name, wrapper)
        _PATCHED[cls] = (name, original, wrapper)


def _prepare(request: httpx.Request) -> tuple[httpx.Request, Any]:
    """:func:`prepare_request`, inside the workflow a resolver finds when no PBKV context is set."""
    if current_workflow() is not None:
        return prepare_request(request, body_hints=None)
    found = None
    for resolver in list(_RESOLVERS):
        try:
            found = resolver()
        except Exception:  # fail open: a broken resolver must not break the request
            log.debug("PBKV: resolver %r failed", resolver, exc_info=True)
        if found is not None:
            break
    if found is None:
        return request, None
    tokens = (set_workflow(found[0]), set_agent(found[1]))
    try:
        return prepare_request(request, body_hints=None)
    finally:
        reset_agent(tokens[1])
        reset_workflow(tokens[0])


def _unpatch() -> None:
    for cls, (name, original, wrapper) in list(_PATCHED.items()):
        if cls.__dict__.get(name) is wrapper:
            setattr(cls, name, original)
            del _PATCHED[cls]
        elif name not in _KEPT_WARNED:
            # Another library wrapped ours: removing ours would remove its wrapper too. Ours
            # stays, inert (it checks _HOLDERS first), and is reused by the next acquire.
            _KEPT_WARNED.add(name)
            log.info("PBKV: httpx %s was wrapped again by another library; the PBKV wrapper stays, switched off", name)


_KEPT_WARNED: set[str] = set()
