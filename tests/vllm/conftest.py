"""Fixtures of the vLLM plugin tests (run in .venv-vllm: ``.venv-vllm/bin/python -m pytest tests/vllm``).

Each test module that needs vLLM starts with ``pytest.importorskip("vllm.v1.core.block_pool")``, so
this directory skips cleanly where vLLM is not installed (the main .venv). (Plain
``importorskip("vllm")`` would not do: with ``tests/`` on ``sys.path`` this very directory imports
as a namespace package named ``vllm``.) Nothing here imports vLLM at module level.
"""

from __future__ import annotations

import importlib.util

import pytest

from pbkv_contract.prediction import Prediction, Predictor

_SPEC = importlib.util.find_spec("vllm")
HAVE_VLLM = _SPEC is not None and _SPEC.origin is not None  # a namespace package is this directory

#: vLLM's default GPU block size, tokens.
BLOCK = 16


def pytest_report_header(config):
    return f"vllm importable: {HAVE_VLLM}" + ("" if HAVE_VLLM else " (tests/vllm are skipped)")


class TablePredictor(Predictor):
    """A fixed predictor: the K distributions depend only on the current agent (as in tests/sglang;
    another agent, e.g. a session's ``assistant``, predicts like ``test``)."""

    TABLE = {
        "plan": [{"code": 0.6, "plan": 0.3, "<END>": 0.1}, {"test": 0.5, "code": 0.3, "<END>": 0.2},
                 {"plan": 0.4, "<END>": 0.6}],
        "code": [{"test": 0.7, "code": 0.2, "<END>": 0.1}, {"plan": 0.6, "<END>": 0.4},
                 {"code": 0.5, "<END>": 0.5}],
        "test": [{"plan": 0.2, "<END>": 0.8}, {"<END>": 1.0}, {"<END>": 1.0}],
    }

    horizon = 3

    def predict(self, queries):
        return [Prediction([dict(d) for d in self.TABLE.get(q.agent, self.TABLE['test'])]) for q in queries]


def block_tokens(labels, tail: int = 1):
    """A prompt of whole 16-token blocks, block ``i`` starting with token ``labels[i]`` (labels are
    unique per block position, so a block is named by its first token), then ``tail`` tokens that
    fill no block. With a tail, a later prompt hits all of its shared full blocks (vLLM recomputes
    at least the last prompt token, so a prompt of whole blocks would recompute, and duplicate, its
    last block)."""
    out = []
    for label in labels:
        out += [label] + [10_000 + label * BLOCK + j for j in range(1, BLOCK)]
    return out + [9_999] * tail


