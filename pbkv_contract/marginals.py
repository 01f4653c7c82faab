"""Per-call and per-session marginals of an agent trace, measured from its records alone.

Used to check a synthetic workload against published figures (``pbkv-bench synth --graph
coding-agent``, ``docs/coding-agent-workload.md``) and to report an imported trace's own prefix
reuse (``pbkv-sdk import ghcp``). Nothing here knows how a trace was made: every figure comes from
the invocations' token counts, block hashes, block tokens and times.

Definitions (sessions: the ``session_id`` of the invocations, else the workflow; turns: workflows;
calls ordered by (start time, step) within a session):

* ``repeated_prefix_share``: sum over calls of the tokens of the leading blocks the call shares
  with the session's previous call (equal hashes, from the first block on), divided by the sum of
  all calls' prompt tokens. A session's first call repeats nothing. It is the share a cache that
  kept exactly the previous call's prefix would serve, the structural counterpart of a provider's
  ``cached`` tokens.
* ``tool_batches_per_turn``: gaps of more than 0 s between consecutive calls of a turn (a call
  followed at once by the next has no tool batch between them), per turn.
* ``tool_batch_s_mean`` / ``_median``: those gaps, seconds.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Iterable

from .trace import InvocationRecord, TraceRecord

__all__ = ["shared_prefix_tokens", "trace_marginals"]


def shared_prefix_tokens(prev: InvocationRecord, cur: InvocationRecord) -> int:
    """Tokens of ``cur``'s leading blocks whose hashes equal ``prev``'s, block by block."""
    n = 0
    tokens = cur.tokens_per_block()
    for a, b, t in zip(prev.prefix_hashes, cur.prefix_hashes, tokens):
        if a != b:
            break
        n += t
    return n


def trace_marginals(records: Iterable[TraceRecord]) -> dict[str, float]:
    """The marginals of the module docstring, plus ``calls``, ``turns`` and ``sessions`` counts.

    Raises:
        ValueError: the records hold no invocation.
    """
    sessions: dict[str, list[InvocationRecord]] = defaultdict(list)
    turns: dict[str, list[InvocationRecord]] = defaultdict(list)
    turn_session: dict[str, str] = {}
    for rec in records:
        if isinstance(rec, InvocationRecord):
            sid = rec.session_id or rec.workflow_id
            sessions[sid].append(rec)
            turns[rec.workflow_id].append(rec)
            turn_session.setdefault(rec.workflow_id, sid)
    if not turns:
        raise ValueError("the trace holds no invocation records")
    prompt = completion = shared = 0
    for calls in sessions.values():
        calls.sort(key=lambda r: (r.t_start, r.step))
        for i, rec in enumerate(calls):
            prompt += rec.prompt_tokens
            completion += rec.completion_tokens
            if i:
                shared += shared_prefix_tokens(calls[i - 1], rec)
    gaps: list[float] = []
    for calls in turns.values():
        calls.sort(key=lambda r: (r.step, r.t_start))
        gaps += [b.t_start - a.t_end for a, b in zip(calls, calls[1:]) if b.t_start - a.t_end > 0]
    n_calls = sum(len(c) for c in turns.values())
    return {
        "sessions": len(sessions),
        "turns": len(turns),
        "calls": n_calls,
        "prompt_tokens_per_call": prompt / n_calls,
        "repeated_prefix_share": shared / prompt if prompt else 0.0,
        "completion_tokens_per_call": completion / n_calls,
        "calls_per_turn": n_calls / len(turns),
        "turns_per_session": len(turns) / len(sessions),
        "tool_batches_per_turn": len(gaps) / len(turns),
        "tool_batch_s_mean": statistics.fmean(gaps) if gaps else 0.0,
        "tool_batch_s_median": statistics.median(gaps) if gaps else 0.0,
    }
