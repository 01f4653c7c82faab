"""The reusable working set of a trace and the KV capacity it needs (used by ``pbkv-bench advise``
and by the examples' replay, ``examples/common/capacity.py``).

Only blocks that are used again can ever hit, so the working set counts reusable blocks. Let ``S``
be the tokens of prefix blocks that two or more workflows share (agent system prompts, worked
examples), ``R_w`` the tokens of the blocks that only workflow ``w`` uses, but in two or more of
its requests (its growing context, reused from one round to the next), and ``C`` the replay
concurrency. Keeping the reusable cache of every live workflow needs about
``W = S + min(C, n) * mean(R_w)`` tokens. Besides, the requests in flight need their own KV beyond
the shared blocks: each live workflow has at most one request running, so
``A = min(C, n) * mean(prompt tokens outside shared blocks)`` lets all of them run at once.
:func:`device_capacity` gives a device ``A + pressure * W`` tokens (never less than
``min_requests`` times the largest prompt).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Sequence

from pbkv_contract.trace import InvocationRecord, TraceRecord

__all__ = ["WorkingSet", "working_set", "device_capacity", "largest_request", "DEFAULT_PRESSURE", "MIN_REQUESTS"]

#: Share of the live working set W the trace rule's device keeps (the regime where eviction matters).
DEFAULT_PRESSURE = 0.5
#: The trace rule never sizes the device below this many of the largest prompt (room to batch).
MIN_REQUESTS = 4


@dataclass(frozen=True)
class WorkingSet:
    """Token footprint of a trace.

    Attributes:
        workflows: number of workflows.
        shared_tokens: ``S``, tokens of blocks used by >= 2 workflows.
        mean_private_tokens: mean ``R_w``, tokens of blocks used by one workflow only, in >= 2 of
            its requests.
        single_use_tokens: tokens of blocks used by one request only (can never hit).
        max_prompt_tokens: the largest prompt of the trace, tokens.
        total_prompt_tokens: sum of all prompts' tokens (what a cache-less server prefills).
        requests: number of invocations.
        unshared_prompt_tokens: sum over invocations of their tokens outside shared blocks.
    """

    workflows: int
    shared_tokens: int
    mean_private_tokens: float
    single_use_tokens: int
    max_prompt_tokens: int
    total_prompt_tokens: int
    requests: int
    unshared_prompt_tokens: int

    def live_tokens(self, concurrency: int) -> float:
        """``W = S + min(C, n) * mean(R_w)``: tokens to keep every live workflow's cache at concurrency C."""
        return self.shared_tokens + min(concurrency, self.workflows) * self.mean_private_tokens

    def in_flight_tokens(self, concurrency: int) -> float:
        """``A = min(C, n) * mean unshared prompt``: KV of one running request per live workflow."""
        return min(concurrency, self.workflows) * self.unshared_prompt_tokens / max(1, self.requests)


def working_set(records: Sequence[TraceRecord], by_session: bool = False) -> WorkingSet:
    """Measure the working set of a trace's invocations (block tokens as the replay charges them).

    ``by_session``: count replay units instead of workflows: a session (the invocations'
    ``session_id``: a chat conversation, a coding-agent session, whose turns are each a workflow)
    is one unit, as the replay's closed loop admits it, so its history reused from turn to turn is
    private to it rather than shared; ``workflows`` then counts units.

    Raises:
        ValueError: the records hold no invocation.
    """
    invocations = [r for r in records if isinstance(r, InvocationRecord)]
    users: dict[str, set[str]] = defaultdict(set)
    uses: dict[str, int] = defaultdict(int)
    tokens: dict[str, int] = {}
    max_prompt = total = n_requests = 0
    for rec in invocations:
        max_prompt = max(max_prompt, rec.prompt_tokens)
        total += rec.prompt_tokens
        n_requests += 1
        unit = (rec.session_id or rec.workflow_id) if by_session else rec.workflow_id
        for key, n in zip(rec.prefix_hashes, rec.tokens_per_block()):
            users[key].add(unit)
            uses[key] += 1
            tokens.setdefault(key, n)
    workflows = {w for ws in users.values() for w in ws}
    if not workflows:
        raise ValueError("the trace holds no invocation records")
    shared = sum(tokens[k] for k, ws in users.items() if len(ws) >= 2)
    private = sum(tokens[k] for k, ws in users.items() if len(ws) == 1 and uses[k] >= 2)
    single = sum(tokens[k] for k in users if uses[k] == 1)
    unshared = sum(n for rec in invocations for key, n in zip(rec.prefix_hashes, rec.tokens_per_block())
                   if len(users[key]) == 1)
    return WorkingSet(len(workflows), shared, private / len(workflows), single, max_prompt, total, n_requests, unshared)


def largest_request(records: Sequence[TraceRecord]) -> tuple[str, int]:
    """The request that needs the most KV cache, as the replay names it (``workflow#step``), and
    its need in tokens: prompt + output (at least 1 output token, as replay counts it). A device
    smaller than that cannot serve the trace under any policy (``Engine.submit`` refuses it).

    Raises:
        ValueError: the records hold no invocation.
    """
    best: tuple[str, int] | None = None
    for rec in records:
        if isinstance(rec, InvocationRecord):
            need = rec.prompt_tokens + max(1, rec.completion_tokens)
            if best is None or need > best[1]:
                best = (f"{rec.workflow_id}#{rec.step}", need)
    if best is None:
        raise ValueError("the trace holds no invocation records")
    return best


def device_capacity(ws: WorkingSet, concurrency: int, pressure: float = DEFAULT_PRESSURE,
                    min_requests: int = MIN_REQUESTS) -> int:
    """Device KV tokens for a replay: ``max(ceil(A + pressure * W), min_requests * max_prompt)``.

    Raises:
        ValueError: ``pressure`` not in (0, 1] or ``concurrency`` < 1.
    """
    if not 0 < pressure <= 1:
        raise ValueError("pressure must be in (0, 1]")
    if concurrency < 1:
        raise ValueError("concurrency must be >= 1")
    need = ws.in_flight_tokens(concurrency) + pressure * ws.live_tokens(concurrency)
    return max(math.ceil(need), min_requests * ws.max_prompt_tokens)
