"""PBKV inside a real vLLM server (0.33.0), as a plugin: no fork, no patch to vLLM's files.

Installed through the ``vllm.general_plugins`` entry point ``pbkv`` (:func:`plugin.register`),
which vLLM calls in each of its processes. What it adds, and through which vLLM API:

- GPU prefix-cache eviction in PBKV's order: vLLM 0.33.0 has no pluggable GPU eviction policy
  (the free-block queue's LRU in ``vllm/v1/core/block_pool.py``; the pull request for a pluggable
  one, vllm-project/vllm#40270, is still open). The least invasive change is taken: the plugin
  makes the KV cache coordinator build :class:`~.block_pool.PBKVBlockPool`, a ``BlockPool``
  subclass that keeps all of vLLM's bookkeeping and only moves PBKV's victims to the front of the
  free queue before vLLM's own ``get_new_blocks`` takes them (only when ``PBKV_VLLM_POLICY`` is
  set). When #40270 lands, the same order moves behind that interface.
- CPU offload tier in PBKV's order: :class:`~.offload_policy.PBKVCachePolicy`, registered with
  ``CachePolicyFactory`` (vllm-project/vllm#49114) as ``pbkv``.
- Request observation: :class:`~.connector.PBKVConnector`, a KV connector
  (``KVConnectorFactory.register_connector``) that moves no KV and never takes over freeing blocks.
- Hints: ``X-PBKV-*`` headers and ``custom_params.pbkv`` become ``vllm_xargs`` in the API server
  (:mod:`.http`, ``--middleware``); vLLM's own ``session_id`` (vllm-project/vllm#48048) names the
  workflow of a request without PBKV hints. The end route lives in the same middleware and
  reaches the engine core over a Unix datagram socket (:mod:`.control`).
- KV-hint envelope: read in the engine core (:mod:`.workflows`); the middleware advertises the
  actions it reads (``X-PBKV-KV-Hints``, ``GET /pbkv/v1/kv_hints``).
- Prefetch: none ahead of a request; both of vLLM's offload load paths (host to GPU, and
  secondary tier to host) start from a request being scheduled (:mod:`.offload_policy`).

The order always comes from the engine core: :class:`~.tree.BlockTree` ranks blocks with the
engine-core policy's ``priority`` over the engine core's score records
(:mod:`pbkv_server.engine.scoring`, :class:`~pbkv_server.backends.book.WorkflowBook`), leaves
first. Modules :mod:`settings`, :mod:`control`, :mod:`tree`, :mod:`workflows`, :mod:`http` and
:mod:`launch` import no vLLM.
"""
