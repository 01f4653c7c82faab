"""A real UnifiedRadixCache (PBKV backend) on CPU pools evicts by the PBKV rules.

Token ids are chosen unique per branch, so a node is named by its first token.
"""

import pytest

pytest.importorskip("sglang.srt.plugins")  # the real SGLang, not this tests/sglang directory

from .conftest import TablePredictor  # noqa: E402


def _hint(wf, agent, step, app="t"):
    return {"workflow_id": wf, "agent": agent, "step": step, "app": app}


def test_ended_workflows_private_nodes_are_evicted_before_older_active_ones(harness):
    h = harness("pbkv-he", kv_tokens=64)
    h.cache.book.predictor = TablePredictor()
    h.serve([1, 2, 3, 4], _hint("wfA", "plan", 0))   # A: shared prefix [1,2], private [3,4]
    h.serve([1, 2, 5, 6], _hint("wfB", "plan", 0))   # B: private [5,6], most recently used
    h.serve([1, 2, 5, 6], _hint("wfB", "code", 1))   # a second step: B is a multi-step workflow
    h.cache.end_workflow("wfB")
    nodes = h.nodes()
    assert nodes[5].sc.retired and not nodes[1].sc.retired and not nodes[3].sc.retired
    # LRU would evict A's older [3,4]; PBKV evicts the retired [5,6] first.
    assert h.evict_one() == 5
    assert h.eviction_order() == [3, 1]


def test_among_active_nodes_the_lowest_lookahead_score_goes_first(harness):
    from pbkv_contract.prediction import Prediction

    from pbkv_server.engine.scoring import lookahead_score

    h = harness("pbkv-he", kv_tokens=64)
    h.cache.book.predictor = TablePredictor()
    h.serve([10, 11], _hint("wfA", "code", 0))   # A's next agents: test 0.7, ...
    h.serve([20, 21], _hint("wfB", "plan", 0))   # B's next agents: code 0.6, ...
    h.serve([30, 31], _hint("wfC", "test", 0))   # C's next agents: plan 0.2, END 0.8
    nodes = h.nodes()
    # Independent check of each node's Score(c) with the direct Eq. 2 evaluation.
    preds = {wf: Prediction(TablePredictor.TABLE[a]) for wf, a in (("wfA", "code"), ("wfB", "plan"), ("wfC", "test"))}
    expected = {tok: lookahead_score({wf: {agent}}, preds, 0.7)
                for tok, wf, agent in ((10, "wfA", "code"), (20, "wfB", "plan"), (30, "wfC", "test"))}
    for tok, score in expected.items():
        assert nodes[tok].sc.score == pytest.approx(score)
    # by hand: B's node = 0.3 (plan at k=1) + 0 (k=2) + gamma^2 * (1-0.1)(1-0.2) * 0.4 = 0.44112
    assert expected[20] == pytest.approx(0.3 + 0.49 * 0.9 * 0.8 * 0.4)
    assert h.eviction_order() == sorted(expected, key=expected.get)


def test_a_new_prediction_rescores_the_workflows_nodes(harness):
    h = harness("pbkv-he", kv_tokens=64)
    h.cache.book.predictor = TablePredictor()
    h.serve([1, 2], _hint("wfA", "plan", 0))
    before = h.nodes()[1].sc.score
    h.serve([1, 2, 3], _hint("wfA", "test", 1))      # now A's next agent is mostly END
    after = h.nodes()[1].sc.score
    assert before > 0 and after != before
    assert h.nodes()[1].sc.access == {"wfA": {"plan", "test"}}


