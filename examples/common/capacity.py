"""The device KV capacity of a replay, derived from the trace's working set (not tuned per policy).

Rule (documented in README, "Results"): only blocks that are used again can ever hit, so the
working set counts reusable blocks. Let ``S`` be the tokens of prefix blocks that two or more
workflows share (agent system prompts, worked examples), ``R_w`` the tokens of the blocks that
only workflow ``w`` uses, but in two or more of its requests (its growing context, reused from
one round to the next), and ``C`` the replay concurrency. Keeping the reusable cache of every
live workflow needs about ``W = S + min(C, n) * mean(R_w)`` tokens. Besides, the requests in
flight need their own KV beyond the shared blocks: each live workflow has at most one request
running, so ``A = min(C, n) * mean(prompt tokens outside shared blocks)`` lets all of them run
at once. The device gets
``A + pressure * W`` tokens (default ``pressure = 0.5``: the requests run unhindered, but only
half of what the live workflows could reuse stays cached, the regime where the eviction choice
matters), and never less than ``min_requests`` times the largest prompt.
The host tier gets ``host_ratio`` times the device (SGLang HiCache's default ratio 2.0).

That rule is the ``trace`` setup of the examples. The ``paper`` setup (:func:`replay_capacity`,
the default) is the PBKV paper's: the device KV pool is what the hardware profile's GPU memory
holds after the weights (:mod:`pbkv_server.sim.profiles`), and the host tier equals it (SGLang
HiCache with ``HICACHE_RATIO=1``, the paper's baseline), at the paper's concurrency.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Sequence

from pbkv_contract.trace import InvocationRecord, TraceRecord

__all__ = ["WorkingSet", "working_set", "device_capacity", "DEFAULT_PRESSURE", "SETUPS", "DEFAULT_SETUP",
           "DEFAULT_HOST_RATIOS", "Capacity", "replay_capacity"]

DEFAULT_PRESSURE = 0.5
#: Named capacity setups of the examples' replay: the paper's and the trace-derived rule.
SETUPS = ("paper", "trace")
DEFAULT_SETUP = "paper"
#: Host tier / device of each setup when none is given: the paper's HiCache ratio 1, SGLang's default 2.
DEFAULT_HOST_RATIOS = {"paper": 1.0, "trace": 2.0}


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


def working_set(records: Sequence[TraceRecord]) -> WorkingSet:
    """Measure the working set of a trace's invocations (block tokens as the replay charges them).

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
        for key, n in zip(rec.prefix_hashes, rec.tokens_per_block()):
            users[key].add(rec.workflow_id)
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


def device_capacity(ws: WorkingSet, concurrency: int, pressure: float = DEFAULT_PRESSURE, min_requests: int = 4) -> int:
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


@dataclass(frozen=True)
class Capacity:
    """The capacities one replay of an example runs with.

    Attributes:
        setup: ``"paper"`` or ``"trace"`` (:data:`SETUPS`).
        device_tokens / host_tokens: KV capacities, tokens.
        host_ratio: host / device.
        rule: one line saying where the device size comes from (printed by the examples).
    """

    setup: str
    device_tokens: int
    host_tokens: int
    host_ratio: float
    rule: str


def replay_capacity(setup: str, ws: WorkingSet, concurrency: int, profile_device_tokens: int, profile_name: str,
                    host_ratio: float | None = None, pressure: float = DEFAULT_PRESSURE) -> Capacity:
    """Device and host capacity of a replay under a named setup.

    ``paper``: the profile's GPU-memory capacity ``profile_device_tokens``; ``trace``:
    :func:`device_capacity` of the working set. The host tier is ``host_ratio`` x device
    (default :data:`DEFAULT_HOST_RATIOS` of the setup; 0 = none).

    Raises:
        ValueError: unknown setup, negative ``host_ratio``, or a bad pressure/concurrency (trace).
    """
    if setup not in SETUPS:
        raise ValueError(f"unknown setup {setup!r}; choose from {', '.join(SETUPS)}")
    ratio = DEFAULT_HOST_RATIOS[setup] if host_ratio is None else host_ratio
    if not ratio >= 0:
        raise ValueError(f"host ratio must be >= 0, got {ratio}")
    if setup == "paper":
        device = profile_device_tokens
        rule = (f"setup paper: device = GPU memory of profile {profile_name} after the weights = {device} tok, "
                f"host tier {ratio:g}x device = {round(ratio * device)} tok")
    else:
        device = device_capacity(ws, concurrency, pressure)
        rule = (f"setup trace: device = A + {pressure:g} W = {device} tok (at least 4 x the largest prompt), "
                f"host tier {ratio:g}x device = {round(ratio * device)} tok")
    return Capacity(setup, device, round(ratio * device), ratio, rule)
