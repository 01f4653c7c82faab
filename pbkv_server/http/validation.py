"""Request validation as the OpenAI API does it: field types and ranges, one clear 400 per error.

:class:`ChatCompletionRequest` and :class:`CompletionRequest` are pydantic models of the request
fields of OpenAI's Chat Completions and (legacy) Completions APIs, with OpenAI's documented types
and ranges (API reference, "Create chat completion" / "Create completion"): ``temperature`` a
finite number in [0, 2], ``top_p`` in [0, 1], penalties in [-2, 2], ``stop`` a string or at most 4
strings, ``tools`` an array of function tools whose ``parameters`` is an object schema with
well-shaped keywords (:class:`SchemaNode`: ``type``, ``properties``, ``required``, ``items``,
``enum``, ``anyOf``/``oneOf``/``allOf``, ``$defs``, ``$ref``), ``tool_choice`` forcing a call only
with tools and naming only an offered function, and so on. Numbers are strict (``"0.5"`` is not a
number, ``true`` is not an integer) as in OpenAI's validator. Unknown fields are accepted and
ignored, as vLLM and SGLang do, so that clients newer than this list keep working.

The same models generate the request schemas of the server's OpenAPI document
(:mod:`pbkv_server.http.openapi`), so the document and the validator cannot drift apart: the
schema-driven fuzz test (``tests/server/http/test_fuzz.py``) checks both directions.

:func:`validate_request` turns the first validation error into an :class:`ApiError` in OpenAI's
error shape (``param`` names the field, e.g. ``messages[0].role``). Hint names are checked by the hint
protocol's parser itself (:func:`pbkv_contract.hints.parse_hints`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Mapping, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from pbkv_server.http.errors import ApiError

__all__ = ["ChatCompletionRequest", "CompletionRequest", "validate_request", "MAX_N"]

#: OpenAI's upper bound of ``n`` (choices per request).
MAX_N = 128

_NUMBERS = ConfigDict(strict=True, allow_inf_nan=False)


class _Open(BaseModel):
    """A request object: known fields validated, unknown fields accepted and ignored."""

    model_config = ConfigDict(extra="allow", **_NUMBERS)




def _json_integer(value: Any) -> Any:
    # JSON Schema's "integer" is any number with a zero fractional part (10.0 is an integer), so
    # the documented schema and the validator agree; strings and booleans stay type errors.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _int(**constraints: Any) -> Any:
    """A JSON integer with ``Field`` constraints (strict: no strings or booleans; 10.0 is 10).

    The constraints sit inside the before-validator, so the JSON schema shows them as
    ``minimum``/``maximum``.
    """
    return Annotated[int, Field(**constraints), BeforeValidator(_json_integer)]


Int = _int()
Temperature = Annotated[float, Field(ge=0, le=2, description="Sampling temperature, 0-2 (finite).")]
TopP = Annotated[float, Field(ge=0, le=1, description="Nucleus sampling mass, 0-1.")]
Penalty = Annotated[float, Field(ge=-2, le=2)]
PositiveInt = _int(ge=1)
#: ``n``: OpenAI allows 1-128; this server answers one choice per request (see :func:`validate_request`).
OneChoice = _int(ge=1, le=1, description=f"Choices per request. OpenAI allows 1-{MAX_N}; "
                 "pbkv-server supports 1 only and answers 400 for more.")
Stop = Union[str, Annotated[list[str], Field(max_length=4)], None]
LogitBias = dict[str, Annotated[float, Field(ge=-100, le=100)]]


class ContentPart(_Open):
    """One part of a message's content array (``text``, ``image_url``, ``input_audio``, ...)."""

    type: Annotated[str, Field(min_length=1)]
    text: str | None = None


#: Roles whose message must carry ``content`` (OpenAI: required; an assistant message may leave it
#: out when it carries ``tool_calls`` or ``function_call``).
CONTENT_ROLES = ("system", "developer", "user", "tool", "function")
_PRESENT = {"not": {"type": "null"}}


