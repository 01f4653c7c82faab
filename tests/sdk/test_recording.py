"""Trace recording by the stamping transport: record contents, concurrency, truncated files."""

from __future__ import annotations

import asyncio
import json
import logging
import threading

import openai

import pbkv_sdk
from pbkv_sdk.recorder import flush_all
from pbkv_contract.trace import InvocationRecord, WorkflowEndRecord, iter_trace
from pbkv_contract.blocks import prefix_hashes
from pbkv_contract.features import request_features

from .fake_openai import FakeOpenAI

AGENTS = ("planner", "coder", "tester")


def _strict_records(path):
    return list(iter_trace(path, strict=True))


def test_recorded_invocation_copies_server_usage_and_hashes_the_request(fake_llm: FakeOpenAI, tmp_path):
    fake_llm.chunk_delay_s = 0.02
    trace = tmp_path / "t.jsonl"
    client = openai.OpenAI(base_url=fake_llm.base_url, api_key="x", http_client=pbkv_sdk.http_client())
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "one two three four"}]
    with pbkv_sdk.workflow(app="demo", workflow_id="wf-rec", server_url=fake_llm.url, trace_path=trace):
        with pbkv_sdk.agent("planner"):
            client.chat.completions.create(model="m", messages=messages)
        with pbkv_sdk.agent("coder"):
            stream = client.chat.completions.create(
                model="m", messages=messages, stream=True, stream_options={"include_usage": True}
            )
            for _ in stream:
                pass
    assert flush_all(10.0)
    records = _strict_records(trace)
    assert [type(r).__name__ for r in records] == ["InvocationRecord", "InvocationRecord", "WorkflowEndRecord"]
    plain, streamed, end = records
    # prompt words: "You are terse." (3) + "one two three four" (4); reply "Thought: done\nFinal Answer: reply n" (6 words)
    for rec, agent, step in ((plain, "planner", 0), (streamed, "coder", 1)):
        assert (rec.app, rec.workflow_id, rec.agent, rec.step) == ("demo", "wf-rec", agent, step)
        assert (rec.prompt_tokens, rec.completion_tokens, rec.cached_tokens) == (7, 6, 3)
        assert rec.prefix_hashes == prefix_hashes(messages)
        assert rec.features == request_features(messages)
        assert rec.t_start <= rec.t_end and rec.text is None
    # streamed: 5 content chunks 20 ms apart, first token after the first delay -> TTFT well below the total
    assert 0.0 < streamed.ttft_s < (streamed.t_end - streamed.t_start) - 0.05
    assert (end.workflow_id, end.status) == ("wf-rec", "completed") and end.t >= streamed.t_end


def test_streams_without_usage_fall_back_to_counted_chunks_and_estimated_prompt_and_unknown_cached_tokens(fake_llm: FakeOpenAI, tmp_path):
    trace = tmp_path / "t.jsonl"
    client = openai.OpenAI(base_url=fake_llm.base_url, api_key="x", http_client=pbkv_sdk.http_client())
    messages = [{"role": "user", "content": "x" * 100}]
    with pbkv_sdk.workflow(app="demo", server_url=fake_llm.url, trace_path=trace):
        for _ in client.chat.completions.create(model="m", messages=messages, stream=True):
            pass
    assert flush_all(10.0)
    rec = _strict_records(trace)[0]
    # canonical text "<|user|>" + 100 x + "<|end|>" = 115 chars -> ceil(115 / 4) = 29 tokens; reply split at " " = 5 chunks
    assert (rec.prompt_tokens, rec.completion_tokens) == (29, 5)
    assert rec.cached_tokens is None  # no count anywhere: unknown, not 0 (trace format v1)


