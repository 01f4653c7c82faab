"""The FastAPI application of ``pbkv-server``: OpenAI-compatible routes, hint endpoints, metrics.

Routes (DESIGN.md sections 2 and 6):

* ``POST /v1/chat/completions``, ``POST /v1/completions``: stream (SSE) and non-stream, ``usage``
  with ``prompt_tokens_details.cached_tokens``; ``stream_options.include_usage`` honoured. Response
  headers ``X-PBKV-Prompt-Tokens``, ``X-PBKV-Cached-Tokens``, ``X-PBKV-Host-Cached-Tokens``,
  ``X-PBKV-TTFT-S`` (simulated, engine seconds) and ``X-PBKV-Hints`` (ok | anonymous | ignored).
* ``GET /v1/models``, ``GET /v1/models/{id}``, ``GET /health``, ``GET /metrics``.
* ``POST /pbkv/v1/workflows/{workflow_id}/end`` (204, idempotent, unknown ids fine) and
  ``PUT /pbkv/v1/apps/{app}/graph`` (204): the only routes guarded by ``--hint-token``.
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
from pbkv_server.http.metrics import CONTENT_TYPE
from pbkv_server.http.exchange import figure_headers
from pbkv_server.http.responses import full_response, model_card, stream_events
from pbkv_server.http.service import PbkvService
from pbkv_contract.hints import END_PATH, GRAPH_PATH

__all__ = ["create_app"]


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
    metrics = service.metrics

    app.add_middleware(_CountRequests, metrics=metrics)

    async def serve(request: Request, kind: str) -> Response:
        body = await read_json_body(request, config.max_body_bytes)
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

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await serve(request, "chat")

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await serve(request, "completion")

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [model_card(config.model_name)]}

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str) -> dict[str, Any]:
        return model_card(model_id)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        driver = service.driver
        return {
            "status": "ok",
            "engine": config.engine,
            "policy": config.policy,
            "profile": driver.engine_config.profile.name,
            "device_tokens": driver.device_capacity,
            "inflight": driver.inflight,
            "active_workflows": len(service.workflows),
            "engine_failures": driver.engine_failures,
        }

    @app.get("/metrics")
    async def prometheus_metrics() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    @app.post(END_PATH.replace("{workflow_id}", "{workflow_id:path}"), status_code=204)
    async def end_workflow(workflow_id: str, request: Request) -> Response:
        service.check_hint_token(request.headers)
        body = await _optional_json(request, config.max_body_bytes)
        service.end_workflow(workflow_id, body)
        return Response(status_code=204)

    @app.put(GRAPH_PATH.replace("{app}", "{app_name:path}"), status_code=204)
    async def app_graph(app_name: str, request: Request) -> Response:
        service.check_hint_token(request.headers)
        body = await read_json_body(request, config.max_body_bytes)
        service.set_app_graph(app_name, body)
        return Response(status_code=204)

    return app


# ---------------------------------------------------------------------------- helpers


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
        route = _route_label(scope.get("path", ""))
        start = time.monotonic()

        async def send_wrapper(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                self.metrics.requests.labels(route, str(message["status"])).inc()
                if route in ("chat", "completions"):
                    self.metrics.latency.observe(time.monotonic() - start)
            await send(message)

        await self.app(scope, receive, send_wrapper)


def _route_label(path: str) -> str:
    # Fixed labels keep the metric's cardinality bounded whatever paths clients send.
    if path == "/v1/chat/completions":
        return "chat"
    if path == "/v1/completions":
        return "completions"
    if path.startswith("/pbkv/v1/workflows/"):
        return "workflow_end"
    if path.startswith("/pbkv/v1/apps/"):
        return "app_graph"
    if path in ("/health", "/metrics", "/v1/models"):
        return path.strip("/").replace("/", "_")
    return "other"


async def _optional_json(request: Request, max_bytes: int) -> Any:
    # The end signal's body is optional: an empty body means status "completed".
    try:
        return await read_json_body(request, max_bytes)
    except ApiError as exc:
        if exc.code == "invalid_json" and "empty" in exc.message:
            return None
        raise