class Message(_Open):
    """One chat message (``content`` required by role: checked in :func:`validate_request`, and
    stated in the schema)."""

    model_config = ConfigDict(json_schema_extra={"allOf": [
        {"if": {"properties": {"role": {"enum": list(CONTENT_ROLES)}}, "required": ["role"]},
         "then": {"required": ["content"], "properties": {"content": _PRESENT}}},
        {"if": {"properties": {"role": {"const": "assistant"}}, "required": ["role"]},
         "then": {"anyOf": [{"required": ["content"], "properties": {"content": _PRESENT}},
                            {"required": ["tool_calls"], "properties": {"tool_calls": _PRESENT}},
                            {"required": ["function_call"], "properties": {"function_call": _PRESENT}}]}},
    ]})

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: Union[str, list[ContentPart], None] = None
    name: str | None = None
    tool_call_id: str | None = None
    tool_calls: list[dict[str, Any]] | None = None


JsonType = Literal["string", "number", "integer", "boolean", "object", "array", "null"]


class SchemaNode(_Open):
    """One node of a tool's JSON Schema: the keywords the simulator reads must have the right shape
    (other keywords are kept and not checked). A node may also be ``true`` / ``false``."""

    type: Union[JsonType, Annotated[list[JsonType], Field(min_length=1)], None] = None
    properties: dict[str, Union["SchemaNode", bool]] | None = None
    required: list[str] | None = None
    items: Union["SchemaNode", bool, None] = None
    prefixItems: Annotated[list[Union["SchemaNode", bool]], Field(min_length=1)] | None = None
    additionalProperties: Union["SchemaNode", bool, None] = None
    enum: Annotated[list[Any], Field(min_length=1)] | None = None
    anyOf: Annotated[list[Union["SchemaNode", bool]], Field(min_length=1)] | None = None
    oneOf: Annotated[list[Union["SchemaNode", bool]], Field(min_length=1)] | None = None
    allOf: Annotated[list[Union["SchemaNode", bool]], Field(min_length=1)] | None = None
    defs: dict[str, Union["SchemaNode", bool]] | None = Field(None, alias="$defs")
    definitions: dict[str, Union["SchemaNode", bool]] | None = None
    ref: str | None = Field(None, alias="$ref")


class FunctionParameters(SchemaNode):
    """A function's ``parameters``: a JSON Schema of an object (OpenAI refuses other types)."""

    type: Literal["object"] | None = None


class FunctionDefinition(_Open):
    """The function of a function tool."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")]
    description: str | None = None
    parameters: FunctionParameters | None = None
    strict: bool | None = None


class Tool(_Open):
    """A function tool the model may call."""

    type: Literal["function"]
    function: FunctionDefinition


class ChosenFunction(_Open):
    """The function a named ``tool_choice`` forces."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")]


class NamedToolChoice(_Open):
    """``tool_choice`` naming one function (``{"type": "function", "function": {"name": ...}}``, which
    must be one of ``tools``), or an ``allowed_tools`` / ``custom`` choice."""

    model_config = ConfigDict(json_schema_extra={
        "if": {"properties": {"type": {"const": "function"}}, "required": ["type"]},
        "then": {"required": ["function"], "properties": {"function": _PRESENT}},
    })

    type: Literal["function", "allowed_tools", "custom"]
    function: ChosenFunction | None = None


class StreamOptions(_Open):
    """Options of a streamed answer."""

    include_usage: bool | None = None
    include_obfuscation: bool | None = None


