"""PBKV's order for vLLM's CPU offload tier: a ``CachePolicy`` for ``CPUOffloadingManager``.

vLLM's offloading connector (``OffloadingConnector`` with the CPU spec) keeps offloaded chunks in
host memory and asks its cache policy which chunks to drop when the tier is full. Since
vllm-project/vllm#49114 policies are pluggable by name through ``CachePolicyFactory``; the plugin
registers :class:`PBKVCachePolicy` as ``pbkv`` (select it with
``kv_connector_extra_config: {"eviction_policy": "pbkv", ...}``).

The policy keeps one :class:`~pbkv_server.backends.vllm.tree.BlockTree` node per resident chunk
(key: vLLM's ``OffloadKey``), linked to the chunk before it in the request that stored or read it
(``ReqContext`` offload-key positions give the prefix order), and evicts with
:meth:`BlockTree.order <pbkv_server.backends.vllm.tree.BlockTree.order>`: the engine-core
policy's host drop order (``host_priority``), leaves first. Hints and ticks of a request come from the process's
:class:`~pbkv_server.backends.vllm.workflows.VLLMRuntime` (the GPU pool and the PBKV connector saw
the request first; the offload manager runs in the same scheduler process).

Prefetch: vLLM's offload API loads host chunks into GPU blocks only for a request being scheduled
(``get_num_new_matched_tokens`` / ``prepare_load``), and promotes chunks from a secondary tier to
the host only from such a request's lookup (``TieringOffloadingManager.lookup``, with its
``ReqContext``); there is no call to load ahead of a request,
so PBKV's conservative prefetch does not run on vLLM (the host tier keeps the predicted chunks
instead, which the next request of the workflow then loads).
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Iterable, Sequence
from typing import Any

from vllm.v1.kv_offload.base import OffloadKey, ReqContext, get_offload_group_idx
from vllm.v1.kv_offload.cpu.policies.base import CachePolicy, ChunkStatus

from pbkv_server.engine.radix import HOST

from .tree import BlockTree
from .workflows import VLLMRuntime, runtime

log = logging.getLogger(__name__)

__all__ = ["PBKVCachePolicy"]


class _RequestChain:
    """Per-request scratch state (``ReqContext.set_state``): positions and keys seen, per group."""

    __slots__ = ("owner", "positions", "keys")

    def __init__(self, owner: Any) -> None:
        self.owner = owner
        self.positions: dict[int, list[int]] = {}
        self.keys: dict[int, list[OffloadKey]] = {}


class PBKVCachePolicy(CachePolicy):
    """CPU offload tier ordered by the engine-core policy of the process's PBKV runtime.

    Args:
        cache_capacity: chunks the tier holds (vLLM's argument).
        pbkv: the runtime to use; ``None`` = the process's (:func:`~.workflows.runtime`).
    """

    def __init__(self, cache_capacity: int, pbkv: VLLMRuntime | None = None) -> None:
        super().__init__(cache_capacity)
        self.pbkv = pbkv if pbkv is not None else runtime()
        self.tree = BlockTree(self.pbkv.book, self.pbkv.policy, HOST)
        # a CPU tier exists: the policy's device order is its with-host one (pbkv's rule 6);
        # chunks, not tokens (the rule reads only whether there is a tier)
        self.pbkv.context.host_capacity = max(1, int(cache_capacity))
        self.chunks: dict[OffloadKey, ChunkStatus] = {}
        self._evictable: dict[OffloadKey, None] = {}  # insertion-ordered set: oldest first

    # ------------------------------------------------------------------ helpers
    def _chain(self, ctx: ReqContext) -> _RequestChain:
        state = ctx.get_state(_RequestChain)
        if state is None or state.owner is not self:
            state = _RequestChain(self)
            ctx.set_state(state)
        return state

    def _parent(self, key: OffloadKey, ctx: ReqContext) -> OffloadKey | None:
        """The request's chunk just before ``key`` in its group (by offload-key position)."""
        pos = ctx.get_offload_key_position(key)
        if pos is None:
            return None
        chain = self._chain(ctx)
        group = get_offload_group_idx(key)
        positions = chain.positions.setdefault(group, [])
        keys = chain.keys.setdefault(group, [])
        i = bisect.bisect_left(positions, pos)
        if i < len(positions) and positions[i] == pos:
            return keys[i - 1] if i > 0 else None
        positions.insert(i, pos)
        keys.insert(i, key)
        return keys[i - 1] if i > 0 else None

    def _use(self, keys: Iterable[OffloadKey], ctx: ReqContext) -> None:
        """The request of ``ctx`` used ``keys`` (prefix order): link, stamp, record its agent."""
        try:
            self.pbkv.poll()
            hints, tick = self.pbkv.request_state(ctx.req_id)
            path = []
            for key in keys:
                node = self.tree.get(key)
                if node is None:
                    continue
                parent = self._parent(key, ctx)
                if node.parent is None and parent is not None and parent in self.tree.nodes and parent != key:
                    node.parent = parent
                    self.tree.nodes[parent].children.add(key)
                path.append(node)
            self.tree.use(path, hints, tick)
        except Exception:  # bookkeeping must never fail a transfer
            log.exception("PBKV: offload bookkeeping failed for request %s", getattr(ctx, "req_id", "?"))

    # ------------------------------------------------------------------ CachePolicy
    def get(self, key: OffloadKey) -> ChunkStatus | None:
        return self.chunks.get(key)

    def insert(self, key: OffloadKey, chunk: ChunkStatus, req_context: ReqContext) -> None:
        self.chunks[key] = chunk
        parent = self._parent(key, req_context)
        self.tree.add(key, parent if parent != key else None, 0)
        if chunk.ref_cnt == 0:
            self._evictable[key] = None
        self._use([key], req_context)

    def remove(self, key: OffloadKey) -> None:
        self.chunks.pop(key, None)
        self._evictable.pop(key, None)
        self.tree.drop(key)

    def touch(self, keys: Iterable[OffloadKey], req_context: ReqContext) -> None:
        self._use(list(keys), req_context)

    def on_request_access(self, keys: Iterable[OffloadKey], req_context: ReqContext) -> None:
        self._use(list(keys), req_context)

    def on_request_finished(self, key_groups: Sequence[Sequence[OffloadKey]], insertion_only_keys: set,
                            reused_keys: set, req_context: ReqContext) -> None:
        for keys in key_groups:
            self._use(keys, req_context)

    def evict(self, n: int, protected: set[OffloadKey]) -> list[tuple[OffloadKey, ChunkStatus]] | None:
        """``n`` idle chunks outside ``protected`` in PBKV's order, or None (no change) if fewer exist."""
        if n == 0:
            return []
        candidates = [k for k in self._evictable if k not in protected]
        if len(candidates) < n:
            return None
        self.pbkv.poll()
        chosen = self.tree.order(candidates, n)
        if len(chosen) < n:
            return None
        out = []
        for key in chosen:
            chunk = self.chunks.pop(key)
            self._evictable.pop(key, None)
            self.tree.drop(key)
            out.append((key, chunk))
        return out

    def clear(self) -> None:
        self.chunks.clear()
        self._evictable.clear()
        self.tree.clear()

    def mark_evictable(self, key: OffloadKey) -> None:
        if key in self.chunks:
            self._evictable[key] = None

    def mark_non_evictable(self, key: OffloadKey) -> None:
        self._evictable.pop(key, None)
