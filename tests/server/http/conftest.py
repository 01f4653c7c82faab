"""Fixtures of the HTTP server tests: real pbkv-servers on 127.0.0.1 free ports."""

from __future__ import annotations

from typing import Any, Callable, Iterator

import pytest

from pbkv_server.http import ServerConfig, ServerHandle, run_in_thread


@pytest.fixture
def start_server() -> Iterator[Callable[..., ServerHandle]]:
    """Factory: ``start_server(**ServerConfig fields)`` -> a running server, stopped after the test."""
    handles: list[ServerHandle] = []

    def start(**fields: Any) -> ServerHandle:
        fields.setdefault("port", 0)
        fields.setdefault("idle_retire_s", None)
        handle = run_in_thread(ServerConfig(**fields))
        handles.append(handle)
        return handle

    yield start
    for handle in handles:
        handle.stop()