def _check_unmixed(fake_llm: FakeOpenAI, records, n_workflows: int) -> None:
    """Each workflow: steps 0..2 by planner, coder, tester, on the wire and in the trace."""
    by_wf: dict[str, list] = {}
    for req in fake_llm.requests:
        wf, agent, step, app = fake_llm.hints_of(req)
        # the request text names the workflow it was made in: hints must agree with it
        assert req.body["messages"][0]["content"] == f"{wf} {agent}"
        by_wf.setdefault(wf, []).append((step, agent))
    assert len(by_wf) == n_workflows
    for seq in by_wf.values():
        assert sorted(seq) == [(0, "planner"), (1, "coder"), (2, "tester")]
    invs = [r for r in records if isinstance(r, InvocationRecord)]
    ends = [r for r in records if isinstance(r, WorkflowEndRecord)]
    assert len(invs) == 3 * n_workflows and sorted(e.workflow_id for e in ends) == sorted(by_wf)
    for rec in invs:
        assert rec.prefix_hashes == prefix_hashes([{"role": "user", "content": f"{rec.workflow_id} {rec.agent}"}])
    ended_at = {e.workflow_id: i for i, e in enumerate(records) if isinstance(e, WorkflowEndRecord)}
    for i, rec in enumerate(records):  # a workflow's end line follows all its invocations
        if isinstance(rec, InvocationRecord):
            assert i < ended_at[rec.workflow_id]


def test_eight_threaded_workflows_never_mix_hints_and_their_trace_validates(fake_llm: FakeOpenAI, tmp_path):
    trace = tmp_path / "t.jsonl"
    client = openai.OpenAI(base_url=fake_llm.base_url, api_key="x", http_client=pbkv_sdk.http_client())
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            with pbkv_sdk.workflow(app="demo", workflow_id=f"thr-{i}", server_url=fake_llm.url, trace_path=trace) as wf:
                barrier.wait(10)
                for agent in AGENTS:
                    with pbkv_sdk.agent(agent):
                        messages = [{"role": "user", "content": f"{wf.workflow_id} {agent}"}]
                        if i % 2:
                            client.chat.completions.create(model="m", messages=messages)
                        else:
                            for _ in client.chat.completions.create(model="m", messages=messages, stream=True):
                                pass
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    assert flush_all(10.0)
    _check_unmixed(fake_llm, _strict_records(trace), 8)


def test_eight_asyncio_workflows_never_mix_hints_and_their_trace_validates(fake_llm: FakeOpenAI, tmp_path):
    trace = tmp_path / "t.jsonl"
    fake_llm.chunk_delay_s = 0.005  # interleave the workflows' streams

    async def one(client: openai.AsyncOpenAI, i: int) -> None:
        with pbkv_sdk.workflow(app="demo", workflow_id=f"aio-{i}", server_url=fake_llm.url, trace_path=trace) as wf:
            for agent in AGENTS:
                with pbkv_sdk.agent(agent):
                    messages = [{"role": "user", "content": f"{wf.workflow_id} {agent}"}]
                    if i % 2:
                        await client.chat.completions.create(model="m", messages=messages)
                    else:
                        async for _ in await client.chat.completions.create(model="m", messages=messages, stream=True):
                            pass
                    await asyncio.sleep(0)

    async def main() -> None:
        client = openai.AsyncOpenAI(base_url=fake_llm.base_url, api_key="x", http_client=pbkv_sdk.async_http_client())
        await asyncio.gather(*(one(client, i) for i in range(8)))

    asyncio.run(main())
    assert flush_all(10.0)
    _check_unmixed(fake_llm, _strict_records(trace), 8)


def test_a_trace_cut_mid_line_reads_with_one_warning(fake_llm: FakeOpenAI, tmp_path, caplog):
    trace = tmp_path / "t.jsonl"
    client = openai.OpenAI(base_url=fake_llm.base_url, api_key="x", http_client=pbkv_sdk.http_client())
    with pbkv_sdk.workflow(app="demo", server_url=fake_llm.url, trace_path=trace), pbkv_sdk.agent("a"):
        for i in range(3):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": f"q{i}"}])
    assert flush_all(10.0)
    data = trace.read_bytes()
    lines = data.splitlines(keepends=True)
    assert len(lines) == 4 and all(json.loads(line) for line in lines)  # whole lines only
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(b"".join(lines[:3]) + lines[3][: len(lines[3]) // 2])
    with caplog.at_level(logging.WARNING, logger="pbkv_contract.trace"):
        records = list(iter_trace(cut))
    assert [r.step for r in records] == [0, 1, 2]
    assert len(caplog.records) == 1 and "cut.jsonl:4" in caplog.records[0].getMessage()
