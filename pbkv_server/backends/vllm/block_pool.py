"""PBKV's order for vLLM's GPU prefix-cache eviction: a ``BlockPool`` subclass.

vLLM 0.33.0 evicts cached GPU blocks in the order of its free-block queue
(``vllm.v1.core.block_pool.BlockPool.free_block_queue``, a doubly linked list): ``free_blocks``
puts blocks without a hash at the front and cached ones at the back (LRU), and
``get_new_blocks`` takes the front. vLLM has no pluggable GPU eviction policy (the pull request
for one, vllm-project/vllm#40270, is still open), so the least invasive change is this subclass,
which the plugin installs as the class the KV cache coordinator builds
(``vllm.v1.core.kv_cache_coordinator.BlockPool``, :func:`install`): it keeps vLLM's queue, hash map
and bookkeeping and only reorders the queue's front before vLLM's own ``get_new_blocks`` takes it:

1. free blocks without cached KV (no loss), in vLLM's order;
2. then cached free blocks in the engine-core policy's order (:meth:`BlockTree.order
   <pbkv_server.backends.vllm.tree.BlockTree.order>`: retired first, then ascending lookahead
   score, LRU ties, leaves before their parents);
3. last, blocks released with ``unpin_blocks`` (still read until reused: vLLM's last resort).

When the queue's front already holds enough blocks of kind 1 (the common case), nothing is
reordered and no policy is consulted. Block records (parent link, access tick, score record) are
kept by :class:`~pbkv_server.backends.vllm.tree.BlockTree`: ``cache_full_blocks`` (which gets the
request and all its blocks) records the request's chain and its agent; eviction, hash moves and a
prefix-cache reset keep the records in step; a request whose blocks are recorded counts as
admitted for the policy's lifecycle hooks (:meth:`~.workflows.VLLMRuntime.admitted`). Scores come from the engine core
(:mod:`pbkv_server.engine.scoring`, :mod:`pbkv_server.engine.policies`): no eviction rule is
written here.
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

from vllm.v1.core.block_pool import BlockPool

from .tree import BlockTree
from .workflows import VLLMRuntime, runtime

log = logging.getLogger(__name__)

__all__ = ["PBKVBlockPool", "install", "installed"]


class PBKVBlockPool(BlockPool):
    """vLLM's ``BlockPool`` whose cached free blocks leave in PBKV's order (module docstring).

    Takes ``BlockPool``'s arguments. Attributes:
        pbkv: the process's :class:`~pbkv_server.backends.vllm.workflows.VLLMRuntime`.
        tree: the pool's :class:`~pbkv_server.backends.vllm.tree.BlockTree` (keys: block ids).
    """

    def __init__(self, *args: Any, pbkv: VLLMRuntime | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pbkv = pbkv if pbkv is not None else runtime()
        self.tree = BlockTree(self.pbkv.book, self.pbkv.policy)

    # ------------------------------------------------------------------ what PBKV observes
    def cache_full_blocks(self, request, blocks, num_cached_blocks, num_full_blocks, block_size,
                          kv_cache_group_id, block_mask=None) -> None:
        """vLLM's caching of a request's full blocks; then the request's chain
        ``blocks[:num_full_blocks]`` records its parent links, access tick and agent."""
        super().cache_full_blocks(request, blocks, num_cached_blocks, num_full_blocks, block_size,
                                  kv_cache_group_id, block_mask)
        self.observe(request, blocks[:num_full_blocks], block_size)

    def observe(self, request: Any, blocks: Sequence[Any], block_size: int) -> None:
        """Record that ``request`` uses the chain ``blocks`` (root first). Blocks without a hash
        (null, masked or not yet full) are skipped; never raises."""
        try:
            self.pbkv.poll()
            hints, tick = self.pbkv.begin_request(request)
            path, parent = [], None
            for blk in blocks:
                if blk.is_null or blk.block_hash is None:
                    continue
                path.append(self.tree.add(blk.block_id, parent, block_size))
                parent = blk.block_id
            self.tree.use(path, hints, tick)
            self.pbkv.admitted(request, path)  # its blocks are allocated: vLLM scheduled it
        except Exception:  # bookkeeping must never fail a request
            log.exception("PBKV: block bookkeeping failed for request %s", getattr(request, "request_id", "?"))

    # ------------------------------------------------------------------ eviction
    def get_new_blocks(self, num_blocks: int) -> list:
        """vLLM's allocation, after moving PBKV's victims to the front of the free queue."""
        if self.enable_caching and 0 < num_blocks <= self.get_num_free_blocks() and not self._front_is_free(num_blocks):
            try:
                self.pbkv.poll()
                self.pbkv.book.retire_idle()
                self._reorder_front(num_blocks)
            except Exception:  # vLLM's own order is a safe fallback
                log.exception("PBKV: victim ordering failed; vLLM's LRU order used")
        return super().get_new_blocks(num_blocks)

    def _front_is_free(self, n: int) -> bool:
        """True if the queue's first ``n`` blocks hold no cached KV and no reuse watcher."""
        q = self.free_block_queue
        blk, tail, watched = q.fake_free_list_head.next_free_block, q.fake_free_list_tail, self._reuse_watchers
        for _ in range(n):
            if blk is tail or blk is None or blk.block_hash is not None or blk.block_id in watched:
                return False
            blk = blk.next_free_block
        return True

    def victims(self, n: int) -> list:
        """The ``n`` free blocks the next allocation of ``n`` takes, in order (module docstring)."""
        watched = self._reuse_watchers
        empty, cached, last = [], [], []
        for blk in self.free_block_queue.get_all_free_blocks():
            if blk.block_id in watched:
                last.append(blk)
            elif blk.block_hash is None:
                empty.append(blk)
            else:
                cached.append(blk)
        chosen = empty[:n]
        if len(chosen) < n:
            by_id = {blk.block_id: blk for blk in cached}
            chosen += [by_id[i] for i in self.tree.order(list(by_id), n - len(chosen))]
        if len(chosen) < n:
            chosen += last[: n - len(chosen)]
        return chosen

    def _reorder_front(self, n: int) -> None:
        chosen = self.victims(n)
        q = self.free_block_queue
        for blk in chosen:
            q.remove(blk)
        q.prepend_n(chosen)

    def _maybe_evict_cached_block(self, block) -> bool:
        evicted = super()._maybe_evict_cached_block(block)
        self.tree.drop(block.block_id)
        return evicted

    def move_block_hashes(self, src_block, dst_block) -> None:
        super().move_block_hashes(src_block, dst_block)
        self.tree.rekey(src_block.block_id, dst_block.block_id)

    def reset_prefix_cache(self) -> bool:
        done = super().reset_prefix_cache()
        if done:
            self.tree.clear()
        return done


_ORIGINAL: type | None = None


def install() -> bool:
    """Make vLLM's KV cache coordinator build :class:`PBKVBlockPool` (idempotent). Returns True if
    installed now."""
    global _ORIGINAL
    from vllm.v1.core import kv_cache_coordinator

    if kv_cache_coordinator.BlockPool is PBKVBlockPool:
        return False
    _ORIGINAL = kv_cache_coordinator.BlockPool
    kv_cache_coordinator.BlockPool = PBKVBlockPool
    return True


def uninstall() -> None:
    """Undo :func:`install` (tests)."""
    from vllm.v1.core import kv_cache_coordinator

    if _ORIGINAL is not None and kv_cache_coordinator.BlockPool is PBKVBlockPool:
        kv_cache_coordinator.BlockPool = _ORIGINAL


def installed() -> bool:
    """True while the coordinator builds :class:`PBKVBlockPool`."""
    from vllm.v1.core import kv_cache_coordinator

    return kv_cache_coordinator.BlockPool is PBKVBlockPool
