"""Hybrid offline references: ``opt``'s MIN order on one tier only, or on its order's first guess.

``opt`` ranks both tiers by MIN (farthest next use of a node's last unit first): the device in
:meth:`~pbkv_server.engine.policies.base.Policy.priority`, the host through the default
:meth:`~pbkv_server.engine.policies.base.Policy.host_priority`. These references swap one part
for LRU's rule, so that a replay can split opt's gain over ``lru`` into its parts
(``docs/design/offline-reference.md``; ``scripts/decompose_opt.py``):

- ``opt-device``: MIN on the device, LRU on the host: what the device order alone gives;
- ``opt-host``: LRU on the device (whole tails, as ``lru``), MIN on the host: what the order in
  which the host drops its leaves alone gives;
- ``opt-ref``: ``opt`` on both tiers, but with the future in the order of a timing-only replay of
  the trace (recorded durations and gaps, no cache effects) and no iteration to its own order:
  what knowing the exact order and timing of the replay's own future adds over an order that
  the recorded timings predict.

All are replay only (they need ``EngineConfig.future``) and none reorders the queue: in this
simulator a policy changes the submission order only through the timing its hits cause.
"""

from __future__ import annotations

from .base import register_policy
from .opt import OptimalPolicy


@register_policy("opt-device")
class OptDevicePolicy(OptimalPolicy):
    """MIN on the device tier (as ``opt``), LRU on the host tier: isolates the device order."""

    summary = "offline: MIN on the device, LRU on the host (opt's device order alone)"

    def host_priority(self, node) -> tuple:
        """``(last_access,)``, as ``lru`` drops host leaves."""
        return (node.last_access,)

    def host_priority_at(self, node, units: int) -> tuple:
        """The units of a node rank alike on the host (LRU)."""
        return self.host_priority(node)


@register_policy("opt-host")
class OptHostPolicy(OptimalPolicy):
    """LRU on the device tier (whole tails, as ``lru``), MIN on the host tier: isolates the host order."""

    summary = "offline: LRU on the device, MIN on the host (opt's host order alone)"
    unit_priority = False  # the device is LRU's: all units of a node rank alike

    def priority(self, node) -> tuple:
        """``(last_access,)``, as ``lru`` evicts device leaves."""
        return (node.last_access,)

    def priority_at(self, node, units: int) -> tuple:
        """The units of a node rank alike on the device (LRU)."""
        return self.priority(node)

    def host_priority(self, node) -> tuple:
        """``opt``'s MIN key on the host tier."""
        return OptimalPolicy.priority(self, node)


@register_policy("opt-ref")
class OptReferenceOrderPolicy(OptimalPolicy):
    """``opt`` on both tiers with the timing-only reference order and no iteration: isolates what
    the exact order of the replay's own future adds."""

    summary = "offline: opt with the timing-only reference order (no iteration to its own order)"
    iterates_order = False


#: The hybrids by the part of ``opt`` they isolate (``scripts/decompose_opt.py`` reads them here,
#: so no policy name is spelled outside the registry).
ISOLATES = {"device order": OptDevicePolicy.name, "host order": OptHostPolicy.name,
            "own order": OptReferenceOrderPolicy.name}
