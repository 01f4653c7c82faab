"""Scheduler hooks that tell the PBKV cache when a request arrives and when it is admitted.

SGLang's cache sees a request only when the scheduler matches or inserts its prompt, but a policy
with lifecycle hooks (``pbkv``: a waiting request's cache ranks above other active cache) needs
the two moments the embedded engine reports (:mod:`pbkv_server.backends.lifecycle`):

- arrival: :func:`request_queued`, an AFTER hook of ``Scheduler._add_request_to_queue``: a
  request put in the waiting queue (not one retracted back into it, nor one aborted on the way)
  makes its invocation now;
- admission: :func:`requests_admitted`, an AFTER hook of ``Scheduler.get_new_batch_prefill``:
  every request of the new prefill batch is admitted (a chunked request continuing, or one
  re-admitted after retraction, was admitted before and is not reported again).

Both never raise: bookkeeping must not break the scheduler loop.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

__all__ = ["request_queued", "requests_admitted"]


def request_queued(result: Any, scheduler: Any, req: Any = None, is_retracted: bool = False, *args: Any,
                   **kwargs: Any) -> None:
    """AFTER hook of ``Scheduler._add_request_to_queue(req, is_retracted)``: the request's arrival."""
    try:
        from .cache import PBKVRadixCache

        req = req if req is not None else kwargs.get("req")
        is_retracted = is_retracted or bool(kwargs.get("is_retracted", False))
        cache = getattr(scheduler, "tree_cache", None)
        if req is None or is_retracted or not isinstance(cache, PBKVRadixCache):
            return None
        finished = getattr(req, "finished", None)
        if callable(finished) and finished():  # aborted on the way in (queue limit, priority)
            return None
        cache.request_arrived(req)
    except Exception:
        log.debug("PBKV: request arrival not recorded", exc_info=True)
    return None


def requests_admitted(plan: Any, scheduler: Any, *args: Any, **kwargs: Any) -> None:
    """AFTER hook of ``Scheduler.get_new_batch_prefill``: the new prefill batch's requests were admitted."""
    try:
        from .cache import PBKVRadixCache

        cache = getattr(scheduler, "tree_cache", None)
        batch = getattr(plan, "batch_to_run", None)
        if batch is None or not isinstance(cache, PBKVRadixCache):
            return None
        for req in getattr(batch, "reqs", None) or ():
            cache.request_admitted(req)
    except Exception:
        log.debug("PBKV: request admission not recorded", exc_info=True)
    return None
