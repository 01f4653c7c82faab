"""What pbkv-server does with a request's KV-hint envelope (``kv_hints``; parsed by
:func:`pbkv_contract.hints.parse_kv_hints`, the one parser of the envelope).

Each understood action targets a workflow (``payload.workflow_id`` / ``payload.session_id``, else
the request's own) and maps onto a mechanism the engine core already has:

==========================  ==============================================================
action                      effect
==========================  ==============================================================
retain / pin (own)          the request's ``priority`` (``payload.priority``) and cache TTL
                            (``payload.ttl_seconds``, else 300 s, at most 3600 s): the pin
                            and priority hints the ``ttl-pin`` and ``sglang-priority``
                            policies read, as if sent as ``priority`` / ``nvext.cache_control``;
                            a value the request sent itself wins
retain / pin (other)        the workflow's idle clock restarts (``Engine.keep_workflow``, the
                            ``WorkflowTable.keep`` the vLLM and SGLang backends apply): a
                            trajectory in a long tool call is not retired by the idle sweep;
                            ``no_effect`` when it is not active (a hint never starts one)
demote / evict / deref      the workflow is retired, as ``POST .../workflows/{id}/end`` does;
                            the request's own workflow only after the request finished (its
                            final turn), another one before the request is queued
fetch / prefetch            the workflow's host-tier cache is loaded back to the device, as
                            far as free device room goes (``Engine.prefetch_workflow``); of
                            another workflow, its idle clock restarts first, as a retain's
==========================  ==============================================================

An action with no workflow to act on (an anonymous request's own) is ``no_effect``; unknown
types and versions are ``ignored``. Every action is counted in ``pbkv_kv_hint_actions_total``
(labels ``action``, ``outcome``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from pbkv_contract.hints import KvHintAction, KvHintEnvelope

__all__ = ["KvPlan", "plan_kv_hints", "RETAIN_TTL_DEFAULT_S", "RETAIN_TTL_MAX_S"]

#: Pin TTL of a retain without ``ttl_seconds`` and the longest one taken, seconds (Dynamo's
#: ``cache_control`` default and upper bound, the other pin hint the server reads).
RETAIN_TTL_DEFAULT_S = 300.0
RETAIN_TTL_MAX_S = 3600.0


@dataclass(slots=True)
class KvPlan:
    """The envelope's effects on one request.

    Attributes:
        priority: request priority from a retain, or ``None``.
        cache_ttl_s: pin TTL from a retain, seconds, or ``None``.
        now: ``(kind, workflow_id, keep)`` to apply when the request is submitted (ends of
            other workflows, fetches, retains of other workflows), in the order sent; ``keep``:
            the workflow's idle clock restarts (:meth:`~pbkv_contract.hints.KvHintAction.keeps`).
        end_after: ``(kind, workflow_id)``: the request's own workflow, to retire once the request
            finished (``kind``: the demote or evict that asked, for the count).
        counted: ``(action, outcome)`` pairs already decided (retains of the request's own
            workflow, no-effect actions, ignored ones as ``("unknown", "ignored")``).
    """

    priority: int | None = None
    cache_ttl_s: float | None = None
    now: list[tuple[str, str, bool]] = field(default_factory=list)
    end_after: tuple[str, str] | None = None
    counted: list[tuple[str, str]] = field(default_factory=list)

    @property
    def taken(self) -> bool:
        """Whether any action will act (a retain, an end, a fetch)."""
        return bool(self.now or self.end_after or ("retain", "applied") in self.counted)


def plan_kv_hints(envelope: KvHintEnvelope, own: str | None) -> KvPlan:
    """Plan ``envelope``'s actions for a request of workflow ``own`` (``None``: anonymous)."""
    out = KvPlan(counted=[("unknown", "ignored")] * envelope.ignored)
    for action in envelope.actions:
        target = action.target(own)
        if target is None:
            out.counted.append((action.kind, "no_effect"))
        elif action.kind == "retain" and target == own:
            _retain(out, action)
            out.counted.append(("retain", "applied"))
        elif action.after_request(own):
            out.end_after = (action.kind, own)
        else:  # an end of another workflow, a fetch, a retain of another workflow
            out.now.append((action.kind, target, action.keeps(own) is not None))
    return out


def _retain(out: KvPlan, action: KvHintAction) -> None:
    payload = action.payload
    priority = payload.get("priority")
    if isinstance(priority, int) and not isinstance(priority, bool) and out.priority is None:
        out.priority = priority
    ttl: Any = payload.get("ttl_seconds", payload.get("ttl_s"))
    ok = isinstance(ttl, (int, float)) and not isinstance(ttl, bool) and math.isfinite(ttl) and ttl > 0
    if out.cache_ttl_s is None:
        out.cache_ttl_s = min(RETAIN_TTL_MAX_S, float(ttl)) if ok else RETAIN_TTL_DEFAULT_S