def test_a_split_node_keeps_the_workflow_access_on_both_halves(harness):
    h = harness("pbkv-he", kv_tokens=64)
    h.cache.book.predictor = TablePredictor()
    h.serve([1, 2, 3, 4], _hint("wfA", "plan", 0))
    h.serve([1, 2, 9], None)  # anonymous request splits [1,2,3,4] into [1,2] + [3,4]
    nodes = h.nodes()
    assert list(nodes[1].key.token_ids) == [1, 2] and list(nodes[3].key.token_ids) == [3, 4]
    assert nodes[1].sc.access == {"wfA": {"plan"}} and nodes[3].sc.access == {"wfA": {"plan"}}
    assert nodes[9].sc is None  # anonymous: no record
    assert h.cache.book.counters["anonymous"] == 1


def test_sglang_checkpoint_records_the_agent_on_prompt_and_output_nodes(harness):
    h = harness("pbkv-he", kv_tokens=64)
    h.run_request([1, 2, 3, 4], [7, 8], _hint("wfA", "plan", 0))
    nodes = h.nodes()
    # SGLang splits the inserted sequence at the prompt boundary; both parts carry A_w(c)
    assert list(nodes[1].key.token_ids) == [1, 2, 3, 4] and list(nodes[7].key.token_ids) == [7, 8]
    assert nodes[1].sc.access == {"wfA": {"plan"}} and nodes[7].sc.access == {"wfA": {"plan"}}
    assert h.cache.book.counters["invocations"] == 1  # match and checkpoint: one invocation


def test_lae_evicts_retired_nodes_used_by_fewer_workflows_first(harness):
    h = harness("pbkv-lae", kv_tokens=64)
    h.serve([1, 2, 3], _hint("wfA", "plan", 0))
    h.serve([1, 2, 4], _hint("wfB", "plan", 0))
    h.serve([7, 8], _hint("wfC", "plan", 0))
    for wf in ("wfA", "wfB"):
        h.cache.end_workflow(wf)
    # retired [3] and [4] (1 workflow each, [3] older) go first, then [1,2] (2 workflows), then active [7,8]
    assert h.eviction_order() == [3, 4, 1, 7]


def test_malformed_hints_are_served_anonymously_and_counted(harness):
    h = harness("pbkv-he", kv_tokens=64)
    h.serve([1, 2], {"workflow_id": "bad id with spaces", "agent": "a", "step": 0})
    h.serve([3, 4], {"workflow_id": "w", "agent": "a", "step": -1})
    assert h.cache.book.counters["malformed"] == 2
    assert h.nodes()[1].sc is None and h.nodes()[3].sc is None
    assert not h.cache.book.workflows


def test_end_workflow_is_idempotent_and_rejects_unknown_status(harness):
    h = harness("pbkv-he", kv_tokens=64)
    h.serve([1, 2], _hint("wfA", "plan", 0))
    assert h.cache.end_workflow("wfA") is True
    assert h.cache.end_workflow("wfA") is False
    assert h.cache.end_workflow("never-seen") is False
    with pytest.raises(ValueError):
        h.cache.end_workflow("wfA", "exploded")


def test_idle_workflows_are_retired(harness):
    h = harness("pbkv-he", kv_tokens=64, policy_config={"idle_retire_s": 10.0})
    now = [100.0]
    h.cache.book.clock = lambda: now[0]
    h.serve([1, 2], _hint("wfA", "plan", 0))
    h.serve([1, 2], _hint("wfA", "code", 1))  # multi-step: its cache counts as retired once it ends
    now[0] = 111.0
    h.serve([3, 4], _hint("wfB", "plan", 0))  # any invocation checks idleness first
    assert "wfA" not in h.cache.book.workflows and h.nodes()[1].sc.retired
    assert h.cache.book.counters["retired_idle"] == 1


def test_flush_drops_every_node_record(harness):
    h = harness("pbkv-he", kv_tokens=64)
    h.serve([1, 2], _hint("wfA", "plan", 0))
    rec = h.nodes()[1].sc
    h.cache.reset()
    assert h.nodes() == {}
    assert rec.access == {}  # forgotten: the board no longer tracks it
    h.cache.end_workflow("wfA")  # still fine after a flush
