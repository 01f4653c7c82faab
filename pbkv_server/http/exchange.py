"""The parts of one LLM exchange: the validated request, its outcome, and their wire forms.

:func:`request_messages` and :func:`request_max_tokens` read a validated OpenAI body; :class:`Prepared`
is a request ready for the engine; :class:`Completion` is its outcome in tokens and engine
seconds, with the OpenAI ``usage`` object and the ``X-PBKV-*`` response headers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from pbkv_contract.hints import Hints
from pbkv_server.engine import EngineRequest

__all__ = ["Prepared", "Completion", "figure_headers", "request_messages", "request_max_tokens",
           "HEADER_PROMPT_TOKENS", "HEADER_CACHED_TOKENS", "HEADER_HOST_CACHED_TOKENS", "HEADER_TTFT",
           "HEADER_HINTS"]

#: Header names of the per-request figures the server reports.
HEADER_PROMPT_TOKENS = "X-PBKV-Prompt-Tokens"
HEADER_CACHED_TOKENS = "X-PBKV-Cached-Tokens"
HEADER_HOST_CACHED_TOKENS = "X-PBKV-Host-Cached-Tokens"
HEADER_TTFT = "X-PBKV-TTFT-S"
HEADER_HINTS = "X-PBKV-Hints"

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
        hint_status: ``"ok"``, ``"anonymous"`` or ``"ignored"`` (malformed).
        engine_request: blocks, block tokens, output tokens, hints, features.
        text: the reply the scenario wrote (already cut to ``max_tokens``).
        completion_tokens: tokens of ``text``.
        finish_reason: ``"stop"`` or ``"length"``.
        arrival: wall time (monotonic seconds) the request arrived.
        block_chars: characters per cache block of ``engine_request.blocks``.
        incarnation: which use of the workflow id this request belongs to (1 unless the id was
            used again after it ended; set at submission).
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
    simulated TTFT in engine seconds, and how its hints were treated (ok | anonymous | ignored)."""
    return {
        HEADER_PROMPT_TOKENS: str(int(prompt_tokens)),
        HEADER_CACHED_TOKENS: str(int(device_cached) + int(host_cached)),
        HEADER_HOST_CACHED_TOKENS: str(int(host_cached)),
        HEADER_TTFT: f"{ttft_s:.6f}",
        HEADER_HINTS: hint_status,
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
