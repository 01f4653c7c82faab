"""What a prefetching policy hands the engine: a plan of what to load, never the loading itself.

A policy with the :class:`~pbkv_server.engine.policies.base.Prefetching` capability answers
``prefetch_plan(seconds)`` for a decode-only stretch of ``seconds`` with one of these (or
``None``: nothing this stretch); the engine core runs it (:func:`pbkv_server.engine.prefetch.run_plan`)
within the stretch's PCIe budget, evicting only what the plan allows. Policies rank and value
nodes; the cache moves them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable

#: A node of the engine that runs the plan (a :class:`~.base.NodeView`; named loosely here so that
#: the plan types import nothing of the policy interface, which names them).
NodeView = Any

__all__ = ["HeapPlan", "ChainPlan", "PrefetchPlan", "VictimLimit"]

#: ``limit(victim, tokens) -> bool``: may ``tokens`` of device node ``victim`` be evicted to make
#: room for a load (asked in eviction order; the first refusal ends that eviction).
VictimLimit = Callable[[NodeView, int], bool]


def _never(node: NodeView) -> bool:
    return False


@dataclass(frozen=True, slots=True)
class HeapPlan:
    """Load host nodes best first by the policy's ``prefetch_value`` (PBKV section 4).

    Room is free device space plus retired cache and the condemned rest of victims (the
    conservative rule); with ``displace_tokens`` > 0, also active cache of a lower score than the
    candidate's, up to that many tokens this round (the aggressive rule).

    Attributes:
        displace_tokens: most tokens of active cache this round may evict (0: conservative).
        protected: active nodes that must not be displaced (the policy's own recent prefetches).
        on_load: called with each node loaded, or ``None``.
        on_done: called with the tokens of active cache the round displaced, or ``None``.
    """

    displace_tokens: int = 0
    protected: Callable[[NodeView], bool] = _never
    on_load: Callable[[NodeView], None] | None = None
    on_done: Callable[[int], None] | None = None


@dataclass(frozen=True, slots=True)
class ChainPlan:
    """Load, for each target in order, the host part of the path above it (root side first).

    Attributes:
        targets: ``(node, limit)`` pairs, read lazily in order while the round runs; ``node`` may
            be ``None`` (nothing to load). ``limit`` says which device victims a load for this
            target may evict (``None``: none).
        evicts: ``False``: loads use free device room only, within ``min(PCIe budget, free
            room)``, and a load that does not fit ends its target's path (``kvflow``).
            ``True``: loads may evict what the target's ``limit`` allows, within the PCIe budget,
            and the first load that does not fit ends the round (``kvflow-shipped``).
    """

    targets: Iterable[tuple[NodeView | None, VictimLimit | None]]
    evicts: bool = False


#: A prefetch plan.
PrefetchPlan = HeapPlan | ChainPlan
