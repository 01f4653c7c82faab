"""Workflow ends from vLLM's API server to its engine core, over a Unix datagram socket.

vLLM's OpenAI server and its scheduler run in different processes (the engine core); vLLM's own
channel between them carries only its request types. The end route (:mod:`.http`) therefore
sends one JSON datagram ``{"workflow_id": ..., "status": ...}`` to the socket named by
``PBKV_VLLM_CONTROL``; the engine core binds it and drains it, without blocking, before each
eviction decision (:meth:`ControlInbox.drain`). Datagrams on a Unix socket are neither lost nor
reordered while the receiver's buffer has room; a full buffer drops the end, and idle retirement
(``idle_retire_s``) still frees the workflow's cache later. Imports no vLLM.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from typing import Iterator

from pbkv_contract.hints import END_STATUSES, HintError, validate_workflow_id

log = logging.getLogger(__name__)

__all__ = ["send_end", "ControlInbox", "MAX_DATAGRAM"]

#: Largest datagram read (a workflow id is at most 128 characters).
MAX_DATAGRAM = 4096


def send_end(path: str, workflow_id: str, status: str = "completed") -> bool:
    """Send one workflow end to the engine core listening on ``path``.

    Returns:
        True if the datagram was handed to the socket; False if no engine core listens there
        (not started yet, or gone) or its buffer is full. Never raises for those.

    Raises:
        HintError: ``workflow_id`` or ``status`` is malformed (callers answer 400).
    """
    validate_workflow_id(workflow_id)
    if status not in END_STATUSES:
        raise HintError(f"status must be one of {list(END_STATUSES)}")
    data = json.dumps({"workflow_id": workflow_id, "status": status}).encode()
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.setblocking(False)
        try:
            sock.sendto(data, path)
        except OSError as exc:
            log.warning("PBKV: workflow end for %s not delivered to %s (%s)", workflow_id, path, exc)
            return False
    return True


class ControlInbox:
    """The engine core's end of the channel: a bound, non-blocking datagram socket at ``path``.

    A stale socket file at ``path`` (an engine core that died) is replaced.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        if os.path.exists(path):
            os.unlink(path)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.bind(path)
        self._sock.setblocking(False)
        self.malformed = 0

    def drain(self) -> Iterator[tuple[str, str]]:
        """Every ``(workflow_id, status)`` received since the last drain; malformed datagrams are
        counted (:attr:`malformed`) and skipped."""
        while True:
            try:
                data = self._sock.recv(MAX_DATAGRAM)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            try:
                msg = json.loads(data)
                wf, status = msg["workflow_id"], msg.get("status", "completed")
                validate_workflow_id(wf)
                if status not in END_STATUSES:
                    raise HintError("bad status")
            except (ValueError, KeyError, TypeError):
                self.malformed += 1
                continue
            yield wf, status

    def close(self) -> None:
        """Close and remove the socket file (idempotent)."""
        self._sock.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass
