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
field).

Only to servers that advertise the actions (api.openai.com rejects unknown fields): pbkv-server,
the vLLM backend and the SGLang plugin send ``X-PBKV-KV-Hints`` on every answer and answer
``GET /pbkv/v1/kv_hints`` (:mod:`pbkv_contract.kv_hint_caps`). The SDK learns each origin's
advertisement once, from its first answer below 500 (:func:`learn`; header absent: nothing
advertised), or up front with :func:`discover`. Until then, and for an origin that advertises
nothing, requests go without the envelope; an action the origin does not advertise is left out
(a final request whose ``kv.evict`` is left out leaves the end to the end route). Building the
envelope fails open like the rest of stamping: the request goes out without it.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

from pbkv_contract.hints import KV_HINTS_KEY
from pbkv_contract.kv_hint_caps import HEADER_KV_HINTS, KV_HINTS_PATH, Advertised, parse_advertisement

__all__ = ["ENV_KV_HINTS", "envelope_for", "queue_end", "pending_ends", "MAX_PENDING_ENDS", "advertised",
           "learn", "discover", "reset", "MAX_ORIGINS"]

#: Environment switch of the envelope (``1``: on), read when a workflow is made
#: (:class:`pbkv_sdk.context.Workflow`, which imports it from here).
ENV_KV_HINTS = "PBKV_KV_HINTS"
#: Ended workflows waiting for a request to carry their evict (oldest dropped beyond).
MAX_PENDING_ENDS = 256
#: Queued ends attached to one request at most.
MAX_ENDS_PER_REQUEST = 16
PROTOCOL_VERSION = "0.1"
ACTION_VERSION = "1.0"

#: Origins whose advertisement is remembered (a process talks to a few; more are forgotten oldest first).
MAX_ORIGINS = 256

_lock = threading.Lock()
_pending: deque[tuple[str | None, str]] = deque(maxlen=MAX_PENDING_ENDS)
_origins: dict[str, Advertised] = {}  # insertion-ordered: oldest first


def advertised(origin: str) -> Advertised | None:
    """What ``origin`` (``scheme://host:port``) advertises, or ``None`` while not learned yet."""
    return _origins.get(origin)


def learn(origin: str, header: str | None, status: int) -> Advertised | None:
    """Learn ``origin``'s advertisement from an answer's ``X-PBKV-KV-Hints`` value ``header``
    (``None``: absent) and HTTP ``status``. Only the first answer below 500 teaches (a 5xx may
    come from a proxy while the server starts); later calls return what was learned. Never raises.

    Returns:
        The origin's advertisement, or ``None`` if still not learned.
    """
    known = _origins.get(origin)
    if known is not None or status >= 500:
        return known
    return _remember(origin, parse_advertisement(header))


def discover(url: str, timeout_s: float = 2.0) -> Advertised:
    """Learn what the server at ``url`` advertises now, with ``GET /pbkv/v1/kv_hints`` (so that
    even its first request carries the envelope). Fails open: an error, a status other than 200
    or a body without ``advertisement`` means nothing advertised; a 5xx or a network error is
    not remembered (the next answer teaches). Never raises.

    Args:
        url: any URL of the server (its origin is used).
        timeout_s: seconds for the whole request.
    """
    import httpx

    try:
        parsed = httpx.URL(url)
        origin = f"{parsed.scheme}://{parsed.netloc.decode('ascii')}"
        response = httpx.get(origin + KV_HINTS_PATH, timeout=timeout_s)
    except Exception:
        return Advertised((), ())
    if response.status_code >= 500:
        return Advertised((), ())
    value = None
    if response.status_code == 200:
        try:
            body = response.json()
            value = body.get("advertisement") if isinstance(body, dict) else None
        except ValueError:
            value = None
        value = value or response.headers.get(HEADER_KV_HINTS)
    with _lock:
        _origins.pop(origin, None)  # an explicit look-up replaces what an answer taught
    return _remember(origin, parse_advertisement(value))


def reset() -> None:
    """Forget every learned advertisement and queued end (tests; servers upgraded in place)."""
    with _lock:
        _origins.clear()
        _pending.clear()


def _remember(origin: str, caps: Advertised) -> Advertised:
    with _lock:
        caps = _origins.setdefault(origin, caps)  # two answers racing: the first one wins
        while len(_origins) > MAX_ORIGINS:
            _origins.pop(next(iter(_origins)))
    return caps


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


def envelope_for(workflow_id: str, step: int, origin: str, final: bool,
                 caps: Advertised) -> tuple[dict[str, Any] | None, bool]:
    """The envelope of request ``step`` of ``workflow_id`` to ``origin``, with only the actions
    ``caps`` (the origin's advertisement) reads; queued ends are taken only when it reads
    ``kv.evict``.

    Args:
        final: the framework marked this request as the workflow's last.

    Returns:
        ``(envelope or None when no action is left, whether it carries the workflow's own end)``.
    """
    if not caps.reads_protocol(PROTOCOL_VERSION):
        return None, False
    mid = f"{workflow_id}-{step}"
    evicts = caps.reads("kv.evict", ACTION_VERSION)
    if final:
        actions = [_evict(f"{mid}-end", workflow_id, True)] if evicts else []
    else:
        actions = [_action(f"{mid}-retain", "kv.retain", workflow_id)]
        if step > 0:
            actions.append(_action(f"{mid}-prefetch", "kv.prefetch", workflow_id))
        actions = [a for a in actions if caps.reads(a["action_type"], ACTION_VERSION)]
    if evicts:
        for i, ended in enumerate(_take_ends(origin, workflow_id)):
            actions.append(_evict(f"{mid}-ended-{i}", ended, False))
    if not actions:
        return None, False
    return {"protocol_version": PROTOCOL_VERSION, "message_id": mid, "actions": actions}, final and evicts


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
