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


def _action(action_type, payload=None, version="1.0", action_id="a"):
    return {"action_id": action_id, "action_type": action_type, "action_version": version,
            "payload": {} if payload is None else payload}


def test_unknown_types_and_versions_are_counted_never_an_error_and_malformed_is_a_malformed_hint():
    rt = VLLMRuntime("pbkv-he")
    envelope = {"protocol_version": "0.1", "message_id": "m", "actions": [
        _action("kv.share"), _action("kv.evict", version="2.0"), _action("kv.retain")]}
    hints, _ = rt.begin_request(_request("r0", "wf-u", 0, envelope))
    assert hints.workflow_id == "wf-u" and "wf-u" in rt.book.workflows  # the evict@2.0 was not applied
    assert rt.kv_hint_counts == {"retain": 1, "demote": 0, "evict": 0, "fetch": 0, "ignored": 2}
    # an envelope of a protocol version the parser does not know: all its actions ignored
    rt.begin_request(_request("r1", "wf-u", 1, {"protocol_version": "7.0", "message_id": "m",
                                                "actions": [_action("kv.evict"), _action("kv.fetch")]}))
    assert rt.kv_hint_counts["ignored"] == 4 and rt.kv_hint_counts["evict"] == 0
    before = rt.book.counters["malformed"]
    hints, _ = rt.begin_request(_request("r2", "wf-u", 2, {"message_id": "m", "actions": []}))
    assert rt.book.counters["malformed"] == before + 1
    assert hints.workflow_id == "wf-u" and rt.book.workflows["wf-u"].history[-1] == "lead"  # its hints still count


def test_retain_and_fetch_of_another_workflow_restart_its_idle_clock():
    """A trajectory in a long tool call: without the hints it would be retired after
    ``idle_retire_s``; a retain (or fetch) from another request keeps it active, and a hint never
    starts a workflow."""
    from pbkv_server.backends.vllm.settings import PluginSettings

    now = [0.0]
    rt = VLLMRuntime("pbkv-he", PluginSettings(idle_retire_s=10.0), clock=lambda: now[0])
    rt.begin_request(_request("r0", "wf-tool", 0))
    rt.begin_request(_request("r1", "wf-quiet", 0))
    now[0] = 8.0
    rt.begin_request(_request("r2", "wf-other", 0, {"protocol_version": "0.1", "message_id": "m", "actions": [
        _action("kv.retain", {"workflow_id": "wf-tool"}), _action("kv.fetch", {"session_id": "never-seen"})]}))
    now[0] = 12.0  # wf-quiet idle for 12 s > 10 s; wf-tool for 4 s since the retain
    assert rt.book.retire_idle() == 1
    assert "wf-tool" in rt.book.workflows and "wf-quiet" not in rt.book.workflows
    assert "never-seen" not in rt.book.workflows
    assert rt.kv_hint_counts == {"retain": 1, "demote": 0, "evict": 0, "fetch": 1, "ignored": 0}
    now[0] = 18.5  # 10.5 s after the retain: it runs out like any activity
    assert rt.book.retire_idle() == 2 and "wf-tool" not in rt.book.workflows  # wf-other too (8.0)


def test_the_sdk_learns_the_middleware_and_its_envelope_reaches_the_runtime():
    """SDK -> PBKVMiddleware -> engine core: the first answer teaches the SDK what the middleware
    advertises; the next request's envelope travels as ``vllm_xargs.pbkv_kv_hints`` and the
    runtime reads its retain and prefetch."""
    import asyncio

    import httpx

    import pbkv_sdk
    from pbkv_sdk import kv_hints as kvout
    from pbkv_server.backends.vllm.http import PBKVMiddleware

    bodies = []

    async def engine(scope, receive, send):  # stands for vLLM's API server
        bodies.append(json.loads((await receive())["body"]))
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": b'{"choices": []}'})

    async def run():
        transport = pbkv_sdk.AsyncPBKVTransport(httpx.ASGITransport(app=PBKVMiddleware(engine)), body_hints=True)
        async with httpx.AsyncClient(transport=transport, base_url="http://vllm.test") as client:
            with pbkv_sdk.workflow(app="app", workflow_id="wf-e2e", server_url="http://127.0.0.1:1", kv_hints=True):
                for _ in range(2):
                    await client.post("/v1/chat/completions", json={"model": "m", "messages": []})

    kvout.reset()
    asyncio.run(run())
    assert kvout.advertised("http://vllm.test").reads("kv.prefetch", "1.0")
    kvout.reset()
    assert "pbkv_kv_hints" not in bodies[0]["vllm_xargs"]
    rt = VLLMRuntime("pbkv-he")
    for i, body in enumerate(bodies):
        rt.begin_request(SimpleNamespace(request_id=f"r{i}", session_id=None,
                                         sampling_params=SimpleNamespace(extra_args=body["vllm_xargs"])))
    assert rt.book.workflows["wf-e2e"].history == ["unknown", "unknown"]  # the SDK's agent outside any agent
    assert rt.kv_hint_counts == {"retain": 1, "demote": 0, "evict": 0, "fetch": 1, "ignored": 0}
