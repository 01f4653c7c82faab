"""Run a pbkv-server in the foreground (CLI) or on a background thread (examples, tests).

Both run uvicorn with the guarded HTTP protocol of :mod:`pbkv_server.http.protocol` (head size
and count limits, counted OpenAI-style rejections). A server bound to an address other than
loopback without ``--hint-token`` logs a warning at startup (README, "Exposing the server").
"""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
import threading
import time
from dataclasses import replace
from typing import Any, Callable

import uvicorn

from pbkv_server.engine import EngineConfig
from pbkv_server.http.app import create_app
from pbkv_server.http.config import ServerConfig
from pbkv_server.http.protocol import RejectHandler, guarded_protocol

log = logging.getLogger(__name__)

__all__ = ["ServerHandle", "run_in_thread", "serve_forever", "exposure_warning"]


class ServerHandle:
    """A server running on a background thread.

    Attributes:
        url: base URL, e.g. ``http://127.0.0.1:40123`` (append ``/v1`` for OpenAI clients).
        config: the config it runs with (``port`` is the bound port).
        app: the FastAPI app (``app.state.service`` reaches the engine, for tests).
    """

    def __init__(self, server: uvicorn.Server, thread: threading.Thread, config: ServerConfig, app: object):
        self._server = server
        self._thread = thread
        self.config = config
        self.app = app
        self.url = f"http://{_url_host(config.host)}:{config.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI ``base_url`` (``url + "/v1"``)."""
        return self.url + "/v1"

    @property
    def service(self):  # noqa: ANN201 - PbkvService, imported lazily to keep this module light
        """The server's :class:`pbkv_server.http.service.PbkvService`."""
        return self.app.state.service  # type: ignore[attr-defined]

    def stop(self, timeout_s: float = 10.0) -> None:
        """Ask the server to exit and wait for its thread (idempotent)."""
        self._server.should_exit = True
        self._thread.join(timeout_s)

    def __enter__(self) -> "ServerHandle":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def run_in_thread(
    config: ServerConfig | None = None,
    *,
    make_engine_config: Callable[[], EngineConfig] | None = None,
    startup_timeout_s: float = 30.0,
) -> ServerHandle:
    """Start a server on a daemon thread and return once it accepts connections.

    ``config.port == 0`` binds a free port (the handle's ``url`` and ``config.port`` show it).

    Raises:
        ValueError: invalid configuration (policy, profile, predictor, scenario).
        OSError: the address cannot be bound.
        RuntimeError: the server did not start within ``startup_timeout_s``.
    """
    config = config or ServerConfig(port=0)
    app, sock = _checked_app_and_socket(config, make_engine_config)
    config = replace(config, port=sock.getsockname()[1])
    server = uvicorn.Server(_uvicorn_config(app, config))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="pbkv-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError("pbkv-server did not start (see the log above)")
        time.sleep(0.01)
    return ServerHandle(server, thread, config, app)


def serve_forever(config: ServerConfig, announce: Callable[[str], None] | None = None) -> None:
    """Run the server in the foreground until interrupted (the CLI's ``--engine sim``).

    Args:
        config: settings; ``port == 0`` binds a free port.
        announce: called with the base URL once the port is bound (the CLI prints it).

    Raises:
        ValueError: invalid configuration. OSError: the address cannot be bound.
    """
    app, sock = _checked_app_and_socket(config)
    config = replace(config, port=sock.getsockname()[1])
    if announce is not None:
        announce(f"http://{_url_host(config.host)}:{config.port}")
    uvicorn.Server(_uvicorn_config(app, config)).run(sockets=[sock])


def _checked_app_and_socket(config: ServerConfig, make_engine_config: Callable[[], EngineConfig] | None = None,
                            ) -> tuple[Any, socket.socket]:
    """The app, then the bound socket: every setting (policy, profile, predictor, scenario, trace) is
    checked before the address, so a bad setting is told first even when the port is busy too (as
    SGLang and vLLM check their arguments before they listen). The app does not read the port.

    Raises:
        ValueError: invalid configuration. OSError: the address cannot be bound (a trace file this
            start created is removed again: nothing was served into it).
    """
    trace = config.trace_out
    new_trace = trace is not None and not os.path.exists(trace)
    app = create_app(config, make_engine_config)
    try:
        return app, _bind(config.host, config.port)
    except BaseException:
        if app.state.service.trace is not None:
            app.state.service.trace.close()
            if new_trace and os.path.isfile(trace) and os.path.getsize(trace) == 0:
                os.remove(trace)
        raise


def _uvicorn_config(app: Any, config: ServerConfig) -> uvicorn.Config:
    # uvloop is picked automatically when installed; access logs cost ~10% at load.
    _warn_if_exposed(config)
    protocol = guarded_protocol(config.max_header_bytes, config.max_headers, _reject_handler(app.state.service.metrics),
                                config.read_timeout_s)
    return uvicorn.Config(app, host=config.host, port=config.port, log_level="warning", access_log=False,
                          timeout_keep_alive=30, lifespan="on", http=protocol)


def _reject_handler(metrics: Any) -> RejectHandler:
    """Count every request the protocol layer refuses; log each reason once (then at debug level)."""
    logged: set[str] = set()

    def on_reject(status: int, reason: str, path: str) -> None:
        metrics.count_rejected(status, reason, path)
        level = logging.DEBUG if reason in logged else logging.WARNING
        logged.add(reason)
        log.log(level, "refused a request to %s with %d (%s)%s", path or "?", status, reason,
                "" if level == logging.DEBUG else "; later refusals for this reason are logged at debug level")

    return on_reject


def exposure_warning(config: ServerConfig) -> str | None:
    """The startup warning for a server reachable beyond this machine without ``--hint-token``.

    Returns:
        the message, or ``None`` when the bind address is loopback (127.0.0.0/8, ::1,
        ``localhost``) or a hint token is set.
    """
    try:
        loopback = ipaddress.ip_address(config.host).is_loopback
    except ValueError:
        loopback = config.host == "localhost"
    if loopback or config.hint_token is not None:
        return None
    return (f"pbkv-server listens on {config.host} without --hint-token: anyone who can reach this port can end "
            "workflows and set app graphs; see README, 'Exposing the server'")


def _warn_if_exposed(config: ServerConfig) -> None:
    message = exposure_warning(config)
    if message is not None:
        log.warning(message)


def _bind(host: str, port: int) -> socket.socket:
    """A listening-ready socket on ``host:port``.

    Raises:
        OSError: the address cannot be bound (in use, not local, unresolvable, port out of
            range); its ``strerror`` is one readable line naming the address.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except (OSError, OverflowError) as exc:
        sock.close()
        reason = getattr(exc, "strerror", None) or str(exc)
        raise OSError(getattr(exc, "errno", None), f"cannot listen on {host}:{port}: {reason}") from None
    sock.set_inheritable(True)
    return sock


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
