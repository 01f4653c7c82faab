"""Envelope out (opt-in): PBKV's intent for a workflow as actions of the engines' KV-hint envelope.

vLLM (``KvHintsEnvelope``, vllm-project/vllm#53423), SGLang (``KvHints``, sgl-project/sglang#38891)
and pbkv-server read a body field ``kv_hints``::

    {"protocol_version": "0.1", "message_id": "<workflow>-<step>",
     "actions": [{"action_id": ..., "action_type": "kv.retain", "action_version": "1.0", "payload": {...}}]}

With ``kv_hints`` on (``Workflow(kv_hints=True)``, ``instrument(..., kv_hints=True)`` or
``$PBKV_KV_HINTS=1``), each stamped LLM request of a workflow carries:

- ``kv.retain@1.0`` for its workflow (the trajectory runs on: keep its cache), and from its second
  request on ``kv.prefetch@1.0`` (bring its earlier cache back before this turn);
- on the request the framework marks as the workflow's last (:meth:`Workflow.mark_final`):
  ``kv.evict@1.0`` of the workflow instead, with ``execute_at: "request_completion"`` and
  ``include_current_request: true`` as vLLM's block actions expect (Dynamo's session policy
  lowers a final turn to the same action);
- ``kv.evict@1.0`` of workflows that ended without such a request (:meth:`Workflow.end`), on the
  next request to the same server: the end travels in the envelope as well as by the end route.

Payloads name the workflow as ``workflow_id`` (pbkv-server) and ``session_id`` (SGLang's target
field). Only for engines and routers that read the field: api.openai.com rejects unknown fields.
Building the envelope fails open like the rest of stamping: the request goes out without it.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

from pbkv_contract.hints import KV_HINTS_KEY

__all__ = ["ENV_KV_HINTS", "envelope_for", "queue_end", "pending_ends", "MAX_PENDING_ENDS"]

#: Environment switch of the envelope (``1``: on), read when a workflow is made
#: (:class:`pbkv_sdk.context.Workflow`, which imports it from here).
ENV_KV_HINTS = "PBKV_KV_HINTS"
#: Ended workflows waiting for a request to carry their evict (oldest dropped beyond).
MAX_PENDING_ENDS = 256
#: Queued ends attached to one request at most.
MAX_ENDS_PER_REQUEST = 16
PROTOCOL_VERSION = "0.1"
ACTION_VERSION = "1.0"

_lock = threading.Lock()
_pending: deque[tuple[str | None, str]] = deque(maxlen=MAX_PENDING_ENDS)


def queue_end(origin: str | None, workflow_id: str) -> None:
    """Queue ``workflow_id``'s evict for the next request to ``origin`` (``scheme://host:port``)."""
    with _lock:
        _pending.append((origin, workflow_id))


def pending_ends() -> list[tuple[str | None, str]]:
    """The queued ``(origin, workflow_id)`` ends (a copy; tests and diagnostics)."""
    with _lock:
        return list(_pending)


def _take_ends(origin: str, own: str) -> list[str]:
    with _lock:
        taken, kept = [], []
        for item in _pending:
            if (item[0] in (None, origin)) and item[1] != own and len(taken) < MAX_ENDS_PER_REQUEST:
                taken.append(item[1])
            else:
                kept.append(item)
        _pending.clear()
        _pending.extend(kept)
    return taken


def _action(action_id: str, action_type: str, workflow_id: str, **payload: Any) -> dict[str, Any]:
    return {"action_id": action_id, "action_type": action_type, "action_version": ACTION_VERSION,
            "payload": {"workflow_id": workflow_id, "session_id": workflow_id, **payload}}


def _evict(action_id: str, workflow_id: str, current: bool) -> dict[str, Any]:
    return _action(action_id, "kv.evict", workflow_id, execute_at="request_completion",
                   include_current_request=current, block_hashes=[])


def envelope_for(workflow_id: str, step: int, origin: str, final: bool) -> dict[str, Any]:
    """The envelope of request ``step`` of ``workflow_id`` to ``origin`` (queued ends taken).

    Args:
        final: the framework marked this request as the workflow's last.
    """
    mid = f"{workflow_id}-{step}"
    if final:
        actions = [_evict(f"{mid}-end", workflow_id, True)]
    else:
        actions = [_action(f"{mid}-retain", "kv.retain", workflow_id)]
        if step > 0:
            actions.append(_action(f"{mid}-prefetch", "kv.prefetch", workflow_id))
    for i, ended in enumerate(_take_ends(origin, workflow_id)):
        actions.append(_evict(f"{mid}-ended-{i}", ended, False))
    return {"protocol_version": PROTOCOL_VERSION, "message_id": mid, "actions": actions}


def add_to_body(data: dict[str, Any], envelope: dict[str, Any], custom_params: bool) -> None:
    """Put ``envelope`` in a decoded JSON body: ``kv_hints`` (an envelope the app set itself is
    kept), and with ``custom_params`` also ``custom_params.kv_hints`` (SGLang's OpenAI routes
    carry no ``kv_hints`` field; the PBKV plugin reads it there)."""
    data.setdefault(KV_HINTS_KEY, envelope)
    if custom_params:
        custom = data.get("custom_params")
        custom = dict(custom) if isinstance(custom, dict) else {}
        custom.setdefault(KV_HINTS_KEY, data[KV_HINTS_KEY])
        data["custom_params"] = custom
