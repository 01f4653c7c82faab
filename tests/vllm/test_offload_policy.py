"""PBKV's order in vLLM's CPU offload tier: ``CPUOffloadingManager(cache_policy="pbkv")``.

The manager is vLLM's own (ref counts, chunk pool, store/evict skeleton); only the cache policy is
PBKV's, resolved through ``CachePolicyFactory`` as the plugin registers it.
"""

from types import SimpleNamespace

import pytest

pytest.importorskip("vllm.v1.core.block_pool")  # the real vLLM, not this tests/vllm directory

from .conftest import TablePredictor  # noqa: E402

CHUNK = 16  # tokens per offloaded chunk


def _key(name: str):
    from vllm.v1.kv_offload.base import make_offload_key

    return make_offload_key(name.encode().ljust(32, b"\0"), 0)


class Tier:
    """A CPU offload manager of ``chunks`` chunks with the ``policy`` cache policy."""

    def __init__(self, policy: str, chunks: int, runtime_policy: str = "pbkv-he"):
        from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager

        from pbkv_server.backends.vllm.plugin import register
        from pbkv_server.backends.vllm.workflows import VLLMRuntime, set_runtime

        register()
        self.runtime = VLLMRuntime(runtime_policy, predictor=TablePredictor())
        set_runtime(self.runtime)
        try:
            self.manager = CPUOffloadingManager(num_chunks=chunks, cache_policy=policy)
        finally:
            set_runtime(None)
        self._rid = 0
        self.evicted = []

    def store(self, names, hints=None):
        """One request stores chunks ``names`` (prefix order), as the offloading scheduler does:
        positions recorded, ``prepare_store``, ``complete_store``, then the request finishes."""
        from vllm.v1.kv_offload.base import ReqContext

        self._rid += 1
        rid = f"r{self._rid}"
        extra = {"pbkv": hints} if hints else None
        self.runtime.begin_request(SimpleNamespace(request_id=rid, session_id=None,
                                                   sampling_params=SimpleNamespace(extra_args=extra)))
        ctx = ReqContext(req_id=rid)
        keys = [_key(n) for n in names]
        for i, key in enumerate(keys):
            ctx.set_offload_key_position(key, (i + 1) * CHUNK)
        out = self.manager.prepare_store(keys, ctx)
        assert out is not None, "store refused"
        self.evicted += [self._name(k) for k in out.evicted_keys]
        self.manager.complete_store(out.keys_to_store, ctx)
        self.manager.on_request_finished(ctx)

    @staticmethod
    def _name(key):
        return bytes(key[:-4]).rstrip(b"\0").decode()


def _hint(wf, agent, step):
    return {"workflow_id": wf, "agent": agent, "step": step}


def _run(policy):
    tier = Tier(policy, chunks=5)
    tier.store(["b1", "b2"], _hint("wfB", "plan", 0))       # the oldest chunks
    tier.store(["a1", "a2"], _hint("wfA", "plan", 0))
    tier.store(["a1", "a2", "a3"], _hint("wfA", "code", 1))
    tier.runtime.end_workflow("wfA")                      # wfA's chunks retire
    tier.store(["c1", "c2", "c3"], _hint("wfC", "plan", 0))  # needs 3 chunks: 3 evictions
    return tier


def test_pbkv_policy_is_resolved_by_name_through_the_factory():
    from vllm.v1.kv_offload.cpu.policies.factory import CachePolicyFactory

    from pbkv_server.backends.vllm.offload_policy import PBKVCachePolicy
    from pbkv_server.backends.vllm.plugin import register

    register()
    assert CachePolicyFactory.get_cache_policy_cls("pbkv") is PBKVCachePolicy
    assert isinstance(Tier("pbkv", 4).manager._policy, PBKVCachePolicy)


def test_retired_chunks_leave_first_and_leaf_first():
    tier = _run("pbkv")
    # wfA's chain is retired: a3 (the leaf) first, then a2, then a1, though a1 was stored first
    # and the three rank alike (retired, private, same last use)
    assert tier.evicted == ["a3", "a2", "a1"]
    assert {tier._name(k) for k in tier.manager._policy.chunks} == {"b1", "b2", "c1", "c2", "c3"}


def test_vllm_lru_drops_the_oldest_instead():
    """Guard against a vacuous test: vLLM's LRU policy on the same trace drops wfB's older chunks."""
    tier = _run("lru")
    assert set(tier.evicted[:2]) == {"b1", "b2"}  # wfB is active, yet its chunks go first


def test_active_chunks_leave_by_ascending_lookahead_score():
    """No workflow ended: wfT's chunks (agent test, score 0) leave before wfP's (agent plan,
    score 0.44112), though wfT stored last."""
    tier = Tier("pbkv", chunks=4)
    tier.store(["p1", "p2"], _hint("wfP", "plan", 0))
    tier.store(["t1", "t2"], _hint("wfT", "test", 0))
    tier.store(["n1", "n2"], _hint("wfN", "plan", 0))
    assert tier.evicted == ["t2", "t1"]


def test_an_impossible_eviction_changes_nothing():
    from vllm.v1.kv_offload.base import ReqContext
    from vllm.v1.kv_offload.cpu.policies.base import ChunkStatus

    from pbkv_server.backends.vllm.offload_policy import PBKVCachePolicy
    from pbkv_server.backends.vllm.workflows import VLLMRuntime

    policy = PBKVCachePolicy(4, pbkv=VLLMRuntime("pbkv-he", predictor=TablePredictor()))
    ctx = ReqContext(req_id="x")
    chunk = ChunkStatus(0)
    chunk.ref_cnt = 0
    policy.insert(_key("k"), chunk, ctx)
    assert policy.evict(2, set()) is None and policy.evict(1, {_key("k")}) is None
    assert policy.get(_key("k")) is chunk
    assert policy.evict(1, set()) == [(_key("k"), chunk)] and policy.get(_key("k")) is None


def test_the_cpu_tier_tells_pbkv_it_exists():
    """``pbkv`` orders the GPU by workflow age only with a host tier (its rule 6): the runtime's
    policy sees none until vLLM builds the CPU offload tier, whose policy then reports its size."""
    from pbkv_server.backends.vllm.offload_policy import PBKVCachePolicy
    from pbkv_server.backends.vllm.workflows import VLLMRuntime

    runtime = VLLMRuntime("pbkv", predictor=TablePredictor())
    assert runtime.policy.context.host_capacity == 0
    PBKVCachePolicy(16, pbkv=runtime)
    assert runtime.policy.context.host_capacity == 16
