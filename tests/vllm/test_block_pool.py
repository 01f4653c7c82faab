"""PBKV's order inside vLLM's real ``KVCacheManager`` / ``BlockPool`` (block size 16)."""

import pytest

pytest.importorskip("vllm.v1.core.block_pool")  # the real vLLM, not this tests/vllm directory

from .conftest import BLOCK, block_tokens  # noqa: E402


def _hint(wf, agent, step):
    return {"workflow_id": wf, "agent": agent, "step": step, "app": "t"}


def test_the_plugin_pool_is_what_the_manager_builds(harness):
    from vllm.v1.core.block_pool import BlockPool

    from pbkv_server.backends.vllm.block_pool import PBKVBlockPool

    assert type(harness("pbkv-he").pool) is PBKVBlockPool
    assert type(harness(None).pool) is BlockPool  # uninstalled again after the build


def test_retired_blocks_go_first_then_ascending_lookahead_score(harness):
    """wfA (2 invocations) ends: its private blocks leave first, chain bottom-up; then the rest by
    Score(c) (PBKV Eq. 2 with the table predictor), not by recency."""
    h = harness("pbkv-he")
    h.serve(block_tokens([1, 2]), _hint("wfA", "plan", 0))
    h.serve(block_tokens([1, 2, 3]), _hint("wfA", "code", 1))
    h.serve(block_tokens([4, 5]), _hint("wfB", "plan", 0))   # score: weights of plan's prediction
    h.serve(block_tokens([6, 7]), _hint("wfC", "test", 0))   # test -> mostly END: lowest score
    h.runtime.end_workflow("wfA")
    node = {label: h.pool.tree.get(bid) for bid, label in h.label.items()}
    # by hand, weight_w(a) = sum_k gamma^(k-1) s^(k) P^(k)(a) with gamma 0.7: after agent plan,
    # agent plan weighs 0.3 + 0.7*0.9*0 + 0.49*(0.9*0.8)*0.4 = 0.44112; after agent test, agent
    # test weighs 0 (P^(1) has no test, then END)
    assert node[4].sc.score == pytest.approx(0.44112) and node[5].sc.score == pytest.approx(0.44112)
    assert node[6].sc.score == 0.0
    assert node[3].sc.retired and node[1].sc.retired and not node[4].sc.retired
    order = h.eviction_order()
    # wfA's blocks are retired: leaf 3 first, then 2, then 1
    assert order[:3] == [3, 2, 1]
    # then the active chains by ascending score: wfC's (0) before wfB's (0.44112), though newer
    assert order[3:] == [7, 6, 5, 4]
    assert len(h.pool.tree) == 0  # every evicted block's record is gone


def test_lookahead_order_differs_from_vllm_lru(harness):
    """Guard against a vacuous test: vLLM's own pool evicts the same trace in LRU order."""
    ops = [([1, 2], _hint("wfB", "plan", 0)), ([6, 7], _hint("wfC", "test", 0))]
    pbkv, lru = harness("pbkv-he"), harness(None)
    for labels, hint in ops:
        pbkv.serve(block_tokens(labels), hint)
        lru.serve(block_tokens(labels), hint)
    # vLLM frees each request tail first and evicts the oldest: wfB's chain first
    assert lru.eviction_order() == [2, 1, 7, 6]
    # PBKV: wfC's blocks score 0 (agent test), wfB's 0.44112 (agent plan): wfC's go first
    assert pbkv.eviction_order() == [7, 6, 2, 1]


def test_block_granularity_only_full_blocks_are_cached_and_evicted_whole(harness):
    h = harness("pbkv-he", num_blocks=8)
    tokens = block_tokens([1, 2], tail=5)  # 2 full blocks + a 5-token tail
    h.serve(tokens, _hint("wfA", "plan", 0))
    assert h.cached() == {1, 2}
    assert all(node.tokens == BLOCK for node in h.pool.tree.nodes.values())
    assert len(h.pool.tree) == 2
    # a request sharing only the first block hits 16 tokens, not 32 or 21
    _, hit = h.serve(block_tokens([1, 9]), None)
    assert hit == BLOCK


@pytest.mark.parametrize("policy", ["pbkv-he", "pbkv-lae", "pbkv"])
def test_prefix_property_a_parent_block_never_leaves_before_its_cached_children(harness, policy):
    """wfA's blocks 1, 2 retire; an anonymous request then extends them with block 3, which is
    active cache. The retired parents rank lower than their child, yet the child leaves first
    (as in the engine core, which evicts leaves only): a cached chain is never cut above a block
    that stays cached."""
    h = harness(policy)
    h.serve(block_tokens([1, 2]), _hint("wfA", "plan", 0))
    h.serve(block_tokens([1, 2]), _hint("wfA", "code", 1))
    h.runtime.end_workflow("wfA")
    h.serve(block_tokens([1, 2, 3]), None)
    h.serve(block_tokens([8]), None)  # an older-looking sibling chain of its own
    node = {label: h.pool.tree.get(bid) for bid, label in h.label.items()}
    policy_ = h.runtime.policy
    assert policy_.priority(node[2]) < policy_.priority(node[3])  # the rule is what keeps 3 first
    order = h.eviction_order()
    assert order == [3, 2, 1, 8]


