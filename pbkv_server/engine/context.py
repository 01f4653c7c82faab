"""The embedded engine's :class:`~pbkv_server.engine.policies.base.PolicyContext`.

:class:`~pbkv_server.engine.cache.PrefixCache` builds one :class:`EngineContext` and hands it to
its policy: what the policy may read of the cache (clock, score board, capacities, app graphs,
the offline future, K and rho) and ``reorder``, bound straight to the heaps' re-filing (the hot
path pays no extra call). The policy never holds the cache itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Hashable, Mapping

if TYPE_CHECKING:
    from .radix import Node
    from .scoring import ScoreBoard
    from .types import FutureOracle

__all__ = ["EngineContext"]


def _not_bound(node: "Node") -> None:
    raise RuntimeError("EngineContext.reorder called before the cache bound its heaps")


class EngineContext:
    """A :class:`~pbkv_server.engine.policies.base.PolicyContext` over one prefix cache.

    Args:
        board: the cache's score board.
        device_capacity, host_capacity: KV capacities, tokens.
        app_graphs: the cache's app graphs (the same dict: graphs set later are seen).
        future: the trace's future, or ``None``.
        horizon, rho: the engine's K and rho.
        split: the tree's ``split(node, blocks) -> upper part``.
        prefill_tokens_per_s: the profile's cold prefill rate, prompt tokens per second.

    Attributes:
        now: engine time of the current scheduling step, seconds (the cache keeps it current).
        reorder, regroup: ``reorder(node)``, ``regroup(group)``; the cache binds them to its
            heaps' ``refile`` and ``regroup`` once they exist.
        (the rest as the arguments)
    """

    __slots__ = ("now", "board", "device_capacity", "host_capacity", "app_graphs", "future", "horizon", "rho",
                 "prefill_tokens_per_s", "reorder", "regroup", "split")

    def __init__(self, board: "ScoreBoard", device_capacity: int, host_capacity: int,
                 app_graphs: Mapping[str, Mapping[str, tuple[str, ...]]], future: "FutureOracle | None",
                 horizon: int, rho: float, split: Callable[["Node", int], "Node"],
                 prefill_tokens_per_s: float = 0.0) -> None:
        self.now = 0.0
        self.board = board
        self.device_capacity = device_capacity
        self.host_capacity = host_capacity
        self.app_graphs = app_graphs
        self.future = future
        self.horizon = horizon
        self.rho = rho
        self.prefill_tokens_per_s = prefill_tokens_per_s
        self.reorder: Callable[["Node"], None] = _not_bound
        self.regroup: Callable[[Hashable], None] = _not_bound
        self.split = split
