"""Workflow end signal (hint protocol v1, ``docs/architecture.md``), sent without blocking the app.

``POST {server}/pbkv/v1/workflows/{id}/end`` with ``{"status": ...}`` runs on a few background
daemon threads (:data:`SENDER_THREADS`, so one hanging server delays a burst of ends by about one
timeout, not one timeout per workflow) with a short timeout. The app never waits for it and never
sees its errors: a failure, or a malformed ``server_url``, is logged as one warning per server
(later ones at debug level), because the server also retires idle workflows by itself.
:func:`flush` lets tests wait for delivery; at interpreter exit the SDK waits at most the largest
end timeout in use (capped at :data:`EXIT_FLUSH_S`).

Behind a router with a replica list (:mod:`pbkv_sdk.routing`), the signal goes to the replicas
that served the workflow (else to every listed one) instead of ``server_url``.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import threading
import time
import urllib.parse
from typing import Any, Iterable

import httpx

from pbkv_contract.hints import END_PATH, END_STATUSES, HEADER_HINT_TOKEN
from pbkv_sdk import routing
from pbkv_sdk.queues import wait_done
from pbkv_sdk.once import WarnOnce

log = logging.getLogger(__name__)

#: Longest time ``atexit`` waits for undelivered end signals, seconds (the largest end timeout
#: in use bounds it further, so exit is never held longer than one end signal's budget).
EXIT_FLUSH_S = 2.0
#: Threads that send end signals concurrently.
SENDER_THREADS = 4


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


def queue_request(method: str, url: str, payload: Any, timeout_s: float, *, cooldown: bool = False) -> None:
    """Queue one hint-endpoint request (JSON ``payload``) on the end-signal threads; returns at once.

    Failures are logged once per server, never raised. With ``cooldown``, a server that cannot be
    connected to (refused, or no connection within the timeout) is skipped for
    :data:`pbkv_sdk.routing.REPLICA_COOLDOWN_S`, so a dead replica in a fan-out costs one timeout,
    not one per signal. A slow answer (read timeout) does not count: the replica is alive, and
    skipping it would lose the ends of every workflow it serves.
    """
    _sender().put(method, url, payload, timeout_s, cooldown)


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


def flush(timeout_s: float = 5.0) -> bool:
    """Wait until every queued end signal was attempted; ``True`` if done within ``timeout_s``."""
    sender = _SENDER
    return True if sender is None else sender.flush(timeout_s)


class _Sender:
    """:data:`SENDER_THREADS` daemon threads draining a queue of end signals with one pooled httpx client."""

    def __init__(self) -> None:
        self._queue: queue.Queue[tuple[str, str, Any, float, bool] | None] = queue.Queue()
        self._warned: set[str] = set()
        # origin -> monotonic time until which it is skipped (cooldown requests only)
        self._down_until: dict[str, float] = {}
        # Built by the first sending thread, not here: httpx.Client() loads the TLS trust store
        # (about 0.1-0.2 s), which must not land on the app thread that ends the first workflow.
        self._client: httpx.Client | None = None
        self._client_lock = threading.Lock()
        #: Largest timeout of any signal queued so far, seconds (bounds the wait at exit).
        self.max_timeout_s = 0.0
        self._threads = [
            threading.Thread(target=self._run, name=f"pbkv-end-signal-{i}", daemon=True) for i in range(SENDER_THREADS)
        ]
        for thread in self._threads:
            thread.start()

    def put(self, method: str, url: str, payload: Any, timeout_s: float, cooldown: bool = False) -> None:
        self.max_timeout_s = max(self.max_timeout_s, timeout_s)
        self._queue.put((method, url, payload, timeout_s, cooldown))

    def alive(self) -> int:
        """Number of sender threads still running (all of them, unless something is badly wrong)."""
        return sum(t.is_alive() for t in self._threads)

    def flush(self, timeout_s: float) -> bool:
        return wait_done(self._queue, timeout_s)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is not None:
                    self._send(*item)
            except Exception:  # never let one bad signal stop the thread that sends all others
                log.debug("PBKV end signal: unexpected error", exc_info=True)
            finally:
                self._queue.task_done()

    def _http(self) -> httpx.Client:
        with self._client_lock:
            if self._client is None:
                self._client = httpx.Client()
            return self._client

    def _send(self, method: str, url: str, payload: Any, timeout_s: float, cooldown: bool) -> None:
        try:
            origin = urllib.parse.urlsplit(url).netloc
        except ValueError:
            origin = url
        if cooldown and self._down_until.get(origin, 0.0) > time.monotonic():
            log.debug("PBKV: %s skipped (no connection to %s recently)", url, origin)
            return
        try:
            token = os.environ.get("PBKV_HINT_TOKEN")
            headers = {HEADER_HINT_TOKEN: token} if token else None
            response = self._http().request(method, url, json=payload, headers=headers, timeout=httpx.Timeout(timeout_s))
            if response.status_code >= 400:
                raise httpx.HTTPStatusError(_status_problem(response), request=response.request, response=response)
        except Exception as exc:  # fail open: the server retires idle workflows anyway
            if cooldown and isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
                self._down_until[origin] = time.monotonic() + routing.REPLICA_COOLDOWN_S
            if origin not in self._warned:
                self._warned.add(origin)
                log.warning(
                    "PBKV end signal to %s failed (%s); the app continues, further failures are logged at debug level",
                    origin,
                    exc,
                )
            else:
                log.debug("PBKV end signal to %s failed: %s", url, exc)


def _status_problem(response: httpx.Response) -> str:
    """The failure text of an error answer; names the fix when the server is an SMG router."""
    if response.status_code == 404 and "x-smg-error-code" in response.headers:
        return (f"HTTP 404 from an SMG router, which does not forward {END_PATH.split('{')[0]}... paths: list "
                f"the replicas in {routing.ENV_REPLICAS} so that end signals reach them")
    return f"HTTP {response.status_code}"


_SENDER: _Sender | None = None
#: One warning per server URL that end signals cannot reach (or for no URL at all).
_NO_SERVER_WARNED = WarnOnce(log)
_warn_once_about = _NO_SERVER_WARNED
_SENDER_LOCK = threading.Lock()


def _sender() -> _Sender:
    global _SENDER
    with _SENDER_LOCK:
        if _SENDER is None:
            _SENDER = _Sender()
            atexit.register(_flush_at_exit)
        return _SENDER


def _flush_at_exit() -> None:
    # Give queued ends one timeout's worth of time (plus thread wake-up slack), never more than
    # EXIT_FLUSH_S: exit must not hang on a dead server, which retires idle workflows itself.
    sender = _SENDER
    if sender is not None:
        sender.flush(min(EXIT_FLUSH_S, sender.max_timeout_s + 0.1))


