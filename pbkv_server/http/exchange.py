"""The parts of one LLM exchange: the validated request, its outcome, and their wire forms.

:func:`request_messages` and :func:`request_max_tokens` read a validated OpenAI body;
:func:`request_extras` reads the fields that clients of other cache managers send (SGLang's
``session_id`` and ``priority``, Dynamo's ``nvext``, Continuum's ``is_last_step``); :class:`Prepared`
is a request ready for the engine; :class:`Completion` is its outcome in tokens and engine
seconds, with the OpenAI ``usage`` object and the ``X-PBKV-*`` response headers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from pbkv_contract.hints import (  # the answer headers are the contract's, re-exported here
    HEADER_CACHED_TOKENS, HEADER_ENGINE, HEADER_HINTS, HEADER_HOST_CACHED_TOKENS, HEADER_PROMPT_TOKENS, HEADER_TTFT,
    HintError, Hints, WORKFLOW_ID_RULE, validate_workflow_id,
)
from pbkv_contract.trace import SERVED_BY_SIM
from pbkv_server.engine import EngineRequest

__all__ = ["Prepared", "Completion", "RequestExtras", "figure_headers", "request_messages", "request_max_tokens",
           "request_extras", "cache_control_ttl", "HEADER_PROMPT_TOKENS", "HEADER_CACHED_TOKENS",
           "HEADER_HOST_CACHED_TOKENS", "HEADER_TTFT", "HEADER_HINTS", "HEADER_ENGINE"]

#: Dynamo's ``cache_control`` TTL range and the TTL of a string it does not recognise, seconds.
TTL_MIN_S, TTL_MAX_S, TTL_DEFAULT_S = 300.0, 3600.0, 300.0
_TTL_RE = re.compile(r"^\s*(\d+)\s*([smh]?)\s*$")
_TTL_UNIT = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}


@dataclass(slots=True)
class RequestExtras:
    """What a request body says for the cache managers users run today (all optional).

    Attributes:
        session_id: SGLang's top-level ``session_id`` (1-128 of ``[A-Za-z0-9._:-]``, the workflow-id
            rule, since the server also uses it as the PBKV workflow id).
        priority: the top-level ``priority`` (SGLang, vLLM), else ``nvext.agent_hints.priority``
            (Dynamo).
        cache_ttl_s: ``nvext.cache_control`` TTL, seconds, clamped as Dynamo does.
        speculative_prefill: ``nvext.agent_hints.speculative_prefill`` is true.
        last_step: Continuum's top-level ``is_last_step``.
        problems: why a field was ignored (wrong type or value); never an error for the request.
    """

    session_id: str | None = None
    priority: int | None = None
    cache_ttl_s: float | None = None
    speculative_prefill: bool = False
    last_step: bool = False
    problems: list[str] = field(default_factory=list)


def request_extras(body: Mapping[str, Any]) -> RequestExtras:
    """Read :class:`RequestExtras` from a decoded JSON body. Never raises: a field of the wrong
    type or value is ignored and named in ``problems`` (like a malformed hint)."""
    out = RequestExtras()
    sid = body.get("session_id")
    if sid is not None:
        try:
            out.session_id = validate_workflow_id(sid) if isinstance(sid, str) else None
        except HintError:
            pass
        if out.session_id is None:
            out.problems.append(f"session_id must be {WORKFLOW_ID_RULE}")
    nvext = body.get("nvext")
    if nvext is not None and not isinstance(nvext, Mapping):
        out.problems.append("nvext must be an object")
    hints = nvext.get("agent_hints") if isinstance(nvext, Mapping) else None
    if hints is not None and not isinstance(hints, Mapping):
        out.problems.append("nvext.agent_hints must be an object")
    hints = hints if isinstance(hints, Mapping) else {}
    priority = body.get("priority", hints.get("priority"))
    if priority is not None:
        if isinstance(priority, int) and not isinstance(priority, bool):
            out.priority = priority
        else:
            out.problems.append("priority must be an integer")
    out.speculative_prefill = hints.get("speculative_prefill") is True
    control = nvext.get("cache_control") if isinstance(nvext, Mapping) else None
    if control is not None:
        out.cache_ttl_s = cache_control_ttl(control)
        if out.cache_ttl_s is None:
            out.problems.append('nvext.cache_control must be {"type": "ephemeral", "ttl": ...}')
    last = body.get("is_last_step")
    if last is not None:
        if isinstance(last, bool):
            out.last_step = last
        else:
            out.problems.append("is_last_step must be a boolean")
    return out


def cache_control_ttl(control: Any) -> float | None:
    """The TTL, seconds, of a Dynamo ``nvext.cache_control`` object, or ``None`` if it is not one.

    ``ttl`` is whole seconds (``"600"``, ``600``, ``"600s"``) or a shorthand (``"5m"``, ``"1h"``); a
    string Dynamo does not recognise means 300 s, and the result is clamped to [300, 3600] s, as
    Dynamo's ``CacheControl::ttl_seconds`` does (ai-dynamo/dynamo PR #6213; "SGLang for Agentic
    Workloads", Request Format). Only ``type: "ephemeral"`` exists; another type is ``None``.
    """
    if not isinstance(control, Mapping) or control.get("type", "ephemeral") != "ephemeral":
        return None
    ttl = control.get("ttl")
    seconds = TTL_DEFAULT_S
    if isinstance(ttl, (int, float)) and not isinstance(ttl, bool) and ttl == ttl:
        seconds = float(ttl)
    elif isinstance(ttl, str) and (m := _TTL_RE.match(ttl)):
        seconds = int(m.group(1)) * _TTL_UNIT[m.group(2)]
    return min(TTL_MAX_S, max(TTL_MIN_S, seconds))

@dataclass(slots=True)
class Prepared:
    """A validated LLM request, ready for the engine.

    Attributes:
        kind: ``"chat"`` or ``"completion"``.
        request_id: id of the response (``chatcmpl-...`` / ``cmpl-...``).
        model: model name echoed back.
        stream: answer as server-sent events.
        include_usage: streaming only: send a final usage chunk.
        hints: the request's valid hints, or ``None`` (anonymous or malformed).
        hint_status: ``"ok"``, ``"anonymous"``, ``"ignored"`` (malformed) or ``"session"`` (no PBKV
            hints: the workflow is the request's SGLang ``session_id``).
        engine_request: blocks, block tokens, output tokens, hints, features.
        text: the reply the scenario wrote (already cut to ``max_tokens``).
        completion_tokens: tokens of ``text``.
        finish_reason: ``"stop"``, ``"length"`` or ``"tool_calls"``.
        arrival: wall time (monotonic seconds) the request arrived.
        block_chars: characters per cache block of ``engine_request.blocks``.
        incarnation: which use of the workflow id this request belongs to (1 unless the id was
            used again after it ended; set at submission).
        tool_calls: the answer's OpenAI ``tool_calls`` (then ``text`` is empty and the message's
            content null), or ``None`` for a text answer.
        kv_actions: understood ``kv_hints`` actions applied at submission (:mod:`pbkv_server.http.kv_hints`).
        kv_end_after: ``(kind, workflow_id)`` retired after the request finished (its own demote/evict).
    """

    kind: str
    request_id: str
    model: str
    stream: bool
    include_usage: bool
    hints: Hints | None
    hint_status: str
    engine_request: EngineRequest
    text: str
    completion_tokens: int
    finish_reason: str
    arrival: float
    block_chars: int
    incarnation: int = 1
    tool_calls: list[dict[str, Any]] | None = None
    #: ``(kind, workflow_id, keep)`` KV-hint actions to apply when the request is submitted
    #: (other workflows' ends and retains, fetches).
    kv_actions: tuple = ()
    #: ``(kind, workflow_id)`` to retire once the request has finished (its own demote/evict).
    kv_end_after: tuple[str, str] | None = None


@dataclass(slots=True)
class Completion:
    """The outcome of one request, in tokens and engine seconds."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    device_cached_tokens: int
    host_cached_tokens: int
    ttft_s: float

    def usage(self) -> dict[str, Any]:
        """OpenAI ``usage`` object; ``cached_tokens`` counts device and host prefix hits."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": self.cached_tokens},
        }

    def headers(self, hint_status: str) -> dict[str, str]:
        """Response headers reporting this request's figures (:func:`figure_headers`)."""
        return figure_headers(
            self.prompt_tokens, self.device_cached_tokens, self.host_cached_tokens, self.ttft_s, hint_status
        )


