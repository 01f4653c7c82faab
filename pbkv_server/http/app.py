"""The FastAPI application of ``pbkv-server``: OpenAI-compatible routes, hint endpoints, metrics.

Routes (``docs/architecture.md``, "Hint protocol" and "Live server"):

* ``POST /v1/chat/completions``, ``POST /v1/completions``: stream (SSE) and non-stream, ``usage``
  with ``prompt_tokens_details.cached_tokens``; ``stream_options.include_usage`` honoured. Response
  headers ``X-PBKV-Prompt-Tokens``, ``X-PBKV-Cached-Tokens``, ``X-PBKV-Host-Cached-Tokens``,
  ``X-PBKV-TTFT-S`` (simulated, engine seconds) and ``X-PBKV-Hints`` (ok | anonymous | ignored).
* ``GET /v1/models``, ``GET /v1/models/{id}``, ``GET /health``, ``GET /metrics``.
* ``GET /pbkv/v1/kv_hints``: the KV-hint envelope actions the server reads; every answer also
  carries them in ``X-PBKV-KV-Hints`` (:mod:`pbkv_contract.kv_hint_caps`), so that clients send
  envelope actions only to a server that reads them.
* ``POST /pbkv/v1/workflows/{workflow_id}/end`` (204, idempotent, unknown ids fine),
  ``POST /close_session`` (SGLang's, ``{"session_id": ...}``, 200: closes the session's tags and
  ends the PBKV workflow of that id) and ``PUT /pbkv/v1/apps/{app}/graph`` (204): the only routes
  guarded by ``--hint-token``.
* ``GET /openapi.json``: the OpenAPI document of all of the above (:mod:`pbkv_server.http.openapi`).

Bodies are read by the routes themselves: size checked on ``Content-Length`` before reading, JSON
depth bounded, then validated as OpenAI does (:mod:`pbkv_server.http.validation`). Head limits
(header size and count) are enforced below the app, in :mod:`pbkv_server.http.protocol`.
"""

from __future__ import annotations

import time
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Callable

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from pbkv_server.engine import EngineConfig
from pbkv_server.http.config import ServerConfig
from pbkv_server.http.driver import EngineFailure
from pbkv_server.http.errors import ApiError, install_error_handlers, read_json_body
from pbkv_server.http.validation import ChatCompletionRequest, CompletionRequest
from pbkv_server.http.metrics import CONTENT_TYPE, route_label
from pbkv_server.http.exchange import figure_headers
from pbkv_server.http.openapi import (
    AGENT_MAP,
    AppGraph,
    ChatCompletion,
    CloseSession,
    Health,
    KvHintCapabilities,
    ModelCard,
    ModelList,
    TextCompletion,
    WorkflowEnd,
    install_openapi,
    json_body,
    responses,
)
from pbkv_server.http.responses import full_response, model_card, stream_events
from pbkv_server.http.service import PbkvService
from pbkv_contract.hints import END_PATH, GRAPH_PATH
from pbkv_contract.kv_hint_caps import HEADER_KV_HINTS, KV_HINTS_PATH, advertisement, document

__all__ = ["create_app", "CLOSE_SESSION_PATH"]

#: SGLang's session-close route (``python/sglang/srt/entrypoints/http_server.py``).
CLOSE_SESSION_PATH = "/close_session"


