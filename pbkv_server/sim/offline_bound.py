"""A sound upper bound on what a two-tier, demand-loading cache can save, at concurrency 1.

``opt`` (MIN on both tiers) is the best *device-hit* policy without prefetch on its own order; it
is no bound on host hits, prefill saved or latency (``docs/design/offline-reference.md``). This
module computes, for a workload replayed one request at a time (concurrency 1: the request order
is the trace's for every policy), the bounds that do hold:

* **device hits** <= MIN on a device of ``D`` tokens (no host): a policy without prefetch brings
  a unit to the device only when a request uses it (loading from the host included), so its device
  is a demand-paged cache of ``D`` tokens and Belady's MIN bounds it;
* **device + host hits** <= MIN on one tier of ``D + H`` tokens: the union of both tiers only
  grows when a request uses a unit (a prefetch moves a unit between tiers, it adds none), and it
  holds at most ``D + H`` tokens less the running request's reservation, which is exactly what a
  single device of ``D + H`` tokens holds; this one holds for prefetching policies too;
* **prefill saved** = device hits + v x host hits = v x (device + host) + (1 - v) x device
  <= v x the second bound + (1 - v) x the first (v = ``host_value`` of the profile, in [0, 1]);
  for a prefetching policy, <= the second bound.

Both replays are ``opt`` at concurrency 1. The bounds are exact with units of equal size (pages,
or a trace whose blocks all hold the same tokens), where MIN is optimal; with blocks of unequal
size MIN is a close bound, not a proven one (:mod:`~pbkv_server.engine.policies.opt`). Speculative
prefill computes KV no request has asked for yet, so it is outside the "demand" premise.
At concurrency above 1 the order depends on the policy, and no hit count bounds latency.
"""

from __future__ import annotations

from dataclasses import dataclass

from pbkv_server.engine import HardwareProfile
from pbkv_server.engine.guard import host_value
from pbkv_server.engine.policies import REFERENCE_POLICY
from pbkv_server.sim.simulator import ReplayConfig, ReplayOptions, Workload, simulate

__all__ = ["DemandBound", "demand_bound"]


@dataclass(frozen=True, slots=True)
class DemandBound:
    """Upper bounds, as shares of prompt tokens, for every demand-loading policy at concurrency 1.

    Attributes:
        device_hit_rate: bound on device hits (policies without prefetch).
        cached_hit_rate: bound on device + host hits (every policy without speculative prefill).
        prefill_saved: bound on ``hit_rate + value_of_host_hit x host_hit_rate`` (without prefetch).
        value_of_host_hit: v used, from :func:`~pbkv_server.engine.guard.host_value`.
    """

    device_hit_rate: float
    cached_hit_rate: float
    prefill_saved: float
    value_of_host_hit: float


def demand_bound(workload: Workload, profile: HardwareProfile, device_tokens: int, host_tokens: int,
                 page_size: int | None = None) -> DemandBound:
    """The bounds of the module docstring for ``workload`` on ``device_tokens`` + ``host_tokens``.

    Raises:
        ValueError / SimulationError: as :func:`~pbkv_server.sim.simulator.simulate`.
    """
    device = simulate(workload, ReplayConfig(REFERENCE_POLICY, profile, device_tokens=device_tokens, host_tokens=0,
                                             page_size=page_size),
                      ReplayOptions(concurrency=1)).summary["hit_rate"]
    union = simulate(workload, ReplayConfig(REFERENCE_POLICY, profile, device_tokens=device_tokens + host_tokens,
                                            host_tokens=0, page_size=page_size),
                     ReplayOptions(concurrency=1)).summary["hit_rate"]
    v = host_value(profile)
    return DemandBound(device, union, v * union + (1 - v) * device, v)
