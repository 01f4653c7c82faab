"""Conservative prefetch inside SGLang (PBKV section 4), issued from a scheduler hook.

SGLang has no prefetch-policy hook, so :func:`after_next_batch` (an AFTER hook on
``Scheduler.get_next_batch_to_run``) runs one round whenever the batch about to run is decode-only
and the cache is a HiCache-enabled :class:`~pbkv_server.backends.sglang.cache.PBKVRadixCache` under policy
``pbkv``. A round:

1. candidates: host-tier nodes (evicted from the GPU, backed up on host) whose parent is on the
   device, with one-step value ``Value(c) = sum_w A_w(c) . P_w^(1)`` > 0 — read through the engine
   policy's ``prefetch_value`` (the same record the simulator uses);
2. budget ``S = min(S_a, S_bw)``: ``S_a`` = free device tokens + retired device cache that can
   leave without touching active cache, ``S_bw`` = PCIe bytes/s x mean decode-step time / KV bytes
   per token;
3. greedy by value with the engine core's one planner
   (:func:`pbkv_server.engine.prefetch.run_round`), each chosen node loaded with
   ``cache.load_back``; any eviction ``load_back`` needs stays within the retired cache, which the
   hierarchical order evicts before every active node.

Host->device copies need a GPU; on CPU pools ``load_back`` returns False and nothing moves.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Iterable

from pbkv_server.engine.policies.base import EvictionOrder
from pbkv_server.engine.prefetch import run_round

log = logging.getLogger(__name__)

__all__ = ["Candidate", "plan_prefetch", "scan_tree", "PrefetchRound", "Prefetcher", "after_next_batch"]

#: Most candidates loaded per round (bounds the decision time).
MAX_LOADS_PER_ROUND = 16
#: Minimum seconds between two rounds (a scan is O(tree nodes)).
MIN_ROUND_INTERVAL_S = 0.05
_GIB = 1 << 30


@dataclass(frozen=True, slots=True)
class Candidate:
    """A host-tier node that could be loaded: its id, size in tokens and one-step value."""

    node_id: Any
    tokens: int
    value: float


def plan_prefetch(candidates: Iterable[Candidate], free_tokens: int, retired_tokens: int,
                  bandwidth_tokens: int, max_loads: int = MAX_LOADS_PER_ROUND) -> list[Candidate]:
    """The candidates a round would load, in load order (the engine core's greedy rule,
    :func:`pbkv_server.engine.prefetch.run_round`, with every load succeeding).

    Args:
        candidates: host-tier nodes; only ``value > 0`` ones are considered.
        free_tokens: free device KV slots, tokens (>= 0).
        retired_tokens: device tokens of retired cache that may be evicted, tokens (>= 0).
        bandwidth_tokens: S_bw, tokens PCIe can move during one decode step.
        max_loads: most nodes chosen.

    Returns:
        Descending value (ties: larger size first, then id); a node larger than what is left of
        ``min(S_a, S_bw)`` is skipped and smaller ones may follow.
    """
    chosen: list[Candidate] = []
    room = _CountedRoom(free_tokens + retired_tokens)

    def accept(cand: Candidate) -> bool:
        chosen.append(cand)
        room.left -= cand.tokens
        return True

    _round(candidates, bandwidth_tokens, room, accept, max_loads)
    return chosen


@dataclass(slots=True)
class PrefetchRound:
    """What one round saw and did (token counts in tokens, time in seconds)."""

    candidates: int = 0
    free_tokens: int = 0
    retired_tokens: int = 0
    bandwidth_tokens: int = 0
    loaded_tokens: int = 0
    loads: int = 0
    decision_s: float = 0.0


class Prefetcher:
    """Per-scheduler prefetch state: decode-step timing and round counters.

    Args:
        cache: the scheduler's :class:`~pbkv_server.backends.sglang.cache.PBKVRadixCache`.

    Attributes:
        step_s: exponential moving average of the decode-step time, seconds.
        loaded_tokens: tokens loaded by prefetch so far; ``rounds``: rounds run.
    """

    def __init__(self, cache: Any) -> None:
        self.cache = cache
        self.settings = cache.book.settings
        self.step_s = self.settings.default_step_s
        self._last_decode_t: float | None = None
        self._last_round_t = 0.0
        self.loaded_tokens = 0
        self.rounds = 0
        self._kv_bytes = self.settings.kv_bytes_per_token or _kv_bytes_per_token(cache)

    def on_decode_batch(self, now: float | None = None) -> PrefetchRound | None:
        """Called for each decode-only batch: update the step time, maybe run a round."""
        now = time.perf_counter() if now is None else now
        if self._last_decode_t is not None:
            gap = now - self._last_decode_t
            if 0 < gap < 1.0:  # a longer gap was idleness or prefill, not a decode step
                self.step_s = 0.8 * self.step_s + 0.2 * gap
        self._last_decode_t = now
        if now - self._last_round_t < MIN_ROUND_INTERVAL_S:
            return None
        self._last_round_t = now
        return self.run_round()

    def run_round(self) -> PrefetchRound:
        """Scan the tree, plan, and ``load_back`` the chosen nodes."""
        t0 = time.perf_counter()
        cache = self.cache
        tree = cache.tree_core
        policy = tree.eviction_strategy.engine_policy
        cands, retired = scan_tree(tree, policy, self.settings.min_prefetch_tokens)
        free = int(cache.token_to_kv_pool_allocator.available_size())
        bw_tokens = int(self.settings.pcie_bytes_per_s * self.step_s / self._kv_bytes)
        rnd = PrefetchRound(len(cands), free, retired, bw_tokens)
        room = _CountedRoom(free + retired)

        def load_back(cand: Candidate) -> bool:
            # any eviction load_back needs stays within the retired cache (evicted before all active)
            try:
                ok = bool(cache.load_back(cand.node_id, mem_quota=room.left))
            except Exception:
                log.exception("PBKV prefetch: load_back of node %s failed", cand.node_id)
                ok = False
            if ok:
                room.left -= cand.tokens
            return ok

        done = _round(cands, bw_tokens, room, load_back, MAX_LOADS_PER_ROUND)
        rnd.loads, rnd.loaded_tokens = done.loads, done.loaded_tokens
        self.loaded_tokens += rnd.loaded_tokens
        self.rounds += 1
        rnd.decision_s = time.perf_counter() - t0
        return rnd


def scan_tree(tree: Any, policy: EvictionOrder, min_tokens: int = 1) -> tuple[list[Candidate], int]:
    """One pass over a PBKV tree core (O(nodes)); host nodes under ``min_tokens`` are not candidates.

    Returns:
        ``(candidates, retired_tokens)``: host-tier nodes under a device parent with their one-step
        value (engine ``policy.prefetch_value``), and the device tokens of retired subtrees that are
        unlocked and entirely retired (evicting them never reaches active cache).
    """
    root = tree.root_node
    cands: list[Candidate] = []
    removable: dict[int, bool] = {}
    retired_tokens = 0
    # children before parents: reverse of a pre-order walk
    order: list[Any] = []
    stack = [root]
    while stack:
        node = stack.pop()
        order.append(node)
        stack.extend(node.children.values())
    for node in reversed(order):
        if node is root:
            continue
        if node.evicted:
            parent = node.parent
            if node.backuped and len(node.key) >= min_tokens and (parent is root or not parent.evicted):
                value = policy.prefetch_value(node) if getattr(node, "sc", None) is not None else 0.0
                if value > 0:
                    cands.append(Candidate(node.id, len(node.key), value))
            removable[node.id] = True  # not on the device: no obstacle for its parent
            continue
        ok = (policy.is_retired(node) and _unlocked(node)
              and all(removable.get(c.id, False) for c in node.children.values()))
        removable[node.id] = ok
        if ok:
            retired_tokens += len(node.key)
    return cands, retired_tokens


def after_next_batch(plan: Any, scheduler: Any, *args: Any, **kwargs: Any) -> None:
    """AFTER hook of ``Scheduler.get_next_batch_to_run``: one prefetch round per decode-only batch."""
    try:
        from .cache import PBKVRadixCache

        cache = getattr(scheduler, "tree_cache", None)
        if not isinstance(cache, PBKVRadixCache) or not cache.prefetch_enabled:
            return None
        if getattr(cache, "cache_controller", None) is None:  # no host tier (HiCache off)
            return None
        batch = getattr(plan, "batch_to_run", None)
        mode = getattr(batch, "forward_mode", None)
        if batch is None or mode is None or not mode.is_decode():
            return None
        prefetcher = getattr(cache, "_pbkv_prefetcher", None)
        if prefetcher is None:
            prefetcher = cache._pbkv_prefetcher = Prefetcher(cache)
        prefetcher.on_decode_batch()
    except Exception:  # prefetch is an optimisation: never break the scheduler loop
        log.exception("PBKV prefetch round failed")
    return None


class _CountedRoom:
    """Room of a round counted up front: free device slots + evictable retired cache, tokens
    (``load_back`` itself evicts; nothing is evicted here, so ``make_room`` cannot add any)."""

    def __init__(self, tokens: int) -> None:
        self.left = max(0, tokens)

    def free(self) -> int:
        return self.left

    def make_room(self, short: int, candidate: Candidate) -> None:
        return None


def _round(candidates: Iterable[Candidate], bandwidth_tokens: int, room: _CountedRoom, load, max_loads: int):
    """The engine core's greedy round over scanned candidates, best first (value, then size, then id)."""
    ordered = sorted((c for c in candidates if c.value > 0 and c.tokens > 0),
                     key=lambda c: (-c.value, -c.tokens, str(c.node_id)))
    return run_round(iter(ordered), size=lambda c: c.tokens, bandwidth_tokens=max(0, bandwidth_tokens),
                     room=room, load=load, max_loads=max_loads)


def _unlocked(node: Any) -> bool:
    from sglang.srt.mem_cache.unified_cache.components.base import ComponentType

    return node.component_data[ComponentType.FULL].lock_ref == 0


def _kv_bytes_per_token(cache: Any) -> int:
    """KV bytes of one token from the device pool (``mem_usage`` GiB over ``size`` tokens)."""
    try:
        kv = cache.token_to_kv_pool_allocator.get_kvcache()
        per = float(kv.mem_usage) * _GIB / max(1, int(kv.size))
        if per > 0:
            return int(per)
    except Exception:
        pass
    return 131072  # 128 KiB/token (an 8B-class model in bf16) when the pool cannot say
