"""Hints survive SGLang's OpenAI conversion; the end route lives on SGLang's app and reaches the
scheduler's PBKV cache through SGLang's own IPC codec and request dispatcher."""

from types import SimpleNamespace
from unittest import mock

import pytest

pytest.importorskip("sglang.srt.plugins")  # the real SGLang, not this tests/sglang directory

HINT = {"workflow_id": "wf-1", "agent": "planner", "step": 2, "app": "hover"}


@pytest.fixture
def serving_chat(plugins_loaded):
    """A real ``OpenAIServingChat`` over a mock tokenizer manager. Only the chat-template step
    (``_process_messages``, which needs a real tokenizer) is replaced by fixed prompt ids."""
    from sglang.srt.entrypoints.openai.protocol import MessageProcessingResult
    from sglang.srt.entrypoints.openai.serving_chat import OpenAIServingChat

    tm = mock.MagicMock()
    tm.config_value.return_value = None
    tm.model_config.get_default_sampling_params.return_value = {}
    tm.model_config.is_multimodal = False
    serving = OpenAIServingChat(tm, mock.MagicMock())
    serving._process_messages = lambda request, is_multimodal, **kw: MessageProcessingResult(
        prompt="hi", prompt_ids=[1, 2, 3], image_data=None, audio_data=None, video_data=None,
        modalities=[], stop=[])
    return serving


def _scheduler_hints(adapted):
    """Follow the request as the scheduler does: sampling params dict -> SamplingParams -> Req."""
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams

    from pbkv_server.backends.sglang.workflows import hints_of_request

    params = SamplingParams(**{k: v for k, v in adapted.sampling_params.items() if v is not None})
    req = Req("r1", "", adapted.input_ids, params)
    return hints_of_request(req)


def test_body_hints_survive_chat_completion_to_generate_conversion(serving_chat):
    from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest
    from sglang.srt.managers.io_struct import GenerateReqInput

    request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}],
                                    custom_params={"pbkv": HINT}, max_tokens=4)
    adapted, _ = serving_chat._convert_to_internal_request(request, None)
    assert isinstance(adapted, GenerateReqInput)
    assert adapted.sampling_params["custom_params"]["pbkv"] == HINT
    hints, reason = _scheduler_hints(adapted)
    assert reason is None
    assert (hints.workflow_id, hints.agent, hints.step, hints.app) == ("wf-1", "planner", 2, "hover")


def test_header_hints_are_copied_into_custom_params_by_the_plugin_hook(serving_chat):
    from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest

    raw = SimpleNamespace(headers={"X-PBKV-Workflow-Id": "wf-2", "X-PBKV-Agent": "code%20r",
                                   "X-PBKV-Step": "1", "X-PBKV-App": "swe"})
    request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}])
    adapted, _ = serving_chat._convert_to_internal_request(request, raw)
    hints, _ = _scheduler_hints(adapted)
    assert (hints.workflow_id, hints.agent, hints.step, hints.app) == ("wf-2", "code r", 1, "swe")


def test_body_hints_win_over_headers_and_bad_headers_are_ignored(serving_chat):
    from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest

    raw = SimpleNamespace(headers={"X-PBKV-Workflow-Id": "other", "X-PBKV-Agent": "x", "X-PBKV-Step": "0"})
    request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}],
                                    custom_params={"pbkv": HINT})
    adapted, _ = serving_chat._convert_to_internal_request(request, raw)
    assert adapted.sampling_params["custom_params"]["pbkv"] == HINT
    bad = SimpleNamespace(headers={"X-PBKV-Workflow-Id": "bad id", "X-PBKV-Agent": "x", "X-PBKV-Step": "0"})
    adapted, _ = serving_chat._convert_to_internal_request(
        ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}]), bad)
    assert not (adapted.sampling_params.get("custom_params") or {})


def test_end_route_is_registered_on_sglangs_app(plugins_loaded):
    from sglang.srt.entrypoints.http_server import app

    paths = {getattr(r, "path", None): getattr(r, "methods", set()) for r in app.routes}
    assert "POST" in paths["/pbkv/v1/workflows/{workflow_id}/end"]


class _FakeTokenizerManager:
    def __init__(self):
        self.sent = []

    async def _async_dispatch_to_scheduler(self, obj):
        self.sent.append(obj)


def test_end_route_answers_204_and_dispatches_to_the_scheduler(plugins_loaded):
    from fastapi.testclient import TestClient
    from sglang.srt.entrypoints import http_server

    from pbkv_server.backends.sglang.ipc import PBKVEndWorkflowReq

    tm = _FakeTokenizerManager()
    with mock.patch.object(http_server, "_global_state", SimpleNamespace(tokenizer_manager=tm)):
        client = TestClient(http_server.app)  # no lifespan: the real server startup is not needed
        r = client.post("/pbkv/v1/workflows/wf-9/end", json={"status": "failed"})
        assert r.status_code == 204
        assert client.post("/pbkv/v1/workflows/wf-9/end").status_code == 204  # idempotent, body optional
        assert client.post("/pbkv/v1/workflows/wf-9/end", json={"status": "exploded"}).status_code == 400
        assert client.post("/pbkv/v1/workflows/bad%20id/end").status_code == 400
    assert [(m.workflow_id, m.status) for m in tm.sent] == [("wf-9", "failed"), ("wf-9", "completed")]
    assert all(isinstance(m, PBKVEndWorkflowReq) for m in tm.sent)


