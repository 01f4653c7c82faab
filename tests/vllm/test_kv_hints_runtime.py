"""The vLLM backend's runtime reads the KV-hint envelope through the backends' one reader
(``WorkflowBook.kv_hints``); runs without vLLM (the runtime imports none of it): the envelope
from HTTP arrives as ``extra_args["pbkv_kv_hints"]`` (JSON), as :mod:`.http` puts it there."""

import json
from types import SimpleNamespace

from pbkv_server.backends.vllm.workflows import KV_HINTS_XARG, VLLMRuntime


def _request(rid, wf, step, envelope=None):
    extra = {"pbkv": {"workflow_id": wf, "agent": "lead", "step": step, "app": "app"}}
    if envelope is not None:
        extra[KV_HINTS_XARG] = json.dumps(envelope)
    return SimpleNamespace(request_id=rid, session_id=None, sampling_params=SimpleNamespace(extra_args=extra))


def test_an_evict_of_the_requests_own_workflow_waits_for_request_finished():
    """vLLM's block actions: ``kv.evict`` with ``execute_at: request_completion`` of the request's
    own workflow retires it at the connector's ``request_finished``, not at arrival (its blocks
    would go unrecorded); one of another workflow (``kv.demote`` of ``session_id``) at once."""
    rt = VLLMRuntime("pbkv-he")
    rt.begin_request(_request("r0", "other", 0))
    envelope = {"protocol_version": "1.0", "message_id": "m", "actions": [
        {"action_id": "e", "action_type": "kv.evict", "action_version": "1.0",
         "payload": {"execute_at": "request_completion", "include_current_request": True, "block_hashes": []}},
        {"action_id": "d", "action_type": "kv.demote", "action_version": "1.0", "payload": {"session_id": "other"}}]}
    rt.begin_request(_request("r1", "wf-v", 0, envelope))
    assert "wf-v" in rt.book.workflows and "other" not in rt.book.workflows
    assert rt.kv_hint_counts == {"retain": 0, "demote": 1, "evict": 1, "fetch": 0, "ignored": 0}
    assert rt.request_done("r1") and "wf-v" not in rt.book.workflows
    assert not rt.request_done("r1")
