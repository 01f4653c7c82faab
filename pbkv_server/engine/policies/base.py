"""Policy interface and name registry (style of SGLang's ``evict_policy.py``: one small class per rule).

A policy orders evictable nodes: :meth:`Policy.priority` returns a tuple, and the node with the
lowest tuple leaves first. The engine keeps one lazy heap per tier keyed by these tuples and asks
for a node's priority again whenever something it depends on changes (access, score, retirement),
so a priority must depend only on the node's state and on state the policy reports through
``engine.refresh(node)``. Hooks default to doing nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Sequence

if TYPE_CHECKING:
    from ..engine import Engine, Workflow, _Request
    from ..radix import Node

__all__ = ["Policy", "register_policy", "available_policies", "make_policy"]

_REGISTRY: dict[str, Callable[["Engine"], "Policy"]] = {}


def register_policy(name: str) -> Callable[[type], type]:
    """Class decorator: make the policy constructible by ``name`` in :func:`make_policy`."""

    def deco(cls: type) -> type:
        _REGISTRY[name] = cls
        cls.name = name
        return cls

    return deco


def available_policies() -> list[str]:
    """Names of all registered policies, in registration order."""
    return list(_REGISTRY)


def make_policy(name: str, engine: "Engine") -> "Policy":
    """Instantiate policy ``name`` for ``engine``.

    ``engine`` may be ``None`` when only :meth:`Policy.priority` is needed (the SGLang plugin
    orders its own tree nodes with it); ``belady`` and the prefetching/graph hooks need an engine.

    Raises:
        ValueError: unknown name (the message lists the known ones).
    """
    try:
        cls = _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; available: {', '.join(_REGISTRY)}") from None
    return cls(engine)


class Policy:
    """Eviction (and optionally prefetch) rule. Lower :meth:`priority` = evicted first.

    Attributes:
        name: registry name.
        uses_predictions: the engine calls the predictor and maintains scores only if True.
        prefetches: the engine calls :meth:`prefetch` on decode-only steps only if True.
    """

    name = "base"
    uses_predictions = False
    prefetches = False

    def __init__(self, engine: "Engine") -> None:
        self.engine = engine

    def priority(self, node: "Node") -> tuple:
        """Sort key of an evictable node; the smallest leaves first (device and host tiers)."""
        raise NotImplementedError

    def is_retired(self, node: "Node") -> bool:
        """True if all workflows that touched the node have ended (anonymous-only nodes: False)."""
        sc = node.sc
        return sc is not None and sc.n_ever > 0 and not sc.access

    def prefetch_value(self, node: "Node") -> float:
        """Value of loading host node ``node`` to the device; <= 0 means never prefetch it."""
        return 0.0

    def prefetch(self, seconds: float) -> None:
        """Prefetch during a decode-only stretch of ``seconds`` engine time (PCIe is otherwise idle)."""

    # ----------------------------------------------------------------- hooks
    def on_admit(self, req: "_Request", path: Sequence["Node"]) -> None:
        """A request was admitted; ``path`` are its nodes from the root down (root excluded)."""

    def on_invocation(self, wf: "Workflow", previous_agent: str | None) -> None:
        """Workflow ``wf`` made a new invocation (``wf.agent`` is its agent now)."""

    def on_workflow_end(self, wf: "Workflow") -> None:
        """Workflow ``wf`` ended or was retired for idleness."""

    def on_split(self, top: "Node", bottom: "Node") -> None:
        """``bottom`` was cut; ``top`` is its new upper part (see :meth:`RadixTree.split`)."""

    def on_drop(self, node: "Node") -> None:
        """``node`` is about to leave the cache for good (still attached when called)."""

    def on_graph(self, app: str) -> None:
        """The static agent graph of ``app`` was set or replaced."""
