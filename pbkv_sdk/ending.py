"""Workflow end signal (hint protocol v1, ``docs/architecture.md``), sent without blocking the app.

``POST {server}/pbkv/v1/workflows/{id}/end`` with ``{"status": ...}`` is queued on the background
sender of :mod:`pbkv_sdk.delivery` (a few daemon threads, a short timeout each). The app never
waits for it and never sees its errors: a failure, or a malformed ``server_url``, is logged as one
warning per server (later ones at debug level), because the server also retires idle workflows by
itself. :func:`flush` lets tests wait for delivery.

Behind a router with a replica list (:mod:`pbkv_sdk.routing`), the signal goes to the replicas
that served the workflow (else to every listed one) instead of ``server_url``.
"""

from __future__ import annotations

import logging
import os
import urllib.parse
from typing import Any, Iterable

from pbkv_contract.hints import END_PATH, END_STATUSES
from pbkv_sdk import delivery, routing
from pbkv_sdk.delivery import EXIT_FLUSH_S, SENDER_THREADS, flush, queue_request
from pbkv_sdk.once import WarnOnce

log = logging.getLogger(__name__)

__all__ = ["end_workflow", "end_url", "flush", "queue_request", "EXIT_FLUSH_S", "SENDER_THREADS"]


def end_workflow(workflow_id: str, status: str = "completed", *, server_url: str | None = None, timeout_s: float = 0.5,
                 served_by: Iterable[str] = ()) -> None:
    """Queue the end signal of ``workflow_id``; returns at once (never blocks, never raises on I/O).

    Args:
        workflow_id: the workflow to end.
        status: ``completed``, ``failed`` or ``cancelled``.
        server_url: base URL of the PBKV server, e.g. ``http://127.0.0.1:30000`` (a trailing
            ``/v1`` is stripped, so the LLM ``base_url`` works too); default ``$PBKV_SERVER_URL``.
            With neither, or with a URL that is not ``http(s)://host[:port][/path]``, nothing is
            sent and one warning per URL is logged.
        timeout_s: time budget of each phase of the POST (connect, write, read), seconds.
        served_by: worker URLs a router reported for the workflow's requests. With a replica
            list (``$PBKV_REPLICAS``, :func:`pbkv_sdk.routing.configure`) the signal goes to the
            listed ones among them, else to every listed replica, and ``server_url`` is not used
            (:func:`pbkv_sdk.routing.end_targets`).

    The shared secret of a server started with ``--hint-token`` is read from
    ``$PBKV_HINT_TOKEN`` and sent as the ``X-PBKV-Hint-Token`` header.

    Raises:
        ValueError: ``status`` is invalid (a programming error, so it is raised, not swallowed).
    """
    if status not in END_STATUSES:
        raise ValueError(f"status must be one of {END_STATUSES}, got {status!r}")
    replicas = routing.end_targets(served_by)
    if replicas is not None:  # behind a router: the replicas themselves (bounded, see pbkv_sdk.routing)
        for base in replicas:
            queue_request("POST", end_url(base, workflow_id), {"status": status}, timeout_s, cooldown=True)
        return
    server_url = server_url or os.environ.get("PBKV_SERVER_URL")
    if not server_url:
        _warn_once_about("<no server>", "PBKV end signal not sent: no server_url and PBKV_SERVER_URL is unset")
        return
    try:
        url = end_url(server_url, workflow_id)
    except ValueError as exc:
        _warn_once_about(server_url, "PBKV end signals not sent: %s; the app continues", exc)
        return
    queue_request("POST", url, {"status": status}, timeout_s)


def end_url(server_url: str, workflow_id: str) -> str:
    """Full URL of the end endpoint of ``workflow_id`` on ``server_url`` (``/v1`` suffix dropped).

    Raises:
        ValueError: ``server_url`` is not an ``http://`` or ``https://`` URL with a host
            (``"localhost:30000"`` without a scheme, ``"http://[bad"``, ...).
    """
    try:
        parts = urllib.parse.urlsplit(server_url)
        parts.port  # noqa: B018 - raises ValueError for a non-numeric or out-of-range port
    except ValueError as exc:
        raise ValueError(f"malformed server_url {server_url!r} ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"malformed server_url {server_url!r} (expected http://host:port)")
    base = server_url.rstrip("/")
    if base.endswith("/v1"):
        base = base[: -len("/v1")]
    return base + END_PATH.format(workflow_id=urllib.parse.quote(workflow_id, safe=""))


#: One warning per server URL that end signals cannot reach (or for no URL at all).
_NO_SERVER_WARNED = WarnOnce(log)
_warn_once_about = _NO_SERVER_WARNED

# The sender's old names here (it lived in this module before pbkv_sdk.delivery).
_Sender = delivery.Sender
_sender = delivery.sender
_flush_at_exit = delivery.flush_at_exit


def __getattr__(name: str) -> Any:
    if name == "_SENDER":  # read through: the sender starts lazily in pbkv_sdk.delivery
        return delivery._SENDER
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
