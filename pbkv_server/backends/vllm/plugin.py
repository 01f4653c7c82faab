"""Entry point ``pbkv`` of the ``vllm.general_plugins`` group (see pyproject.toml).

vLLM calls :func:`register` (``load_general_plugins``) in each of its processes, the engine core
included, before it builds its scheduler. It is idempotent and adds:

- KV connector ``PBKVConnector`` (``KVConnectorFactory.register_connector``, lazy import);
- CPU offload cache policy ``pbkv`` (``CachePolicyFactory.register_cache_policy``, lazy import);
- when ``PBKV_VLLM_POLICY`` names a plugin policy: :class:`~.block_pool.PBKVBlockPool` as the
  block pool vLLM's KV cache coordinator builds (module docstring of :mod:`.block_pool`: vLLM has
  no pluggable GPU eviction policy yet). Without that variable vLLM's prefix cache is untouched.

A bad ``PBKV_VLLM_POLICY`` or ``PBKV_VLLM_CONFIG`` raises ``ValueError`` here, so vLLM stops at
start with the reason instead of serving with an order nobody asked for.
"""

from __future__ import annotations

import logging

from .settings import CACHE_POLICY_NAME, CONNECTOR_NAME, engine_policy_name, policy_from_env, settings_from_env

log = logging.getLogger(__name__)

__all__ = ["register"]


def register() -> None:
    """Register PBKV's connector and offload policy with vLLM, and its block pool when asked."""
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
    from vllm.v1.kv_offload.cpu.policies.factory import CachePolicyFactory

    if CONNECTOR_NAME not in KVConnectorFactory._registry:
        KVConnectorFactory.register_connector(CONNECTOR_NAME, "pbkv_server.backends.vllm.connector", "PBKVConnector")
    if CACHE_POLICY_NAME not in CachePolicyFactory._registry:
        CachePolicyFactory.register_cache_policy(CACHE_POLICY_NAME, "pbkv_server.backends.vllm.offload_policy",
                                                 "PBKVCachePolicy")
    policy = policy_from_env()
    if policy is None:
        return
    engine_policy_name(policy)  # fail at start on a bad name or config, not at the first eviction
    settings_from_env(policy)
    from .block_pool import install

    if install():
        log.info("PBKV vLLM plugin: GPU prefix-cache eviction in %s order (connector %s, offload policy %s)",
                 policy, CONNECTOR_NAME, CACHE_POLICY_NAME)
