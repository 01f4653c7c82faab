"""Waiting on the SDK's background queues (end signals, trace lines) without blocking forever."""

from __future__ import annotations

import queue
import time


def wait_done(q: queue.Queue, timeout_s: float, poll_s: float = 0.005) -> bool:
    """Wait until every item put on ``q`` was marked done (``task_done``).

    Args:
        q: a queue whose consumer calls ``task_done()`` for each item.
        timeout_s: longest wait, seconds.
        poll_s: polling interval, seconds (``Queue.join`` has no timeout, hence polling).

    Returns:
        ``True`` if the queue drained within ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while q.unfinished_tasks:
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)
    return True