def test_sglangs_app_advertises_the_envelope_actions_the_plugin_reads(plugins_loaded):
    """``X-PBKV-KV-Hints`` on SGLang's answers (the plugin's middleware) and ``GET /pbkv/v1/kv_hints``."""
    from fastapi.testclient import TestClient
    from sglang.srt.entrypoints import http_server

    from pbkv_contract.kv_hint_caps import advertisement
    from pbkv_server.backends.sglang.ipc import KV_HINT_EFFECTS

    client = TestClient(http_server.app)
    r = client.get("/pbkv/v1/kv_hints")
    assert r.status_code == 200 and r.headers["X-PBKV-KV-Hints"] == advertisement()
    doc = r.json()
    assert doc["advertisement"] == advertisement()
    assert {a["action_type"]: a["effect"] for a in doc["actions"]}["kv.pin"] == KV_HINT_EFFECTS["retain"]
    assert client.post("/pbkv/v1/workflows/bad%20id/end").headers["X-PBKV-KV-Hints"] == advertisement()


def test_end_message_crosses_sglangs_msgpack_ipc_and_retires_the_workflow(harness):
    from sglang.srt.managers.io_struct import msgpack_decode, msgpack_encode
    from sglang.utils import TypeBasedDispatcher

    from pbkv_server.backends.sglang.ipc import PBKVEndWorkflowReq, extend_scheduler_dispatcher

    h = harness("pbkv-he", kv_tokens=64)
    h.serve([1, 2], {"workflow_id": "wf-9", "agent": "a", "step": 0})
    h.serve([1, 2], {"workflow_id": "wf-9", "agent": "b", "step": 1})  # multi-step: retired once it ends
    decoded = msgpack_decode(msgpack_encode(PBKVEndWorkflowReq(workflow_id="wf-9", status="failed")))
    assert isinstance(decoded, PBKVEndWorkflowReq) and decoded.status == "failed"
    scheduler = SimpleNamespace(tree_cache=h.cache, _request_dispatcher=TypeBasedDispatcher([]))
    extend_scheduler_dispatcher(None, scheduler)  # what the AFTER hook on init_request_dispatcher does
    assert scheduler._request_dispatcher(decoded) is None  # no reply to the tokenizer
    assert "wf-9" not in h.cache.book.workflows and h.nodes()[1].sc.retired


def test_an_sglang_session_is_the_workflow_and_sglangs_close_session_ends_it(harness):
    """A real ``Req`` with SGLang's top-level ``session_id`` and no PBKV hints is an invocation of
    the workflow of that id (agent ``assistant``, steps counted); PBKV hints win where both are
    sent; the AFTER hook on ``Scheduler.close_session`` ends the session's workflow."""
    from array import array

    from sglang.srt.managers.io_struct import CloseSessionReqInput
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams
    from sglang.srt.mem_cache.radix_cache import RadixKey
    from sglang.srt.sampling.sampling_params import SamplingParams

    from pbkv_server.backends.sglang.ipc import end_session_workflow

    h = harness("pbkv-he", kv_tokens=64)

    def serve(rid, tokens, custom=None):
        req = Req(rid, "", array("q", tokens), SamplingParams(max_new_tokens=1, custom_params=custom),
                  session_id="conv-7")
        h.cache.match_prefix(MatchPrefixParams(key=RadixKey(array("q", tokens)), req=req))
        h.cache.observe_request(req, h.insert(tokens).last_device_node)

    serve("a", [1, 2])
    serve("b", [1, 2, 3])
    serve("c", [9], {"pbkv": {"workflow_id": "wf-x", "agent": "plan", "step": 0}})
    wf = h.cache.book.workflows["conv-7"]
    assert wf.history == ["assistant", "assistant"] and wf.last_step == 1
    assert h.nodes()[1].sc.access == {"conv-7": {"assistant"}} and "wf-x" in h.cache.book.workflows
    # SGLang's own Scheduler.close_session (patched with the plugin's AFTER hook), on a scheduler
    # without --enable-session-radix-cache and with no streaming session of that id
    from sglang.srt.managers.scheduler import Scheduler

    closed = []
    scheduler = SimpleNamespace(tree_cache=h.cache, enable_session_radix_cache=False,
                                session_controller=mock.MagicMock(close=closed.append))
    scheduler.session_controller.__contains__ = lambda self, sid: False
    Scheduler.close_session(scheduler, CloseSessionReqInput(session_id="conv-7"))
    assert closed and "conv-7" not in h.cache.book.workflows and h.nodes()[1].sc.retired
    end_session_workflow(None, scheduler, CloseSessionReqInput(session_id="conv-7"))  # idempotent
    assert "wf-x" in h.cache.book.workflows
    # the other way round: with --enable-session-radix-cache, a PBKV end closes the session of the
    # same id (a client sending both forms names its session after its workflow)
    from pbkv_server.backends.sglang.ipc import PBKVEndWorkflowReq, handle_end_workflow

    h.cache.enable_session_radix_cache = True
    with mock.patch.object(h.cache, "release_radix_session") as release:
        handle_end_workflow(scheduler, PBKVEndWorkflowReq(workflow_id="wf-x"))
    release.assert_called_once_with("wf-x")
    assert "wf-x" not in h.cache.book.workflows

