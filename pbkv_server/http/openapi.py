"""The server's OpenAPI document (``GET /openapi.json``): request and response schemas of every route.

The routes read their bodies themselves (size checked before parsing, depth bounded, see
:func:`pbkv_server.http.errors.read_json_body`), so FastAPI cannot derive request schemas from
their signatures. This module declares them: request bodies from the validation models of
:mod:`pbkv_server.http.validation` (the same models that validate, so document and server agree),
response bodies from the models below, which describe exactly what
:mod:`pbkv_server.http.responses` and the routes write. Schemathesis fuzzes the API against this
document (``tests/server/http/test_fuzz.py``, ``benchmarks/server_fuzz.py``).
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import models_json_schema

from pbkv_contract.hints import END_STATUSES
from pbkv_server.http.validation import ChatCompletionRequest, CompletionRequest

__all__ = ["install_openapi", "json_body", "responses", "ChatCompletion", "TextCompletion", "ErrorResponse",
           "WorkflowEnd", "CloseSession", "AppGraph", "AGENT_MAP", "ModelCard", "ModelList", "Health",
           "KvHintCapabilities"]

_REF = "#/components/schemas/{model}"


class _Closed(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ErrorDetail(_Closed):
    """OpenAI's error object."""

    message: str
    type: str
    param: str | None
    code: str | None


class ErrorResponse(_Closed):
    """Every error the server answers (``{"error": {...}}``)."""

    error: ErrorDetail


class PromptTokensDetails(_Closed):
    """Prompt tokens served from the prefix cache (device + host tier)."""

    cached_tokens: int = Field(ge=0)


class Usage(_Closed):
    """Token counts of one request."""

    prompt_tokens: int = Field(ge=0)
    completion_tokens: int = Field(ge=0)
    total_tokens: int = Field(ge=0)
    prompt_tokens_details: PromptTokensDetails


class CalledFunction(_Closed):
    """The function of a tool call: its name and its arguments as JSON text."""

    name: str = Field(min_length=1)
    arguments: str


class ToolCallOut(_Closed):
    """One tool call of the reply."""

    id: str = Field(min_length=1)
    type: Literal["function"]
    function: CalledFunction


class AssistantMessage(_Closed):
    """The reply of a chat completion: text, or (``content`` null) tool calls."""

    model_config = ConfigDict(json_schema_extra={
        "if": {"properties": {"content": {"type": "null"}}}, "then": {"required": ["tool_calls"]}})

    role: Literal["assistant"]
    content: str | None
    tool_calls: list[ToolCallOut] | None = Field(None, min_length=1)


class ChatChoice(_Closed):
    """One choice of a chat completion (the server answers exactly one, index 0)."""

    index: Literal[0]
    message: AssistantMessage
    logprobs: None
    finish_reason: Literal["stop", "length", "tool_calls"]


class TextChoice(_Closed):
    """One choice of a text completion."""

    index: Literal[0]
    text: str
    logprobs: None
    finish_reason: Literal["stop", "length"]


class _Completion(_Closed):
    """Fields every non-streamed answer has."""

    id: str = Field(min_length=1)
    created: int
    model: str = Field(min_length=1)
    usage: Usage
    system_fingerprint: str


class ChatCompletion(_Completion):
    """Non-streamed answer of ``POST /v1/chat/completions``."""

    object: Literal["chat.completion"]
    choices: list[ChatChoice] = Field(min_length=1, max_length=1)


class TextCompletion(_Completion):
    """Non-streamed answer of ``POST /v1/completions``."""

    object: Literal["text_completion"]
    choices: list[TextChoice] = Field(min_length=1, max_length=1)


class ModelCard(_Closed):
    """One model of ``/v1/models``."""

    id: str
    object: Literal["model"]
    created: int
    owned_by: str


class ModelList(_Closed):
    """``GET /v1/models``."""

    object: Literal["list"]
    data: list[ModelCard]


class Health(_Closed):
    """``GET /health``."""

    status: Literal["ok"]
    engine: str
    policy: str
    predictor: str
    profile: str
    device_tokens: int
    inflight: int
    active_workflows: int
    engine_failures: int


class KvHintAction(_Closed):
    """One envelope action type the server reads, and what it does here."""

    action_type: str
    action_version: str
    kind: Literal["retain", "demote", "evict", "fetch"]
    effect: str | None = None


class KvHintCapabilities(_Closed):
    """``GET /pbkv/v1/kv_hints``: the KV-hint envelope actions read (:mod:`pbkv_contract.kv_hint_caps`)."""

    header: str
    advertisement: str
    protocol_versions: list[str]
    fields: list[str]
    actions: list[KvHintAction]


