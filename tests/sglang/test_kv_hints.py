"""The engines' KV-hint envelope in the SGLang plugin: SGLang's own ``Req.kv_hints``
(``KvHintsEnvelope``, sgl-project/sglang#38891) and, from the OpenAI routes, ``custom_params
["kv_hints"]``, read by the one parser (:func:`pbkv_contract.hints.parse_kv_hints`)."""

from array import array

import pytest

pytest.importorskip("sglang.srt.plugins")  # the real SGLang, not this tests/sglang directory

from .conftest import CacheHarness  # noqa: E402


def _hint(wf, agent, step):
    return {"workflow_id": wf, "agent": agent, "step": step, "app": "app"}


def _finish_and_checkpoint(h, req, prompt, output):
    """What the scheduler does for a finished request: a req_to_token row, then ``checkpoint``."""
    from sglang.srt.managers.schedule_batch import FINISH_LENGTH
    from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams
    from sglang.srt.mem_cache.radix_cache import RadixKey

    match = h.cache.match_prefix(MatchPrefixParams(key=RadixKey(array("q", prompt)), req=req))
    req.last_node = match.last_device_node
    req.lock = h.cache.lock(match.last_device_node)
    pool = h.cache.req_to_token_pool
    pool.alloc([req])
    n = len(prompt) + len(output)
    pool.write((req.kv.req_pool_idx, slice(0, n)), h.allocator.alloc(n))
    req.kv.kv_allocated_len = n
    req.full_untruncated_fill_ids = array("q", list(prompt) + list(output))
    req.finished_reason = FINISH_LENGTH(len(output))
    h.cache.checkpoint(req, up_to=n)


def test_native_envelope_demotes_another_session_now_and_derefs_its_own_after_finishing(plugins_loaded):
    """SGLang's KvHintManager shapes on ``Req.kv_hints``: ``kv.demote`` of ``payload.session_id``
    retires that workflow at the request's first sight; ``kv.deref`` (the request's own session)
    only once the request finished and its KV is in the tree, so the request's own path is
    recorded under its workflow first; an unknown action is counted as ignored."""
    from sglang.srt.managers.kv_hints import KvHintAction, KvHintsEnvelope

    h = CacheHarness("pbkv-he", kv_tokens=256)
    book = h.cache.book
    h.serve([1, 2, 3, 4], _hint("agent-42", "worker", 0))
    req = h.request([9, 8, 7, 6], _hint("wf-s", "lead", 0))
    req.kv_hints = KvHintsEnvelope(protocol_version="0.1", message_id="m", actions=[
        KvHintAction(action_id="demote-0", action_type="kv.demote", action_version="1.0",
                     payload={"session_id": "agent-42"}),
        KvHintAction(action_id="d0", action_type="kv.deref", action_version="1.0", payload={}),
        KvHintAction(action_id="s0", action_type="kv.share", action_version="1.0", payload={}),
    ])
    _finish_and_checkpoint(h, req, [9, 8, 7, 6], [5])
    assert "agent-42" not in book.workflows and "wf-s" not in book.workflows
    assert book.kv_hint_counts == {"retain": 0, "demote": 1, "evict": 1, "fetch": 0, "ignored": 1}
    assert book.counters["ended"] == 2
    node = h.nodes()[9]
    assert node.sc is not None and node.sc.n_ever == 1  # the request's path was recorded before the end


def test_deref_waits_for_the_finished_request(plugins_loaded):
    from sglang.srt.managers.kv_hints import KvHintAction, KvHintsEnvelope

    h = CacheHarness("pbkv-he", kv_tokens=256)
    req = h.request([4, 4, 4], _hint("wf-d", "lead", 0))
    req.kv_hints = KvHintsEnvelope(protocol_version="0.1", message_id="m", actions=[
        KvHintAction(action_id="d0", action_type="kv.deref", action_version="1.0", payload={})])
    h.cache.observe_request(req, None)  # admission: seen, not finished
    assert "wf-d" in h.cache.book.workflows
    assert h.cache.book.finish_request(req) and "wf-d" not in h.cache.book.workflows
    assert not h.cache.book.finish_request(req)  # once only


def test_openai_route_envelope_in_custom_params_retain_sets_priority_and_malformed_is_counted(plugins_loaded):
    """The OpenAI routes carry no ``kv_hints`` field: the envelope rides in ``custom_params``.
    A ``kv.retain`` with ``payload.priority`` becomes the ``Req.priority`` SGLang's priority
    eviction reads; a malformed envelope is a malformed hint while the request's hints apply."""
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams

    h = CacheHarness("pbkv-he", kv_tokens=256)
    book = h.cache.book
    envelope = {"protocol_version": "1.0", "message_id": "m", "actions": [
        {"action_id": "r", "action_type": "kv.retain", "action_version": "1.0",
         "payload": {"priority": 7, "ttl_seconds": 30, "execute_at": "request_completion"}}]}
    req = Req("r1", "", array("q", [3, 3]), SamplingParams(
        max_new_tokens=1, custom_params={"pbkv": _hint("wf-r", "lead", 0), "kv_hints": envelope}))
    h.cache.observe_request(req, None)
    assert req.priority == 7 and book.kv_hint_counts["retain"] == 1 and "wf-r" in book.workflows
    before = book.counters["malformed"]
    bad = Req("r2", "", array("q", [3, 3]), SamplingParams(
        max_new_tokens=1, custom_params={"pbkv": _hint("wf-r", "lead", 1), "kv_hints": {"actions": []}}))
    h.cache.observe_request(bad, None)
    assert book.counters["malformed"] == before + 1
    assert book.workflows["wf-r"].history == ["lead", "lead"]  # its hints still applied
