"""``opt``: the exact offline bound on device hit rate (MIN, Belady 1966, on the engine's own units).

Evict the cache unit whose next use is farthest in the future. With units of equal size (pages)
and demand loading this is optimal (Belady's MIN): no policy that only brings cache to the device
when a request uses it (every policy without prefetch) gets more device hits on the same request
order. Two details make it exact here:

- next use is that of the node's *last* unit, the one a (page-granular) eviction frees first: a
  request that uses a unit uses every unit before it, so next use never decreases along a path,
  the last unit of a node is its farthest, and the farthest unit of the whole device sits in a
  leaf, where eviction can take it; eviction takes one unit at a time (``unit_priority``), so
  the rest of the node is ranked again by its new last unit (the cache takes a run of units that
  would go in a row at once, with the same outcome: ``engine/eviction.py``, ``_evict_run`` and
  ``_pass_run``);
- "the future" is the order in which *this* replay submits requests: the simulator replays with
  the future of its previous run until the submission order stops changing
  (:func:`pbkv_server.sim.simulator.simulate`), so the bound is MIN over the replay's own order
  (at concurrency 1 the order is the trace's, and one run suffices).

With units of unequal size (block granularity, blocks of different token counts) MIN is a close
bound, not a proven one. Needs ``EngineConfig.future`` keyed by unit keys; replay only.

What it does not bound (``docs/design/offline-reference.md``): the host tier drops its leaves in
the same MIN order (:meth:`~pbkv_server.engine.policies.base.Policy.host_priority`), but a demoted
victim always enters the host, so device + host hits and prefill saved are not maximal; a
prefetching policy may get more device hits; and latency, which also depends on batching and on
the order the replay's own timing makes, has no bound here (latency capture may exceed 1).
:func:`pbkv_server.sim.offline_bound.demand_bound` gives the sound hit and prefill-saved bounds.
"""

from __future__ import annotations

import math

from .base import Policy, register_policy


@register_policy("opt")
class OptimalPolicy(Policy):
    """Priority ``(-next use of the node's last unit, last_access)``: never-used-again units first.

    Raises:
        ValueError: at construction, when ``config.future`` is missing.
    """

    summary = ("offline reference: MIN on both tiers over the replay's own order; bounds device hits "
               "without prefetch, not host hits or latency")
    offline = True
    iterates_order = True
    unit_priority = True

    def __init__(self, context) -> None:
        super().__init__(context)
        if context.future is None:
            raise ValueError("policy 'opt' needs EngineConfig.future (a FutureOracle; simulator only)")
        self.future = context.future
        self._now = -1
        self._next_use: dict = {}  # node -> next use of its last unit
        # an oracle that tells the admitted request's position (TraceFuture.serve) lets on_admit
        # skip the nodes whose next use was another request's: theirs is unchanged
        self._serve = getattr(self.future, "serve", None)

    def priority(self, node) -> tuple:
        """See class docstring."""
        return (-self._next_use.get(node, math.inf), node.last_access)

    def priority_at(self, node, units: int) -> tuple:
        """The priority of ``node``'s first ``units`` units: the next use of its unit ``units``."""
        return (-self.future.next_use(node.keys[units - 1], self._now), node.last_access)

    def host_priority_at(self, node, units: int) -> tuple:
        """The host tier ranks as the device (:meth:`priority_at`)."""
        return self.priority_at(node, units)

    def on_admit(self, admission, path) -> None:
        """The admitted request used every node of its path: recompute their next uses.

        A node's next use moves only when the request it named is served: users are only ever
        consumed, and the one it named (a request holding the node's last unit, so one whose
        path holds the node) has it recomputed here when admitted. So with an oracle that says
        which position is served now, the nodes whose next use was another position keep it."""
        self._now = index = admission.index
        if not path:
            return
        next_use, future = self._next_use, self.future
        served = self._serve(index) if self._serve is not None else None
        for node in path:
            old = next_use.get(node)
            if served is None or old is None or old == served:
                next_use[node] = future.next_use(node.keys[-1], index)

    def on_split(self, top, bottom) -> None:
        """``bottom`` keeps the old last unit (and its next use); ``top`` ends at a new one."""
        self._next_use[top] = self.future.next_use(top.keys[-1], self._now)

    def on_drop(self, node) -> None:
        """Forget the node."""
        self._next_use.pop(node, None)
