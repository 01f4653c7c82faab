"""Workflow end signal (hint protocol v1, DESIGN.md section 2), sent without blocking the app.

``POST {server}/pbkv/v1/workflows/{id}/end`` with ``{"status": ...}`` runs on one background
daemon thread with a short timeout. The app never waits for it and never sees its errors: a
failure is logged as one warning per server (later failures at debug level), because the server
also retires idle workflows by itself. :func:`flush` lets tests and ``atexit`` wait for delivery.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import threading
import time
import urllib.parse

import httpx

from pbkv_sdk.protocol import END_PATH, END_STATUSES

log = logging.getLogger(__name__)

#: Longest time ``atexit`` waits for undelivered end signals, seconds.
EXIT_FLUSH_S = 2.0


def end_workflow(workflow_id: str, status: str = "completed", *, server_url: str | None = None, timeout_s: float = 0.5) -> None:
    """Queue the end signal of ``workflow_id``; returns at once (never blocks, never raises on I/O).

    Args:
        workflow_id: the workflow to end.
        status: ``completed``, ``failed`` or ``cancelled``.
        server_url: base URL of the PBKV server, e.g. ``http://127.0.0.1:30000`` (a trailing
            ``/v1`` is stripped, so the LLM ``base_url`` works too); default ``$PBKV_SERVER_URL``.
            With neither, nothing is sent and one warning is logged.
        timeout_s: time budget of the POST (connect + write + read), seconds.

    Raises:
        ValueError: ``status`` is invalid (a programming error, so it is raised, not swallowed).
    """
    if status not in END_STATUSES:
        raise ValueError(f"status must be one of {END_STATUSES}, got {status!r}")
    server_url = server_url or os.environ.get("PBKV_SERVER_URL")
    if not server_url:
        if "<no server>" not in _NO_SERVER_WARNED:
            _NO_SERVER_WARNED.add("<no server>")
            log.warning("PBKV end signal not sent: no server_url and PBKV_SERVER_URL is unset")
        return
    _sender().put(end_url(server_url, workflow_id), status, timeout_s)


def end_url(server_url: str, workflow_id: str) -> str:
    """Full URL of the end endpoint of ``workflow_id`` on ``server_url`` (``/v1`` suffix dropped)."""
    base = server_url.rstrip("/")
    if base.endswith("/v1"):
        base = base[: -len("/v1")]
    return base + END_PATH.format(workflow_id=urllib.parse.quote(workflow_id, safe=""))


def flush(timeout_s: float = 5.0) -> bool:
    """Wait until every queued end signal was attempted; ``True`` if done within ``timeout_s``."""
    sender = _SENDER
    return True if sender is None else sender.flush(timeout_s)


class _Sender:
    """One daemon thread draining a queue of end signals with a pooled httpx client."""

    def __init__(self) -> None:
        self._queue: queue.Queue[tuple[str, str, float] | None] = queue.Queue()
        self._warned: set[str] = set()
        self._client = httpx.Client()
        self._thread = threading.Thread(target=self._run, name="pbkv-end-signal", daemon=True)
        self._thread.start()

    def put(self, url: str, status: str, timeout_s: float) -> None:
        self._queue.put((url, status, timeout_s))

    def flush(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while self._queue.unfinished_tasks:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.005)
        return True

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is not None:
                    self._send(*item)
            finally:
                self._queue.task_done()

    def _send(self, url: str, status: str, timeout_s: float) -> None:
        try:
            response = self._client.post(url, json={"status": status}, timeout=httpx.Timeout(timeout_s))
            if response.status_code >= 400:
                raise httpx.HTTPStatusError(f"HTTP {response.status_code}", request=response.request, response=response)
        except Exception as exc:  # fail open: the server retires idle workflows anyway
            origin = urllib.parse.urlsplit(url).netloc
            if origin not in self._warned:
                self._warned.add(origin)
                log.warning(
                    "PBKV end signal to %s failed (%s); the app continues, further failures are logged at debug level",
                    origin,
                    exc,
                )
            else:
                log.debug("PBKV end signal to %s failed: %s", url, exc)


_SENDER: _Sender | None = None
_NO_SERVER_WARNED: set[str] = set()
_SENDER_LOCK = threading.Lock()


def _sender() -> _Sender:
    global _SENDER
    with _SENDER_LOCK:
        if _SENDER is None:
            _SENDER = _Sender()
            atexit.register(flush, EXIT_FLUSH_S)
        return _SENDER
