"""Fixtures shared by every test suite: free loopback ports and servers run in a thread.

Tests never reach the network: servers they need run on 127.0.0.1 on a free port, started here.
CrewAI telemetry and tracing are switched off for the whole session (no outbound calls).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any, Callable, Iterator

import pytest

from pbkv_server.testing.local_cluster import free_port as find_free_port

# Test modules and the packages they import keep their bytecode (pytest's rewritten asserts
# included) in __pycache__ even where PYTHONDONTWRITEBYTECODE is set: without it every
# pytest-xdist worker re-parses and rewrites every test module at each run, about half of the
# collection's CPU time (docs/contributing.md#the-fast-lane). __pycache__ is git-ignored.
sys.dont_write_bytecode = False

# A failure is reported even when pytest cannot format it; a fast-lane test over 5 s CPU fails.
pytest_plugins = ["tests.report_fallback", "tests.fast_lane"]

for _name in ("CREWAI_DISABLE_TELEMETRY", "OTEL_SDK_DISABLED"):
    os.environ[_name] = "true"
os.environ["CREWAI_TRACING_ENABLED"] = "false"


class ThreadedServer:
    """An ASGI app served by uvicorn on a daemon thread at ``http://127.0.0.1:{port}``."""

    def __init__(self, app: Any, port: int | None = None):
        import uvicorn

        self.port = port or find_free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name=f"test-server-{self.port}", daemon=True)

    def start(self, timeout_s: float = 10.0) -> "ThreadedServer":
        """Start serving; raises ``RuntimeError`` if not up within ``timeout_s``."""
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError(f"test server on port {self.port} did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        """Ask uvicorn to exit and wait for the thread."""
        self._server.should_exit = True
        self._thread.join(10)


@pytest.fixture
def free_port() -> int:
    """A free loopback TCP port."""
    return find_free_port()


@pytest.fixture
def serve_asgi() -> Iterator[Callable[[Any], ThreadedServer]]:
    """Factory fixture: ``serve_asgi(app)`` starts ``app`` on a free port; all stop at teardown."""
    servers: list[ThreadedServer] = []

    def start(app: Any) -> ThreadedServer:
        server = ThreadedServer(app).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()
