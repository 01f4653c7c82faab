"""A real SGLang radix cache on CPU pools, for tests and benchmarks without a GPU.

``MHATokenToKVPool(device="cpu")`` and a ``TokenToKVPoolAllocator`` give SGLang's own
``UnifiedRadixCache`` machinery (insert, match, split, lock, evict) everything it needs except
host<->device copies (HiCache), which need a GPU.
"""

from __future__ import annotations

from typing import Any

__all__ = ["build_cpu_cache"]


def build_cpu_cache(policy: str, kv_tokens: int, policy_config: dict | None = None, pbkv: bool = True,
                    max_requests: int = 8) -> tuple[Any, Any]:
    """Build a cache over CPU pools with page size 1.

    Args:
        policy: ``--radix-eviction-policy`` value (``pbkv``, ``pbkv-he``, ``pbkv-lae``, ``lru``, ...).
        kv_tokens: device KV slots, tokens.
        policy_config: the ``--radix-eviction-policy-config`` object.
        pbkv: True = :class:`~pbkv_server.backends.sglang.cache.PBKVRadixCache` on the PBKV tree core;
            False = SGLang's plain ``UnifiedRadixCache`` on its Python tree core.
        max_requests: rows of the request-to-token pool.

    Returns:
        ``(cache, allocator)``.

    Raises:
        ValueError: an unknown policy or a bad policy config (from SGLang / the PBKV strategy).
    """
    import torch
    from sglang.srt.mem_cache.allocator import TokenToKVPoolAllocator
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool
    from sglang.srt.mem_cache.unified_cache.components.base import ComponentType
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

    from pbkv_server.backends.sglang.cache import PBKVRadixCache
    from pbkv_server.backends.sglang.tree_core import TREE_CORE_NAME

    kv = MHATokenToKVPool(size=kv_tokens, page_size=1, dtype=torch.float16, head_num=1, head_dim=4,
                          layer_num=1, device="cpu", enable_memory_saver=False)
    allocator = TokenToKVPoolAllocator(size=kv_tokens, dtype=torch.float16, device="cpu", kvcache=kv,
                                       need_sort=False)
    req_pool = ReqToTokenPool(size=max_requests, max_context_len=kv_tokens, device="cpu", enable_memory_saver=False)
    params = CacheInitParams(disable=False, req_to_token_pool=req_pool, token_to_kv_pool_allocator=allocator,
                             page_size=1, eviction_policy=policy, eviction_policy_config=policy_config,
                             tree_components=(ComponentType.FULL,),
                             tree_core_backend=TREE_CORE_NAME if pbkv else "python")
    return (PBKVRadixCache if pbkv else UnifiedRadixCache)(params), allocator