class ManagerHarness:
    """A real vLLM ``KVCacheManager`` (one full-attention group, block size 16) whose pool is
    :class:`~pbkv_server.backends.vllm.block_pool.PBKVBlockPool` (``pbkv=True``) or vLLM's own."""

    def __init__(self, policy: str | None, num_blocks: int = 64, predictor=None, clock=None):
        import torch
        from vllm.utils.hashing import sha256
        from vllm.v1.core.kv_cache_manager import KVCacheManager
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
        from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec

        from pbkv_server.backends.vllm import block_pool
        from pbkv_server.backends.vllm.workflows import VLLMRuntime, set_runtime

        init_none_hash(sha256)
        self.hasher = get_request_block_hasher(BLOCK, sha256)
        self.runtime = None
        if policy is not None:
            kwargs = {"clock": clock} if clock is not None else {}
            self.runtime = VLLMRuntime(policy, predictor=predictor or TablePredictor(), **kwargs)
            set_runtime(self.runtime)
            block_pool.install()
        else:
            block_pool.uninstall()
        try:
            config = KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[], kv_cache_groups=[
                KVCacheGroupSpec(["layer.0"], FullAttentionSpec(block_size=BLOCK, num_kv_heads=1, head_size=8,
                                                                dtype=torch.float32))])
            self.manager = KVCacheManager(config, max_model_len=4096, scheduler_block_size=BLOCK,
                                          hash_block_size=BLOCK, enable_caching=True)
        finally:
            block_pool.uninstall()
            set_runtime(None)
        self.pool = self.manager.block_pool
        self.connector = None
        if policy is not None:  # the scheduler's connector, bound to its manager as vLLM does
            from types import SimpleNamespace

            from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole

            from pbkv_server.backends.vllm.connector import PBKVConnector

            self.connector = PBKVConnector(SimpleNamespace(kv_transfer_config=SimpleNamespace()),
                                           KVConnectorRole.SCHEDULER, config)
            self.connector.bind_kv_cache_manager(self.manager)
        self.label = {}  # block id -> first token of the cached block
        self._rid = 0

    def request(self, tokens, hints: dict | None = None, session_id: str | None = None, extra: dict | None = None,
                kv_hints=None):
        from vllm.sampling_params import SamplingParams
        from vllm.v1.request import Request

        self._rid += 1
        extra_args = dict(extra or {})
        if hints is not None:
            extra_args["pbkv"] = hints
        params = SamplingParams(max_tokens=1, extra_args=extra_args or None)
        return Request(f"r{self._rid}", list(tokens), params, None, block_hasher=self.hasher, session_id=session_id,
                       kv_hints=kv_hints)

    def serve(self, tokens, hints: dict | None = None, **kw):
        """What vLLM's scheduler does with one request that finishes after its prefill, with the
        connector calls in its order: ``on_new_request``, match the prompt, allocate,
        ``update_state_after_alloc``, ``build_connector_meta``, compute, ``request_finished``, free."""
        req = self.request(tokens, hints, **kw)
        if self.connector is not None:
            self.connector.on_new_request(req)
        hit_blocks, hit_tokens, *_ = self.manager.get_computed_blocks(req)
        blocks = self.manager.allocate_slots(req, len(tokens) - hit_tokens, hit_tokens, hit_blocks)
        assert blocks is not None, "allocation failed"
        if self.connector is not None:
            self.connector.update_state_after_alloc(req, self.manager.get_blocks(req.request_id), 0)
            self.connector.build_connector_meta(None)
        req.num_computed_tokens = len(tokens)
        for i, blk in enumerate(self.manager.get_blocks(req.request_id).blocks[0]):
            if blk.block_hash is not None:
                self.label[blk.block_id] = tokens[i * BLOCK]
        if self.connector is not None:
            assert self.connector.request_finished(req, []) == (False, None)  # vLLM frees the blocks
        self.manager.free(req)
        return req, hit_tokens

    def arrive(self, tokens, hints: dict | None = None, **kw):
        """A request vLLM's scheduler added to its waiting queue and has not scheduled
        (``add_request`` calls the connector's ``on_new_request``). Returns it."""
        req = self.request(tokens, hints, **kw)
        self.connector.on_new_request(req)
        return req

    def cached(self):
        """First tokens of the cached blocks."""
        return {self.label[b.block_id] for b in self.pool.blocks if b.block_hash is not None and not b.is_null}

    def evict_one(self):
        """Allocate one block through vLLM's ``get_new_blocks``; the cached block it evicted."""
        before = {b.block_id for b in self.pool.blocks if b.block_hash is not None}
        (blk,) = self.pool.get_new_blocks(1)
        gone = before - {b.block_id for b in self.pool.blocks if b.block_hash is not None}
        self._held.append(blk)
        return self.label[gone.pop()] if gone else None

    def eviction_order(self):
        """Allocate until every cached block is gone; first tokens in eviction order (uncached
        free blocks, taken first, are skipped)."""
        self._held = []
        order = []
        while any(b.block_hash is not None for b in self.pool.blocks):
            victim = self.evict_one()
            if victim is not None:
                order.append(victim)
        self.pool.free_blocks(self._held)
        return order


@pytest.fixture
def harness():
    """Factory: ``harness(policy, num_blocks=64, predictor=None, clock=None)`` -> :class:`ManagerHarness`
    (``policy=None``: vLLM's own ``BlockPool``)."""
    pytest.importorskip("vllm.v1.core.block_pool")
    return ManagerHarness
