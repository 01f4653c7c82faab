"""The server-side trace (``--trace-out``): what the server served, in trace format v1.

One ``invocation`` record per hinted request (anonymous requests belong to no workflow and are
not recorded) with the server's cache keys (``prefix_hashes``) and per-block token counts
(``block_tokens``), so that ``pbkv-bench replay`` rebuilds exactly the server's radix-tree
sharing; one ``workflow_end`` record per end signal or retirement.

Times are ``epoch + engine seconds``, where ``epoch`` is the Unix time the server started: the
engine clock is virtual (at ``--pace 0`` it runs faster than the wall clock), and replaying the
recorded virtual gaps reproduces the server's schedule.
"""

from __future__ import annotations

import logging
import os
import time

from pbkv_contract.trace import SERVED_BY_SIM, TRACE_VERSION, InvocationRecord, TraceWriter, WorkflowEndRecord, \
    looks_like_trace
from pbkv_server.http.driver import Submission
from pbkv_server.http.exchange import Completion, Prepared

__all__ = ["ServedTrace", "UNKNOWN_APP", "trace_workflow_id"]

log = logging.getLogger(__name__)

#: App name recorded for workflows whose hints carried no app.
UNKNOWN_APP = "unknown"


class ServedTrace:
    """Appends served requests and workflow ends to a v1 trace file.

    Args:
        path: the JSONL file (an existing v1 trace is appended to, which the log says; parent
            directories are created).

    Raises:
        ValueError: the file cannot be opened (a directory, an unwritable or impossible path), or
            it exists, is not empty and is not a v1 trace (the rule of ``pbkv-sdk record``,
            :func:`pbkv_contract.trace.looks_like_trace`); the message names the path and the reason.
    """

    def __init__(self, path: str):
        try:
            existing = os.path.isfile(path) and os.path.getsize(path) > 0
            if existing and not looks_like_trace(path):
                raise ValueError(f"refusing to append to {path!r}: it is not a PBKV trace (v{TRACE_VERSION})")
            self._writer = TraceWriter(path)
        except OSError as exc:  # a startup setting error, reported like the other bad flags
            raise ValueError(f"cannot write the trace {path!r}: {exc.strerror or exc}") from None
        if existing:
            log.info("appending to the existing trace %s", path)
        self.epoch = time.time()

    def invocation(self, prep: Prepared, sub: Submission, result: Completion, t_end: float) -> None:
        """Record one finished hinted request (``t_end`` in engine seconds); no-op for anonymous ones."""
        hints = prep.hints
        if hints is None:
            return
        req = prep.engine_request
        self._writer.write(
            InvocationRecord(
                app=hints.app or UNKNOWN_APP,
                workflow_id=trace_workflow_id(hints.workflow_id, prep.incarnation),
                step=hints.step,
                agent=hints.agent,
                t_start=self.epoch + sub.submit_time,
                t_end=self.epoch + t_end,
                prompt_tokens=result.prompt_tokens,
                completion_tokens=result.completion_tokens,
                prefix_hashes=[str(b) for b in req.blocks],
                ttft_s=result.ttft_s,
                cached_tokens=result.cached_tokens,
                block_chars=prep.block_chars,
                features=list(req.features),
                block_tokens=list(req.block_tokens),
                # an SGLang session other than the workflow itself (a session that is its own
                # workflow replays as one anyway), and what the client asked of other cache managers
                session_id=req.session_id if req.session_id not in (None, hints.workflow_id) else None,
                priority=req.priority,
                cache_ttl_s=req.cache_ttl_s,
                # the client's flag for a framework-internal call (speaker selection), as in its trace
                internal=True if hints.internal else None,
                served_by=SERVED_BY_SIM,  # a scenario wrote the replies: their lengths are made up
            )
        )

    def workflow_end(self, app: str | None, workflow_id: str, t: float, status: str) -> None:
        """Record the end of a workflow at engine time ``t`` seconds."""
        self._writer.write(WorkflowEndRecord(app or UNKNOWN_APP, workflow_id, self.epoch + t, status))

    def close(self) -> None:
        """Flush and close (idempotent)."""
        self._writer.close()


def trace_workflow_id(workflow_id: str, incarnation: int) -> str:
    """The trace's id of one incarnation of a workflow id: the id itself for its first use,
    ``id~n`` for its n-th use after it ended (``~`` never occurs in a protocol id), so a replay
    treats a reused id's runs as the separate workflows they were."""
    return workflow_id if incarnation <= 1 else f"{workflow_id}~{incarnation}"