def test_uncached_free_blocks_are_taken_before_any_cached_block(harness):
    h = harness("pbkv-he", num_blocks=6)  # 5 usable blocks (block 0 is vLLM's null block)
    h.serve(block_tokens([1, 2]), _hint("wfA", "plan", 0))
    got = h.pool.get_new_blocks(3)  # exactly the 3 never-cached blocks
    assert all(b.block_hash is None for b in got)
    assert h.cached() == {1, 2}
    h.pool.free_blocks(got)


def test_workflow_end_over_the_control_socket_reorders_eviction(harness, tmp_path):
    from pbkv_server.backends.vllm.control import ControlInbox, send_end

    h = harness("pbkv-he")
    h.runtime.inbox = ControlInbox(str(tmp_path / "c.sock"))
    try:
        h.serve(block_tokens([1, 2]), _hint("wfA", "plan", 0))
        h.serve(block_tokens([1, 2, 3]), _hint("wfA", "code", 1))
        h.serve(block_tokens([6]), _hint("wfC", "test", 0))
        assert send_end(str(tmp_path / "c.sock"), "wfA", "completed")
        assert "wfA" in h.runtime.book.workflows  # not applied until the pool decides
        assert h.eviction_order()[:3] == [3, 2, 1]
        assert "wfA" not in h.runtime.book.workflows and h.runtime.book.counters["ended"] == 1
    finally:
        h.runtime.inbox.close()


def test_session_id_names_the_workflow_and_bad_hints_are_counted(harness):
    h = harness("pbkv-he")
    h.serve(block_tokens([1]), None, session_id="sess-1")
    h.serve(block_tokens([2]), {"workflow_id": "bad id", "agent": "a", "step": 0})
    h.serve(block_tokens([3]), None)
    counters = h.runtime.book.counters
    assert "sess-1" in h.runtime.book.workflows
    assert counters["malformed"] == 1 and counters["anonymous"] == 1 and counters["invocations"] == 1


def test_kv_hint_envelope_on_a_vllm_request_demotes_a_trajectory(harness):
    """vLLM's own ``Request.kv_hints`` (``KvHintsEnvelope``): a ``kv.demote`` of wfA retires it, so
    its blocks go first as after an end; an unknown action is ignored and counted; a malformed
    envelope is a malformed hint, and the request is still served with its other hints."""
    from vllm.v1.kv_hints import KvHintAction, KvHintsEnvelope

    h = harness("pbkv-he")
    h.serve(block_tokens([1, 2]), _hint("wfA", "plan", 0))
    h.serve(block_tokens([1, 2, 3]), _hint("wfA", "code", 1))
    h.serve(block_tokens([6]), _hint("wfC", "plan", 0))
    # without the hint, by hand (gamma 0.7, table predictor after agent code): block 3 (agent code)
    # scores 0.2 + 0.49*0.9*0.6*0.5 = 0.3323, blocks 1, 2 (plan and code) 0.3323 + 0.7*0.9*0.6 =
    # 0.7103, block 6 (wfC, plan) 0.44112
    assert h.eviction_order() == [3, 6, 2, 1]
    h = harness("pbkv-he")
    h.serve(block_tokens([1, 2]), _hint("wfA", "plan", 0))
    h.serve(block_tokens([1, 2, 3]), _hint("wfA", "code", 1))
    envelope = KvHintsEnvelope(protocol_version="0.1", message_id="m1", actions=[
        KvHintAction(action_id="d", action_type="kv.demote", action_version="1.0", payload={"workflow_id": "wfA"}),
        KvHintAction(action_id="s", action_type="kv.share", action_version="1.0", payload={}),
    ])
    h.serve(block_tokens([6]), _hint("wfC", "plan", 0), kv_hints=envelope)
    assert "wfA" not in h.runtime.book.workflows
    assert h.runtime.kv_hint_counts["demote"] == 1 and h.runtime.kv_hint_counts["ignored"] == 1
    assert h.eviction_order() == [3, 2, 1, 6]
    bad = KvHintsEnvelope(protocol_version="0.1", message_id="", actions=[])
    h.serve(block_tokens([7]), _hint("wfC", "code", 1), kv_hints=bad)
    assert h.runtime.book.counters["malformed"] == 1 and "wfC" in h.runtime.book.workflows