class ResponseFormat(_Open):
    """Output format requested."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: dict[str, Any] | None = None


class _Common(_Open):
    # stream_options needs stream: true (checked in validate_request), stated in the schema too.
    model_config = ConfigDict(json_schema_extra={
        "if": {"properties": {"stream": {"const": True}}, "required": ["stream"]},
        "else": {"properties": {"stream_options": {"type": "null"}}},
    })

    model: Annotated[str, Field(min_length=1)] | None = None
    max_tokens: PositiveInt | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    n: OneChoice | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    stop: Stop = None
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    logit_bias: LogitBias | None = None
    seed: Int | None = None
    user: str | None = None
    custom_params: dict[str, Any] | None = Field(
        None, description="Server-specific parameters; `custom_params.pbkv` carries the PBKV hints "
        "(workflow_id, agent, step, app). Malformed hints are ignored and counted, never an error.")
    # Any JSON value: a malformed envelope is a malformed hint (counted, the request served), not a 400.
    kv_hints: Any = Field(
        None, description="The engines' versioned KV-hint envelope (vLLM KvHintsEnvelope, SGLang KvHints): "
        "{protocol_version, message_id, actions: [{action_id, action_type, action_version, payload}]}. "
        "Understood: kv.retain / kv.pin (keep the workflow's cache: payload priority, ttl_seconds; "
        "another workflow stays active), "
        "kv.evict / kv.demote / kv.deref (retire the workflow, after this request for its own), "
        "kv.fetch / kv.prefetch (load the workflow's host-tier cache back; another workflow stays "
        "active). The target is "
        "payload.workflow_id or payload.session_id, else the request's workflow. Unknown action types "
        "and versions are ignored and counted; a malformed envelope is counted as a malformed hint; "
        "neither is ever an error.",
        json_schema_extra={"examples": [{"protocol_version": "0.1", "message_id": "m-1", "actions": [
            {"action_id": "a-1", "action_type": "kv.evict", "action_version": "1.0", "payload": {}}]}]})
    kv_hint: Any = Field(None, description="Dynamo's name for the `kv_hints` envelope (read when `kv_hints` is absent).")
    kv_transfer_params: Any = Field(
        None, description="vLLM's KV-transfer parameters; `kv_transfer_params.kv_hint` (Dynamo's vLLM bridge) "
        "is read as the `kv_hints` envelope when neither `kv_hints` nor `kv_hint` is sent.")


#: ``tool_choice`` values that force a call: they need at least one tool (stated in the schema).
_FORCING = {"anyOf": [{"const": "required"}, {"type": "object"}]}


class ChatCompletionRequest(_Common):
    """Body of ``POST /v1/chat/completions``."""

    model_config = ConfigDict(json_schema_extra={"allOf": [
        _Common.model_config["json_schema_extra"],
        {"if": {"properties": {"tool_choice": _FORCING}, "required": ["tool_choice"]},
         "then": {"required": ["tools"], "properties": {"tools": {"type": "array", "minItems": 1}}}},
    ]})

    messages: Annotated[list[Message], Field(min_length=1)]
    max_completion_tokens: PositiveInt | None = None
    logprobs: bool | None = None
    top_logprobs: _int(ge=0, le=20) | None = None
    tools: list[Tool] | None = None
    tool_choice: Union[Literal["none", "auto", "required"], NamedToolChoice, None] = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None
    metadata: dict[str, str] | None = None
    store: bool | None = None
    reasoning_effort: str | None = None
    modalities: list[str] | None = None
    service_tier: str | None = None


class CompletionRequest(_Common):
    """Body of ``POST /v1/completions`` (one prompt string; batches and token arrays are not supported)."""

    prompt: Union[str, Annotated[list[str], Field(min_length=1, max_length=1)]]
    suffix: str | None = None
    echo: bool | None = None
    logprobs: _int(ge=0, le=5) | None = None
    best_of: _int(ge=1, le=1) | None = None


def validate_request(body: Any, kind: str) -> ChatCompletionRequest | CompletionRequest:
    """Validate a decoded body of the ``"chat"`` or ``"completion"`` route.

    Returns:
        the validated model (unknown fields kept as extras).

    Raises:
        ApiError: 400 in OpenAI's shape for the first invalid field: ``code`` is
            ``missing_required_parameter``, ``invalid_type``, ``invalid_value`` or, for ``n`` from
            2 to 128 and ``stream_options`` without ``stream``, ``unsupported_value`` /
            ``invalid_value`` with a message that says so; ``param`` is the field's path.
    """
    if not isinstance(body, dict):
        raise ApiError(400, "request body must be a JSON object", "invalid_request")
    model = ChatCompletionRequest if kind == "chat" else CompletionRequest
    try:
        parsed = model.model_validate(body)
    except ValidationError as exc:
        raise _api_error(_most_specific(exc.errors(include_url=False)), kind) from None
    if parsed.stream_options is not None and not parsed.stream:
        # OpenAI: "stream_options: only set this when you set stream: true".
        raise ApiError(400, "stream_options is only allowed when stream is true", "invalid_value", "stream_options")
    if kind == "chat":
        _check_tool_choice(parsed)
        for i, message in enumerate(parsed.messages):
            if message.content is None and (message.role in CONTENT_ROLES or (
                    message.tool_calls is None and (message.model_extra or {}).get("function_call") is None)):
                needs = "content" if message.role in CONTENT_ROLES else "content, tool_calls or function_call"
                raise ApiError(400, f"Missing required parameter: 'messages[{i}].content' (the {message.role} message "
                               f"needs {needs})", "missing_required_parameter", f"messages[{i}].content")
    return parsed


def _check_tool_choice(parsed: ChatCompletionRequest) -> None:
    """A forcing ``tool_choice`` needs tools, and a named one must name an offered function (OpenAI
    refuses both; the second is a rule between two fields that the schema cannot state)."""
    choice = parsed.tool_choice
    if choice is None or choice in ("none", "auto"):
        return
    if not parsed.tools:
        raise ApiError(400, f"tool_choice {choice if isinstance(choice, str) else choice.type!r} needs tools: "
                       "the request offers none", "invalid_value", "tool_choice")
    if isinstance(choice, NamedToolChoice) and choice.type == "function":
        if choice.function is None:
            raise ApiError(400, "Missing required parameter: 'tool_choice.function'", "missing_required_parameter",
                           "tool_choice.function")
        offered = [t.function.name for t in parsed.tools]
        if choice.function.name not in offered:
            raise ApiError(400, f"tool_choice names function {choice.function.name!r}, which is not in tools "
                           f"(offered: {', '.join(offered)})", "invalid_value", "tool_choice.function.name")


def _most_specific(errors: list[Any]) -> Any:
    # A union field reports one error per member; the member whose type matched (a value error,
    # or the deepest location) says what is actually wrong.
    return min(errors, key=lambda e: (e["type"].endswith("_type"), -len(e["loc"])))


def _api_error(error: Mapping[str, Any], kind: str) -> ApiError:
    param = _param(error["loc"])
    value = error.get("input")
    kind_of = error["type"]
    if kind_of == "missing":
        return ApiError(400, f"Missing required parameter: '{param}'", "missing_required_parameter", param)
    if param == "n" and isinstance(value, int) and not isinstance(value, bool) and 2 <= value <= MAX_N:
        return ApiError(400, f"n={value} is not supported: pbkv-server answers one choice per request "
                        f"(send {value} requests instead)", "unsupported_value", "n")
    if param == "n" and isinstance(value, int) and not isinstance(value, bool):
        return ApiError(400, f"n must be an integer from 1 to {MAX_N}, got {value}", "invalid_value", "n")
    if param == "prompt" and kind == "completion" and isinstance(value, list) and value and all(
            isinstance(v, int) or (isinstance(v, list) and all(isinstance(t, int) for t in v)) for v in value):
        return ApiError(400, "prompt as token ids is not supported: pbkv-server takes the prompt as one string "
                        "(it counts tokens itself)", "unsupported_value", "prompt")
    if param == "prompt" and kind == "completion" and isinstance(value, list) and kind_of == "too_long":
        return ApiError(400, "prompt must be one string (batched prompts are not supported)", "unsupported_value",
                        "prompt")
    code = "invalid_type" if kind_of.endswith("_type") or kind_of in ("model_attributes_type", "dict_type") else "invalid_value"
    shown = repr(value) if not isinstance(value, (dict, list)) else type(value).__name__
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return ApiError(400, f"Invalid '{param}': {error['msg']} (got {shown})", code, param)


def _param(loc: tuple[Any, ...]) -> str:
    # pydantic puts union member tags ("str", "list[ContentPart]", "function-after[...]") in the
    # location; OpenAI's param is the field path alone, e.g. "messages[0].content".
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif isinstance(part, str) and part.lstrip("$").isidentifier() and part not in _TYPE_TAGS:
            out += f".{part}" if out else part
    return out or "body"


_TYPE_TAGS = frozenset({"str", "int", "float", "bool", "none", "list", "dict", "tuple", "literal", "SchemaNode"})