class WorkflowEnd(BaseModel):
    """Body of the end signal (optional; an empty body means ``completed``)."""

    model_config = ConfigDict(extra="allow")
    status: Literal[END_STATUSES] = "completed"  # type: ignore[valid-type]


class CloseSession(BaseModel):
    """Body of SGLang's ``/close_session``: the session to close (also the PBKV workflow it ends)."""

    model_config = ConfigDict(extra="allow")
    session_id: str = Field(pattern="^[A-Za-z0-9._:-]{1,128}$")


class AppGraph(BaseModel):
    """Static call graph of an app (KVFlow): agent -> agents it may call next."""

    model_config = ConfigDict(extra="allow")
    edges: dict[str, list[str]] = Field(min_length=1)


#: The call graph given as the agent map itself (without the ``edges`` key).
AGENT_MAP = {"type": "object", "minProperties": 1, "additionalProperties": {"type": "array", "items": {"type": "string"}}}

_REQUEST_MODELS = (ChatCompletionRequest, CompletionRequest, WorkflowEnd, CloseSession, AppGraph)


def json_body(model: type[BaseModel] | dict[str, Any], required: bool = True, description: str = "") -> dict[str, Any]:
    """``openapi_extra`` declaring a JSON request body of ``model`` (or an inline schema)."""
    schema = {"$ref": _REF.format(model=model.__name__)} if isinstance(model, type) else model
    return {"requestBody": {"required": required, "description": description,
                            "content": {"application/json": {"schema": schema}}}}


def responses(ok: type[BaseModel] | None, *errors: int, stream: bool = False, ok_status: int = 200,
              text: bool = False) -> dict[int | str, dict[str, Any]]:
    """``responses`` of a route: its success body and the error statuses it can answer."""
    out: dict[int | str, dict[str, Any]] = {}
    if ok is not None:
        content: dict[str, Any] = {"application/json": {"schema": {"$ref": _REF.format(model=ok.__name__)}}}
        if stream:
            content["text/event-stream"] = {"schema": _SSE_EVENT}
        out[ok_status] = {"description": "OK", "content": content, "model": ok}
    elif text:
        out[ok_status] = {"description": "OK", "content": {"text/plain": {"schema": {"type": "string"}}}}
    else:
        out[ok_status] = {"description": "No content"}
    for status in errors:
        out[status] = {"description": _ERROR_DESCRIPTIONS[status], "model": ErrorResponse}
    return out


def install_openapi(app: FastAPI) -> None:
    """Make ``app.openapi()`` include the request models' schemas in ``components.schemas``."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = get_openapi(title=app.title, version=app.version, routes=app.routes,
                              description="OpenAI-compatible server with PBKV prefix caching")
            _, defs = models_json_schema([(m, "validation") for m in _REQUEST_MODELS], ref_template=_REF)
            doc.setdefault("components", {}).setdefault("schemas", {}).update(defs.get("$defs", {}))
            for path in doc["paths"].values():
                for operation in path.values():
                    for param in operation.get("parameters", []):
                        param["schema"] = _PATH_PARAMS.get(param["name"], param["schema"])
                    # The routes take raw requests: FastAPI never answers 422 here.
                    operation.get("responses", {}).pop("422", None)
            for unused in ("HTTPValidationError", "ValidationError"):
                doc["components"]["schemas"].pop(unused, None)
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


# One server-sent event of a streamed answer: a JSON chunk (chat.completion.chunk /
# text_completion), the final usage chunk, an error object, or "[DONE]".
_SSE_EVENT = {"type": "object", "required": ["data"], "properties": {"data": {"type": "string", "minLength": 1}}}

# Path parameters with the rule their route enforces.
_PATH_PARAMS = {
    # pbkv_contract.hints.validate_workflow_id: 1-128 of [A-Za-z0-9._:-].
    "workflow_id": {"type": "string", "pattern": "^[A-Za-z0-9._:-]{1,128}$"},
    # Printable ASCII without '%' and '/', at most 128 characters: always a valid app name (a longer
    # or non-ASCII name is valid too when its percent-encoded form fits in 128 characters).
    "app_name": {"type": "string", "pattern": "^[ -$&-.0-~]{1,128}$"},
}

_ERROR_DESCRIPTIONS = {
    400: "Invalid request (OpenAI error object; malformed hints are never an error)",
    401: "Missing or wrong hint token (--hint-token)",
    404: "No such route (a path parameter with a line break matches no route)",
    413: "Request body over --max-body-bytes",
    431: "Request headers over --max-header-bytes / --max-headers (answered by the HTTP layer)",
    500: "Engine failure (the engine is rebuilt; the server keeps serving)",
}
