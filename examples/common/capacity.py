"""The device KV capacity of a replay, derived from the trace's working set (not tuned per policy).

Rule (documented in README, "Results"): let ``S`` be the tokens of prefix blocks that two or more
workflows share (agent system prompts, worked examples), ``F_w`` the tokens of the blocks only
workflow ``w`` uses (its growing context, over its whole life), and ``C`` the replay concurrency.
Keeping every live workflow's cache needs about ``W = S + min(C, n) * mean(F_w)`` tokens. The
device gets ``pressure * W`` tokens (default ``pressure = 0.5``: half of what the live workflows
could reuse, the regime where the eviction choice matters), but never less than
``min_requests`` of the largest prompt, so the largest requests can still be admitted together.
The host tier gets ``host_ratio`` times the device (SGLang HiCache's default ratio 2.0).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable

from pbkv_sdk.trace import InvocationRecord, TraceRecord

__all__ = ["WorkingSet", "working_set", "device_capacity", "DEFAULT_PRESSURE"]

DEFAULT_PRESSURE = 0.5


@dataclass(frozen=True)
class WorkingSet:
    """Token footprint of a trace.

    Attributes:
        workflows: number of workflows.
        shared_tokens: ``S``, tokens of blocks used by >= 2 workflows.
        mean_private_tokens: mean ``F_w``, tokens of blocks used by one workflow only.
        max_prompt_tokens: the largest prompt of the trace, tokens.
        total_prompt_tokens: sum of all prompts' tokens (what a cache-less server prefills).
    """

    workflows: int
    shared_tokens: int
    mean_private_tokens: float
    max_prompt_tokens: int
    total_prompt_tokens: int

    def live_tokens(self, concurrency: int) -> float:
        """``W = S + min(C, n) * mean(F_w)``: tokens to keep every live workflow's cache at concurrency C."""
        return self.shared_tokens + min(concurrency, self.workflows) * self.mean_private_tokens


def working_set(records: Iterable[TraceRecord]) -> WorkingSet:
    """Measure the working set of a trace's invocations (block tokens as the replay charges them).

    Raises:
        ValueError: the records hold no invocation.
    """
    users: dict[str, set[str]] = defaultdict(set)
    tokens: dict[str, int] = {}
    max_prompt = total = 0
    for rec in records:
        if not isinstance(rec, InvocationRecord):
            continue
        max_prompt = max(max_prompt, rec.prompt_tokens)
        total += rec.prompt_tokens
        for key, n in zip(rec.prefix_hashes, rec.tokens_per_block()):
            users[key].add(rec.workflow_id)
            tokens.setdefault(key, n)
    workflows = {w for ws in users.values() for w in ws}
    if not workflows:
        raise ValueError("the trace holds no invocation records")
    shared = sum(tokens[k] for k, ws in users.items() if len(ws) >= 2)
    private = sum(tokens[k] for k, ws in users.items() if len(ws) == 1)
    return WorkingSet(len(workflows), shared, private / len(workflows), max_prompt, total)


def device_capacity(ws: WorkingSet, concurrency: int, pressure: float = DEFAULT_PRESSURE, min_requests: int = 4) -> int:
    """Device KV tokens for a replay: ``max(ceil(pressure * W), min_requests * max_prompt)``.

    Raises:
        ValueError: ``pressure`` not in (0, 1] or ``concurrency`` < 1.
    """
    if not 0 < pressure <= 1:
        raise ValueError("pressure must be in (0, 1]")
    if concurrency < 1:
        raise ValueError("concurrency must be >= 1")
    return max(math.ceil(pressure * ws.live_tokens(concurrency)), min_requests * ws.max_prompt_tokens)
