"""OpenAI-compatible HTTP server with the embedded sim engine (``pbkv-server``, ``docs/architecture.md``, "Live server").

Python API::

    from pbkv_server.http import ServerConfig, run_in_thread
    with run_in_thread(ServerConfig(port=0, policy="pbkv", predictors={"*": "markov"})) as server:
        ...  # point an OpenAI client at server.base_url; server.url + END_PATH for end signals

The names load on first use: ``pbkv-server --engine sglang`` reads only ``http.config`` and runs in
SGLang's environment, which lacks the sim server's HTTP stack (``httptools``).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["ServerConfig", "ServerHandle", "run_in_thread", "serve_forever", "create_app"]

_HOME = {"ServerConfig": "config", "ServerHandle": "runner", "run_in_thread": "runner",
         "serve_forever": "runner", "create_app": "app"}


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
