"""Unit checks of SDK helpers: header name fitting, response parsing, fail-open recording."""

from __future__ import annotations

import gzip
import json
import logging

import httpx
import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pbkv_sdk
from pbkv_contract.hints import MAX_FIELD_CHARS, decode_name, encode_name
from pbkv_sdk.recorder import CallCapture, TraceRecorder, flush_all
from pbkv_sdk.stamping import fit_name
from pbkv_contract.trace import iter_trace

from .fake_openai import FakeOpenAI


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.text(min_size=1, max_size=300))
def test_any_agent_name_becomes_a_valid_header_that_decodes_to_a_prefix_of_it(name):
    fitted = fit_name(name)
    header = encode_name(fitted)  # raises if over 128 chars
    assert len(header) <= MAX_FIELD_CHARS
    assert decode_name(header) == fitted and name.startswith(fitted) and fitted


def test_recorder_reads_usage_from_a_gzip_compressed_response(tmp_path):
    recorder = TraceRecorder(tmp_path / "t.jsonl")
    body = {"usage": {"prompt_tokens": 11, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 8}}, "choices": []}
    recorder.submit(
        CallCapture(
            app="a", workflow_id="w", step=4, agent="x", t_start=1.0, t_first=None, t_end=3.0,
            request_body=json.dumps({"messages": [{"role": "user", "content": "hi"}]}).encode(),
            response_body=gzip.compress(json.dumps(body).encode()), content_encoding="gzip",
        )
    )
    recorder.close()
    [rec] = list(iter_trace(tmp_path / "t.jsonl", strict=True))
    assert (rec.step, rec.prompt_tokens, rec.completion_tokens, rec.cached_tokens) == (4, 11, 3, 8)
    assert rec.ttft_s == 2.0  # no token seen: first byte = end of a non-streamed response


def test_failed_calls_are_not_recorded(tmp_path):
    recorder = TraceRecorder(tmp_path / "t.jsonl")
    recorder.submit(CallCapture("a", "w", 0, "x", 1.0, None, 2.0, b"{}", b'{"error": {}}', status_code=500))
    recorder.close()
    assert (tmp_path / "t.jsonl").read_text() == ""


def test_an_unwritable_trace_path_keeps_hints_flowing_with_one_warning(fake_llm: FakeOpenAI, tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("x")  # a file where a directory is needed: open() fails
    client = openai.OpenAI(base_url=fake_llm.base_url, api_key="x", http_client=pbkv_sdk.http_client())
    with caplog.at_level(logging.WARNING, logger="pbkv_sdk"):
        with pbkv_sdk.workflow(app="a", workflow_id="w-io", server_url=fake_llm.url, trace_path=blocker / "t.jsonl"):
            with pbkv_sdk.agent("x"):
                client.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
                client.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
    assert [fake_llm.hints_of(r)[:3] for r in fake_llm.requests] == [("w-io", "x", 0), ("w-io", "x", 1)]
    assert len([r for r in caplog.records if "cannot record" in r.getMessage()]) == 1


def test_non_llm_requests_are_neither_stamped_nor_counted_as_steps():
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={})

    client = httpx.Client(transport=pbkv_sdk.PBKVTransport(httpx.MockTransport(handler)))
    with pbkv_sdk.workflow(app="a", workflow_id="w-paths", server_url="http://127.0.0.1:1") as wf:
        client.get("http://llm/v1/models")
        client.post("http://llm/v1/chat/completions", json={"messages": []})
        client.post("http://llm/generate", json={"text": "x"})
        assert wf.steps == 2
    assert [r.headers.get("x-pbkv-step") for r in seen] == [None, "0", "1"]
    flush_all(1.0)


def test_unparseable_responses_are_skipped_with_one_warning_and_good_calls_still_recorded(tmp_path, caplog):
    recorder = TraceRecorder(tmp_path / "t.jsonl")
    request = json.dumps({"messages": [{"role": "user", "content": "hi"}]}).encode()
    good = json.dumps({"usage": {"prompt_tokens": 5, "completion_tokens": 1}, "choices": []}).encode()
    with caplog.at_level(logging.WARNING, logger="pbkv_sdk"):
        for step, body in enumerate([b"{not json", good, b"{also not json", good]):
            recorder.submit(CallCapture("a", "w", step, "x", 1.0, None, 2.0, request, body))
        recorder.close()
    assert [r.step for r in iter_trace(tmp_path / "t.jsonl", strict=True)] == [1, 3]
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "could not record a call" in warnings[0]