def figure_headers(prompt_tokens: int, device_cached: int, host_cached: int, ttft_s: float,
                   hint_status: str) -> dict[str, str]:
    """Response headers of one request: prompt tokens, cached tokens (device + host), host part,
    simulated TTFT in engine seconds, how its hints were treated (ok | anonymous | ignored), and
    that the simulator answered (a recorder marks its trace ``served_by: sim``)."""
    return {
        HEADER_PROMPT_TOKENS: str(int(prompt_tokens)),
        HEADER_CACHED_TOKENS: str(int(device_cached) + int(host_cached)),
        HEADER_HOST_CACHED_TOKENS: str(int(host_cached)),
        HEADER_TTFT: f"{ttft_s:.6f}",
        HEADER_HINTS: hint_status,
        HEADER_ENGINE: SERVED_BY_SIM,
    }


def request_messages(body: Mapping[str, Any], request: Any, kind: str) -> list[dict[str, Any]]:
    """The chat messages of a validated body (a completion prompt becomes one user message).

    Args:
        body: the decoded JSON body.
        request: its validated model (:mod:`pbkv_server.http.validation`).
        kind: ``"chat"`` or ``"completion"``. Decided by the route, never by the fields: unknown
            fields are kept on the model, so a chat body may carry a stray ``prompt``.
    """
    if kind == "chat":
        return body["messages"]
    prompt = request.prompt
    return [{"role": "user", "content": prompt if isinstance(prompt, str) else prompt[0]}]


def request_max_tokens(request: Any, kind: str) -> int | None:
    """``max_completion_tokens`` (chat only) or else ``max_tokens`` of a validated request; ``None`` when absent."""
    if kind == "chat" and request.max_completion_tokens is not None:
        return request.max_completion_tokens
    return request.max_tokens
