"""The engine backends' HTTP side of the KV-hint advertisement (:mod:`pbkv_contract.kv_hint_caps`).

A client sends envelope actions only to a server that advertises them. The vLLM middleware
(:mod:`.vllm.http`) and the SGLang plugin's routes (:mod:`.sglang.ipc`) advertise with the parts
here: :class:`AdvertiseKvHints` adds ``X-PBKV-KV-Hints`` to every answer of the wrapped ASGI app
(:func:`advertising` to one answer); each backend answers ``GET /pbkv/v1/kv_hints`` with
:func:`pbkv_contract.kv_hint_caps.document` and its own effects. Pure ASGI, imports no engine.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

from pbkv_contract.kv_hint_caps import HEADER_KV_HINTS, advertisement

__all__ = ["AdvertiseKvHints", "advertising"]

_HEADER = (HEADER_KV_HINTS.lower().encode("latin-1"), advertisement().encode("latin-1"))


def advertising(send: Callable[[dict], Awaitable[None]]) -> Callable[[dict], Awaitable[None]]:
    """``send`` that adds ``X-PBKV-KV-Hints`` to the answer's headers (once, at its start)."""

    async def wrapped(message: dict) -> None:
        if message.get("type") == "http.response.start":
            headers = [h for h in message.get("headers", ()) if h[0].lower() != _HEADER[0]]
            message = {**message, "headers": [*headers, _HEADER]}
        await send(message)

    return wrapped


class AdvertiseKvHints:
    """Pure ASGI middleware: every HTTP answer of ``app`` carries ``X-PBKV-KV-Hints``."""

    def __init__(self, app: Callable[..., Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        await self.app(scope, receive, advertising(send))

