"""``PBKVConnector``: a KV connector that only observes, so PBKV sees each request's cache hits.

vLLM's scheduler tells its KV connector (scheduler side) about every request: ``on_new_request``
when it arrives, ``update_state_after_alloc`` with all of the request's blocks once they are
allocated (its prefix-cache hits included), ``build_connector_meta`` once per step and
``request_finished`` before its blocks are freed. :class:`PBKVConnector` uses these to

- register the request's invocation at arrival (its hints, its tick);
- record its agent on the cached blocks it hit (``PBKVBlockPool.cache_full_blocks`` sees only
  blocks it newly fills);
- apply the workflow ends received on the control socket every step, and at a request's
  ``request_finished`` the end its KV-hint envelope asked for its own workflow;
- never take over freeing a request's blocks (``request_finished`` returns ``False``): PBKV
  changes the order in which freed blocks are reused, not when they are freed.

It moves no KV: the worker side does nothing. Combine it with the offloading connector (CPU tier)
through vLLM's ``MultiConnector``. Registered by the plugin as ``PBKVConnector``.
"""

from __future__ import annotations

import logging
from typing import Any

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
    SupportsHMA,
)

log = logging.getLogger(__name__)

__all__ = ["PBKVConnector", "PBKVConnectorMetadata"]


class PBKVConnectorMetadata(KVConnectorMetadata):
    """Nothing goes to the workers."""


class PBKVConnector(KVConnectorBase_V1, SupportsHMA):
    """Scheduler-side observer of requests for the PBKV block pool (module docstring)."""

    def __init__(self, vllm_config: Any, role: KVConnectorRole, kv_cache_config: Any = None) -> None:
        super().__init__(vllm_config, role, kv_cache_config)
        self._pool = None

    # ------------------------------------------------------------------ scheduler side
    def _pbkv_pool(self):
        """The scheduler's block pool if it is PBKV's, else None (then the connector is idle)."""
        if self._pool is None:
            from .block_pool import PBKVBlockPool

            manager = getattr(self, "_kv_cache_manager", None)
            pool = getattr(manager, "block_pool", None)
            self._pool = pool if isinstance(pool, PBKVBlockPool) else False
        return self._pool or None

    def on_new_request(self, request: Any) -> None:
        pool = self._pbkv_pool()
        if pool is not None:
            pool.pbkv.begin_request(request)

    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> tuple[int, bool]:
        return 0, False

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        """Record the request's agent on every cached block it holds, per KV cache group."""
        pool = self._pbkv_pool()
        if pool is None:
            return
        try:
            size = pool.hash_block_size
            for group in blocks.blocks:
                pool.observe(request, group, size)
        except Exception:
            log.exception("PBKV: connector bookkeeping failed for %s", getattr(request, "request_id", "?"))

    def build_connector_meta(self, scheduler_output: Any) -> KVConnectorMetadata:
        pool = self._pbkv_pool()
        if pool is not None:
            pool.pbkv.poll()
        return PBKVConnectorMetadata()

    def request_finished(self, request: Any, block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        # The request's state stays (bounded by age): the CPU tier's own finish hook, which
        # MultiConnector may call after this one, still reads it. A final turn's own
        # demote/evict (kv_hints) retires its workflow now that its blocks are recorded.
        pool = self._pbkv_pool()
        if pool is not None:
            try:
                pool.pbkv.request_done(request.request_id)
            except Exception:
                log.exception("PBKV: ending the workflow of %s failed", getattr(request, "request_id", "?"))
        return False, None

    def request_finished_all_groups(self, request: Any, block_ids: tuple[list[int], ...]):
        return self.request_finished(request, [])

    # ------------------------------------------------------------------ worker side: no KV moves
    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        return None

    def wait_for_layer_load(self, layer_name: str) -> None:
        return None

    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any, **kwargs: Any) -> None:
        return None

    def wait_for_save(self) -> None:
        return None
