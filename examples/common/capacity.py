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
holds after the weights (:mod:`pbkv_server.hardware.profiles`), and the host tier equals it (SGLang
HiCache with ``HICACHE_RATIO=1``, the paper's baseline), at the paper's concurrency.
"""

from __future__ import annotations

from dataclasses import dataclass

# The working-set measure lives with the simulator (pbkv-bench advise uses it too); re-exported here.
from pbkv_server.sim.capacity import DEFAULT_PRESSURE, MIN_REQUESTS, WorkingSet, device_capacity, working_set
from pbkv_server.hardware.profiles import HICACHE_RATIO

__all__ = ["WorkingSet", "working_set", "device_capacity", "DEFAULT_PRESSURE", "SETUPS", "DEFAULT_SETUP",
           "DEFAULT_HOST_RATIOS", "Capacity", "replay_capacity"]

#: Named capacity setups of the examples' replay: the paper's and the trace-derived rule.
SETUPS = ("paper", "trace")
DEFAULT_SETUP = "paper"
#: Host tier / device of each setup when none is given: the paper's HiCache ratio 1, SGLang's default 2.
DEFAULT_HOST_RATIOS = {"paper": 1.0, "trace": HICACHE_RATIO}


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
        rule = (f"setup trace: device = A + {pressure:g} W = {device} tok (at least {MIN_REQUESTS} x the largest prompt), "
                f"host tier {ratio:g}x device = {round(ratio * device)} tok")
    return Capacity(setup, device, round(ratio * device), ratio, rule)
