"""Conservative prefetch planning (the host->device copy itself needs a GPU and HiCache)."""

from types import SimpleNamespace

import pytest

pytest.importorskip("sglang.srt.plugins")  # the real SGLang, not this tests/sglang directory


def test_plan_takes_highest_value_first_within_min_of_space_and_bandwidth(plugins_loaded):
    from pbkv_server.backends.sglang.prefetch import Candidate, plan_prefetch

    cands = [Candidate("a", 40, 0.9), Candidate("b", 30, 0.5), Candidate("c", 20, 0.7), Candidate("d", 10, 0.0)]
    # S_a = 30 free + 40 retired = 70, S_bw = 100: a (40) then c (20); b (30) no longer fits; d has no value
    assert [c.node_id for c in plan_prefetch(cands, 30, 40, 100)] == ["a", "c"]
    # bandwidth is the binding limit: S = min(70, 35) -> a (40) is skipped, c (20) fits, b (30) does not
    assert [c.node_id for c in plan_prefetch(cands, 30, 40, 35)] == ["c"]
    assert plan_prefetch(cands, 0, 0, 1000) == []  # no free or retired space: never displaces active cache
    assert len(plan_prefetch([Candidate(i, 1, 1.0) for i in range(50)], 100, 0, 100, max_loads=16)) == 16


def test_scan_counts_only_fully_retired_unlocked_device_subtrees(harness):
    from pbkv_server.backends.sglang.prefetch import scan_tree

    h = harness("pbkv", kv_tokens=64)
    h.serve([1, 2, 3, 4], {"workflow_id": "A", "agent": "a", "step": 0})
    h.serve([1, 2, 5, 6, 7], {"workflow_id": "B", "agent": "a", "step": 0})
    h.serve([8, 9], {"workflow_id": "B", "agent": "b", "step": 1})
    h.cache.end_workflow("B")
    tree = h.cache.tree_core
    cands, retired = scan_tree(tree, tree.eviction_strategy.engine_policy)
    # retired and evictable without touching A: [5,6,7] and [8,9]; [1,2] is still A's
    assert retired == 3 + 2
    assert cands == []  # no host tier on CPU pools without HiCache


def test_prefetcher_measures_decode_step_time_and_rate_limits_rounds(harness):
    from pbkv_server.backends.sglang.prefetch import MIN_ROUND_INTERVAL_S, Prefetcher

    h = harness("pbkv", kv_tokens=64, policy_config={"default_step_s": 0.05, "kv_bytes_per_token": 1000})
    p = Prefetcher(h.cache)
    first = p.on_decode_batch(now=10.0)
    assert first is not None and first.loaded_tokens == 0
    assert first.free_tokens == 64 and first.bandwidth_tokens == int(25e9 * 0.05 / 1000)
    assert p.on_decode_batch(now=10.0 + MIN_ROUND_INTERVAL_S / 2) is None  # too soon for another round
    assert p.step_s == pytest.approx(0.8 * 0.05 + 0.2 * MIN_ROUND_INTERVAL_S / 2)


def test_scheduler_hook_skips_caches_without_a_host_tier(harness):
    from pbkv_server.backends.sglang.prefetch import after_next_batch

    h = harness("pbkv", kv_tokens=64)
    decode = SimpleNamespace(batch_to_run=SimpleNamespace(forward_mode=SimpleNamespace(is_decode=lambda: True)))
    after_next_batch(decode, SimpleNamespace(tree_cache=h.cache))
    assert getattr(h.cache, "_pbkv_prefetcher", None) is None  # HiCache off: nothing to load from


def test_scan_offers_host_nodes_under_device_parents_with_their_one_step_value(harness):
    from pbkv_contract.prediction import Prediction
    from sglang.srt.mem_cache.unified_cache.components.base import ComponentType

    from .conftest import TablePredictor
    from pbkv_server.engine.scoring import one_step_value
    from pbkv_server.backends.sglang.prefetch import scan_tree

    h = harness("pbkv", kv_tokens=64)
    h.cache.book.predictor = TablePredictor()
    h.serve([1, 2, 3], {"workflow_id": "A", "agent": "plan", "step": 0})
    h.serve([1, 2, 4, 5], {"workflow_id": "A", "agent": "code", "step": 1})
    leaf = h.nodes()[4]
    # what a HiCache demotion leaves behind: KV on host only (the copy itself needs a GPU)
    data = leaf.component_data[ComponentType.FULL]
    data.host_value, data.value = data.value.clone(), None
    assert leaf.evicted and leaf.backuped
    tree = h.cache.tree_core
    policy = tree.eviction_strategy.engine_policy
    # after "code" the next agent is test 0.7 / code 0.2 / END 0.1; the leaf was used by "code"
    value = one_step_value({"A": {"code"}}, {"A": Prediction(TablePredictor.TABLE["code"])})
    assert value == pytest.approx(0.2)
    cands, _ = scan_tree(tree, policy)
    assert [(c.node_id, c.tokens) for c in cands] == [(leaf.id, 2)]
    assert cands[0].value == pytest.approx(value)
    assert scan_tree(tree, policy, min_tokens=3)[0] == []  # smaller than min_prefetch_tokens
    h.serve([1, 2, 3, 7], {"workflow_id": "A", "agent": "test", "step": 2})  # next: plan 0.2 / END 0.8
    assert scan_tree(tree, policy)[0] == []  # value 0 now: never prefetched