def create_app(config: ServerConfig, make_engine_config: Callable[[], EngineConfig] | None = None) -> FastAPI:
    """Build the app for ``config``; the engine task starts with the app's lifespan.

    Args:
        config: server settings.
        make_engine_config: optional override of the engine configuration (tests, parity checks).

    Returns:
        the FastAPI app; ``app.state.service`` is its :class:`PbkvService`.

    Raises:
        ValueError: invalid policy, profile, predictor or scenario.
    """
    service = PbkvService(config, make_engine_config)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await service.startup()
        try:
            yield
        finally:
            await service.shutdown()

    app = FastAPI(title="pbkv-server", version="1", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.service = service
    install_error_handlers(app)
    install_openapi(app)
    metrics = service.metrics

    app.add_middleware(_CountRequests, metrics=metrics)
    app.add_middleware(_AdvertiseKvHints)
    # Sizes a soak run watches for growth (benchmarks/server_soak.py).
    metrics.watch("pbkv_tree_nodes", "Radix-tree nodes of the engine (both tiers)",
                  lambda: service.driver.engine.cache.tree.n_nodes)
    metrics.watch("pbkv_server_workflows", "Active workflows in the server's workflow table", lambda: len(service.workflows))
    metrics.watch("pbkv_server_ended_workflow_ids", "Ended workflow ids remembered for idempotent end signals",
                  lambda: service.workflows.ended_count)
    metrics.watch("pbkv_reused_workflow_ids", "Requests that used the id of an ended workflow (each started a "
                  "new incarnation of it)", lambda: service.workflows.reused_ids)
    llm_errors = (400, 413, 431, 500)

    async def serve(request: Request, kind: str) -> Response:
        body = await read_json_body(request, config.max_body_bytes, config.max_json_depth)
        prep = service.prepare(body, request.headers, kind)
        sub = service.submit(prep)
        try:
            if prep.stream:
                ttft = await service.first_token(sub)
                first = await sub.first_token
                headers = figure_headers(
                    first.prompt_tokens, first.device_cached_tokens, first.host_cached_tokens, ttft, prep.hint_status
                )
                headers["Cache-Control"] = "no-cache"
                return StreamingResponse(stream_events(service, prep, sub), media_type="text/event-stream", headers=headers)
            result = await service.finish(prep, sub)
        except EngineFailure as exc:
            raise ApiError(500, str(exc), "engine_failure") from None
        return JSONResponse(full_response(prep, result), headers=result.headers(prep.hint_status))

    @app.post("/v1/chat/completions", openapi_extra=json_body(ChatCompletionRequest),
              responses=responses(ChatCompletion, *llm_errors, stream=True), response_class=Response)
    async def chat_completions(request: Request) -> Response:
        """OpenAI chat completion (``stream: true`` answers server-sent events)."""
        return await serve(request, "chat")

    @app.post("/v1/completions", openapi_extra=json_body(CompletionRequest),
              responses=responses(TextCompletion, *llm_errors, stream=True), response_class=Response)
    async def completions(request: Request) -> Response:
        """OpenAI (legacy) text completion of one prompt string."""
        return await serve(request, "completion")

    @app.get("/v1/models", responses=responses(ModelList, 431), response_class=Response)
    async def models() -> Response:
        """The one model this server answers as."""
        return JSONResponse({"object": "list", "data": [model_card(config.model_name)]})

    # A path parameter with a line break matches no route: 404, like any unknown path.
    @app.get("/v1/models/{model_id:path}", responses=responses(ModelCard, 404, 431), response_class=Response)
    async def model(model_id: str) -> Response:
        """A model card for any id (the server answers every model name)."""
        return JSONResponse(model_card(model_id))

    @app.get("/health", responses=responses(Health, 431), response_class=Response)
    async def health() -> Response:
        """Liveness and the engine's settings."""
        driver = service.driver
        return JSONResponse({
            "status": "ok",
            "engine": config.engine,
            "policy": config.policy,
            "predictor": service.predictor_label,
            "profile": driver.engine_config.profile.name,
            "device_tokens": driver.device_capacity,
            "inflight": driver.inflight,
            "active_workflows": len(service.workflows),
            "engine_failures": driver.engine_failures,
        })

    @app.get("/metrics", responses=responses(None, 431, text=True), response_class=Response)
    async def prometheus_metrics() -> Response:
        """Prometheus text exposition of the server's and the engine's figures."""
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    @app.get(KV_HINTS_PATH, responses=responses(KvHintCapabilities, 431), response_class=Response)
    async def kv_hint_capabilities() -> Response:
        """The KV-hint envelope (``kv_hints``) actions this server reads, and what each does."""
        return JSONResponse(_KV_HINTS_DOCUMENT)

    @app.post(END_PATH.replace("{workflow_id}", "{workflow_id:path}"), status_code=204,
              openapi_extra=json_body(WorkflowEnd, required=False, description="Optional; empty means completed"),
              responses=responses(None, 400, 401, 404, 413, 431, ok_status=204), response_class=Response)
    async def end_workflow(workflow_id: str, request: Request) -> Response:
        """End signal of a workflow (idempotent; an id never seen is fine)."""
        service.check_hint_token(request.headers)
        body = await _optional_json(request, config.max_body_bytes, config.max_json_depth)
        service.end_workflow(workflow_id, body)
        return Response(status_code=204)

    @app.post(CLOSE_SESSION_PATH, openapi_extra=json_body(CloseSession),
              responses=responses(None, 400, 401, 413, 431), response_class=Response)
    async def close_session(request: Request) -> Response:
        """SGLang's session close: the session's cache tags go, and its PBKV workflow ends (idempotent)."""
        service.check_hint_token(request.headers)
        body = await read_json_body(request, config.max_body_bytes, config.max_json_depth)
        service.close_session(body)
        return Response(status_code=200)

    @app.put(GRAPH_PATH.replace("{app}", "{app_name:path}"), status_code=204,
             openapi_extra=json_body({"anyOf": [{"$ref": "#/components/schemas/AppGraph"}, AGENT_MAP]}),
             responses=responses(None, 400, 401, 404, 413, 431, ok_status=204), response_class=Response)
    async def app_graph(app_name: str, request: Request) -> Response:
        """Static call graph of an app, for the ``kvflow`` policy."""
        service.check_hint_token(request.headers)
        body = await read_json_body(request, config.max_body_bytes, config.max_json_depth)
        service.set_app_graph(app_name, body)
        return Response(status_code=204)

    return app


# ---------------------------------------------------------------------------- helpers

#: What each understood envelope action does on pbkv-server (:mod:`pbkv_server.http.kv_hints`).
_KV_HINT_EFFECTS = {
    "retain": "the request's own workflow: payload.priority and a cache TTL (ttl_seconds, else 300 s) "
              "as its priority / pin hints; another active workflow: its idle clock restarts (not retired idle)",
    "demote": "the workflow is retired (its own: after the request is served)",
    "evict": "the workflow is retired (its own: after the request is served)",
    "fetch": "the workflow's host-tier cache is loaded back to the device as far as free room goes; "
             "another active workflow's idle clock restarts, as a retain's",
}
_KV_HINTS_DOCUMENT = document(effects=_KV_HINT_EFFECTS)
_KV_HINTS_HEADER = (HEADER_KV_HINTS.lower().encode("latin-1"), advertisement().encode("latin-1"))


class _AdvertiseKvHints:
    """Pure ASGI middleware: every answer carries ``X-PBKV-KV-Hints``, the envelope actions the
    server reads (one header; clients learn it from their first answer)."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_wrapper(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), _KV_HINTS_HEADER]}
            await send(message)

        await self.app(scope, receive, send_wrapper)


class _CountRequests:
    """Pure ASGI middleware: counts responses by route and status, times LLM requests.

    Latency is measured from arrival to the response start (headers), i.e. after the first token
    for streams and after the last token otherwise. A pure ASGI class avoids the per-request
    task overhead of Starlette's ``BaseHTTPMiddleware``.
    """

    def __init__(self, app: Any, metrics: Any):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        route = route_label(scope.get("path", ""))
        start = time.monotonic()

        async def send_wrapper(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                self.metrics.requests.labels(route, str(message["status"])).inc()
                if route in ("chat", "completions"):
                    self.metrics.latency.observe(time.monotonic() - start)
            await send(message)

        await self.app(scope, receive, send_wrapper)


async def _optional_json(request: Request, max_bytes: int, max_depth: int) -> Any:
    # The end signal's body is optional: an empty body means status "completed". A body that is
    # present must be an object (JSON null is not "no body").
    try:
        body = await read_json_body(request, max_bytes, max_depth)
    except ApiError as exc:
        if exc.code == "invalid_json" and "empty" in exc.message:
            return None
        raise
    if not isinstance(body, dict):
        raise ApiError(400, "body must be a JSON object", "invalid_request")
    return body

