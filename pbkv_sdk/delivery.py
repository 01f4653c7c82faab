"""Background delivery of hint-endpoint requests (end signals, app graphs), never blocking the app.

Both :mod:`pbkv_sdk.ending` (``POST .../workflows/{id}/end``) and :mod:`pbkv_sdk.routing`
(``PUT .../apps/{app}/graph`` to each replica) queue their requests here; this module imports
neither of them, so the two do not import each other.

Requests run on :data:`SENDER_THREADS` daemon threads (so one hanging server delays a burst of
requests by about one timeout, not one timeout per request) with one pooled httpx client and a
short timeout each. The app never waits for them and never sees their errors: a failure is logged
as one warning per server (later ones at debug level), because the server also retires idle
workflows by itself. :func:`flush` lets tests wait for delivery; at interpreter exit the SDK waits
at most the largest timeout among the requests still pending (capped at :data:`EXIT_FLUSH_S`).
"""

from __future__ import annotations

import atexit
import collections
import logging
import os
import queue
import threading
import time
import urllib.parse
from typing import Any

import httpx

from pbkv_contract.hints import END_PATH, HEADER_HINT_TOKEN
from pbkv_sdk.queues import wait_done

log = logging.getLogger("pbkv_sdk.ending")  # the logger users already filter on

__all__ = ["EXIT_FLUSH_S", "SENDER_THREADS", "REPLICA_COOLDOWN_S", "ENV_REPLICAS", "queue_request", "flush", "Sender",
           "sender"]

#: Longest time ``atexit`` waits for undelivered requests, seconds (the largest request timeout
#: in use bounds it further, so exit is never held longer than one request's budget).
EXIT_FLUSH_S = 2.0
#: Threads that send concurrently.
SENDER_THREADS = 4
#: Seconds a replica that could not be connected to is skipped by later cooldown requests.
REPLICA_COOLDOWN_S = 10.0
#: Environment variable listing the replicas behind a router (read by :mod:`pbkv_sdk.routing`;
#: named here because a router's 404 answer names it as the fix).
ENV_REPLICAS = "PBKV_REPLICAS"


def queue_request(method: str, url: str, payload: Any, timeout_s: float, *, cooldown: bool = False) -> None:
    """Queue one hint-endpoint request (JSON ``payload``) on the sender threads; returns at once.

    Failures are logged once per server, never raised. With ``cooldown``, a server that cannot be
    connected to (refused, or no connection within the timeout) is skipped for
    :data:`REPLICA_COOLDOWN_S`, so a dead replica in a fan-out costs one timeout, not one per
    signal. A slow answer (read timeout) does not count: the replica is alive, and skipping it
    would lose the ends of every workflow it serves.
    """
    sender().put(method, url, payload, timeout_s, cooldown)


def flush(timeout_s: float = 5.0) -> bool:
    """Wait until every queued request was attempted; ``True`` if done within ``timeout_s``."""
    current = _SENDER
    return True if current is None else current.flush(timeout_s)


class Sender:
    """:data:`SENDER_THREADS` daemon threads draining a queue of requests with one pooled httpx client."""

    def __init__(self) -> None:
        self._queue: queue.Queue[tuple[str, str, Any, float, bool] | None] = queue.Queue()
        self._warned: set[str] = set()
        # origin -> monotonic time until which it is skipped (cooldown requests only)
        self._down_until: dict[str, float] = {}
        # Built by the first sending thread, not here: httpx.Client() loads the TLS trust store
        # (about 0.1-0.2 s), which must not land on the app thread that ends the first workflow.
        self._client: httpx.Client | None = None
        self._client_lock = threading.Lock()
        # timeout (s) -> number of requests with it still queued or in flight: the exit wait is
        # bounded by the largest of them, not by a long-timeout request that is already done.
        self._pending: collections.Counter[float] = collections.Counter()
        self._pending_lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._run, name=f"pbkv-end-signal-{i}", daemon=True) for i in range(SENDER_THREADS)
        ]
        for thread in self._threads:
            thread.start()

    def put(self, method: str, url: str, payload: Any, timeout_s: float, cooldown: bool = False) -> None:
        with self._pending_lock:
            self._pending[timeout_s] += 1
        self._queue.put((method, url, payload, timeout_s, cooldown))

    @property
    def max_timeout_s(self) -> float:
        """Largest timeout of the requests still queued or in flight, seconds (0 when none)."""
        with self._pending_lock:
            return max(self._pending, default=0.0)

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
            except Exception:  # never let one bad request stop the thread that sends all others
                log.debug("PBKV end signal: unexpected error", exc_info=True)
            finally:
                if item is not None:
                    with self._pending_lock:
                        self._pending[item[3]] -= 1
                        if self._pending[item[3]] <= 0:
                            del self._pending[item[3]]
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
                self._down_until[origin] = time.monotonic() + REPLICA_COOLDOWN_S
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
                f"the replicas in {ENV_REPLICAS} so that end signals reach them")
    return f"HTTP {response.status_code}"


_SENDER: Sender | None = None
_SENDER_LOCK = threading.Lock()


def sender() -> Sender:
    """The process's sender (started on first use, with an exit-time flush)."""
    global _SENDER
    with _SENDER_LOCK:
        if _SENDER is None:
            _SENDER = Sender()
            atexit.register(flush_at_exit)
        return _SENDER


def flush_at_exit() -> None:
    """Give pending requests the largest of their timeouts (plus thread wake-up slack), never more
    than :data:`EXIT_FLUSH_S`: exit must not hang on a dead server, which retires idle workflows itself."""
    current = _SENDER
    if current is not None:
        current.flush(min(EXIT_FLUSH_S, current.max_timeout_s + 0.1))
