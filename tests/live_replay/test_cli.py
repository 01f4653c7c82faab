"""``pbkv-bench live-replay`` (pbkv_server.loadgen.live_replay) against servers started on 127.0.0.1.

Runs in the main .venv: the chat path against a real ``pbkv-server`` (sim engine), the SGLang
``/generate`` path against a small recording server that answers in SGLang's streaming format.
"""

import asyncio
import dataclasses
import json

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse
from typer.testing import CliRunner

from pbkv_contract.trace import InvocationRecord, TraceWriter, WorkflowEndRecord
from pbkv_contract.blocks import block_token_counts, prefix_hashes
from pbkv_server.loadgen.live_replay import PromptBook, block_token_ids, replay


def _records():
    """Two workflows of three steps; each step's prompt extends the previous one (prefix sharing)."""
    recs = []
    for w in range(2):
        prompt = f"system prompt shared by every workflow. task {w}: " + "lorem ipsum " * 20
        for step, agent in enumerate(("plan", "code", "test")):
            prompt += f" step {step} by {agent}: " + "dolor sit amet " * 15
            hashes = prefix_hashes(prompt, 64)
            recs.append(InvocationRecord(app="t", workflow_id=f"wf{w}", step=step, agent=agent, t_start=10.0 * step,
                                         t_end=10.0 * step + 1, prompt_tokens=len(prompt) // 4, completion_tokens=3,
                                         prefix_hashes=hashes,
                                         block_tokens=block_token_counts(len(prompt) // 4, len(hashes))))
        recs.append(WorkflowEndRecord(app="t", workflow_id=f"wf{w}", t=40.0, status="failed" if w else "completed"))
    return recs


def test_equal_hash_chains_give_equal_token_and_text_prefixes():
    a, b, c = _records()[:3]
    book = PromptBook()
    ids_a, ids_b, ids_c = book.token_ids(a), book.token_ids(b), book.token_ids(c)
    shared = len(a.prefix_hashes) - 1  # every block of A but its last (partial) one is in B and C
    assert a.prefix_hashes[:shared] == b.prefix_hashes[:shared] != b.prefix_hashes[: shared + 1]
    n_shared = sum(book.block_counts(a)[:shared])
    assert ids_a[:n_shared] == ids_b[:n_shared] == ids_c[:n_shared]
    assert ids_a[n_shared] != ids_b[n_shared]  # the next block differs (different hash)
    assert book.text(b)[: 5 * n_shared] == book.text(a)[: 5 * n_shared] == book.text(c)[: 5 * n_shared]
    # lengths follow the recorded prompt_tokens up to the spread of the blocks
    for rec, ids in ((a, ids_a), (b, ids_b), (c, ids_c)):
        assert abs(len(ids) - rec.prompt_tokens) <= 2 * max(rec.tokens_per_block())
        assert len(book.text(rec)) == 5 * len(ids)  # one 4-letter word + space per token
    assert block_token_ids("ab12", 5, 32000) == block_token_ids("ab12", 5, 32000) != block_token_ids("ab13", 5, 32000)
    assert all(1000 <= t < 32000 for t in ids_a)


def test_live_replay_against_pbkv_server_reports_cache_hits_and_ends_workflows(tmp_path):
    from pbkv_server.http import ServerConfig, run_in_thread

    trace = tmp_path / "t.jsonl"
    with TraceWriter(trace) as writer:
        for rec in _records():
            writer.write(rec)
    out = tmp_path / "summary.json"
    with run_in_thread(ServerConfig(port=0, policy="pbkv", idle_retire_s=None)) as server:
        from pbkv_server.cli.bench import app

        result = CliRunner().invoke(app, ["live-replay", str(trace), "--target", server.url, "--concurrency", "2",
                                          "--json", str(out), "--slo-ttft", "600000"])
        assert result.exit_code == 0, result.output
        stats = server.service.driver.stats()
    summary = json.loads(out.read_text())
    assert summary["api"] == "chat"  # no /get_model_info on pbkv-server
    assert summary["requests"] == 6 and summary["errors"] == 0 and summary["end_signals"] == 2
    by_step = {(r["workflow_id"], r["step"]): r for r in summary["results"]}
    for w in ("wf0", "wf1"):
        assert by_step[(w, 0)]["ttft_s"] > 0
        # later steps re-send the earlier prompt: the server must report cached tokens for them
        assert by_step[(w, 1)]["cached_tokens"] > 0 and by_step[(w, 2)]["cached_tokens"] > 0
    assert 0 < summary["hit_rate"] < 1
    assert stats.retired_workflows == 2  # both end signals reached the engine
    # the bench_serving figures, from the requests' own times (mean of their TTFTs, in ms)
    serving, results = summary["serving"], summary["results"]
    assert serving["completed"] == 6 and serving["total_input"] == summary["prompt_tokens"]
    assert serving["mean_ttft_ms"] == pytest.approx(1e3 * sum(r["ttft_s"] for r in results) / 6)
    assert serving["p99_e2e_latency_ms"] <= 1e3 * max(r["latency_s"] for r in results) + 1e-6
    assert serving["slo_attainment"] == 1.0  # every first token within ten minutes
    assert "p99_ttft_ms" in result.output


def test_generate_api_sends_input_ids_recorded_lengths_and_hints(serve_asgi):
    seen = []
    app = FastAPI()

    @app.get("/get_model_info")
    async def info():
        return {"model_path": "stub"}

    @app.post("/generate")
    async def generate(request: Request):
        body = await request.json()
        seen.append(body)
        n = len(body["input_ids"])

        async def stream():
            yield "data: " + json.dumps({"text": "a", "meta_info": {"prompt_tokens": n, "cached_tokens": n // 2,
                                                                     "completion_tokens": 1}}) + "\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")

    ends = []

    @app.post("/pbkv/v1/workflows/{workflow_id}/end", status_code=204)
    async def end(workflow_id: str, request: Request):
        ends.append((workflow_id, (await request.json())["status"]))

    server = serve_asgi(app)
    records = _records()
    # the stub's model_path has no config.json: the vocabulary is given (no silent 32,000 guess)
    summary = asyncio.run(replay(records, server.url, concurrency=1, api="auto", vocab_size=32000))
    assert summary.api == "generate" and summary.errors == 0 and summary.requests == 6
    first = seen[0]
    inv = records[0]
    assert first["input_ids"] == PromptBook().token_ids(inv)
    assert first["sampling_params"]["max_new_tokens"] == inv.completion_tokens
    assert first["sampling_params"]["ignore_eos"] is True
    assert first["sampling_params"]["custom_params"]["pbkv"] == {"workflow_id": "wf0", "agent": "plan", "step": 0,
                                                                 "app": "t"}
    assert sorted(ends) == [("wf0", "completed"), ("wf1", "failed")]
    assert summary.cached_tokens == sum(len(b["input_ids"]) // 2 for b in seen)
    assert summary.hit_rate == pytest.approx(summary.cached_tokens / summary.prompt_tokens)
    seen.clear()
    asyncio.run(replay(records, server.url, concurrency=2, api="generate", max_output_tokens=2, vocab_size=32000))
    assert {b["sampling_params"]["max_new_tokens"] for b in seen} == {2}  # recorded 3, capped at 2
    # a call the trace flags internal (a speaker selection) is replayed flagged, the others not
    seen.clear()
    records[1] = dataclasses.replace(records[1], internal=True)
    asyncio.run(replay(records, server.url, concurrency=1, api="generate", vocab_size=32000))
    flags = {(b["sampling_params"]["custom_params"]["pbkv"]["workflow_id"],
              b["sampling_params"]["custom_params"]["pbkv"]["step"]): b["sampling_params"]["custom_params"]["pbkv"].get("internal")
             for b in seen}
    assert flags == {("wf0", 0): None, ("wf0", 1): True, ("wf0", 2): None, ("wf1", 0): None, ("wf1", 1): None, ("wf1", 2): None}


def test_generate_ids_stay_below_the_served_models_vocabulary(tmp_path, serve_asgi):
    """SGLang's /get_model_info names the model folder; its config.json gives the vocabulary (a
    tiny model's 8,192 entries: ids drawn below the default 32,000 would fail every request)."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"vocab_size": 8192}))
    seen = []
    app = FastAPI()

    @app.get("/get_model_info")
    async def info():
        return {"model_path": str(model)}

    @app.post("/generate")
    async def generate(request: Request):
        seen.extend((await request.json())["input_ids"])

        async def stream():
            yield "data: " + json.dumps({"text": "a", "meta_info": {"completion_tokens": 1}}) + "\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")

    server = serve_asgi(app)
    summary = asyncio.run(replay(_records(), server.url, concurrency=2))
    assert summary.errors == 0 and len(seen) > 500
    assert max(seen) < 8192 and min(seen) >= 1000
    assert max(seen) > 7000  # drawn from the whole range, not from a smaller default


def test_unreadable_trace_is_a_clear_error(tmp_path):
    from pbkv_server.cli.bench import app

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type":"invocation","v":7}\n')
    result = CliRunner().invoke(app, ["live-replay", str(bad), "--target", "http://127.0.0.1:9"])
    assert result.exit_code == 2
    assert "version" in result.output


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--target", "notaurl"], "--target 'notaurl' is not an http(s) URL"),
        (["--target", "localhost:18311"], "--target 'localhost:18311' is not an http(s) URL"),
        (["--timeout", "0"], "--timeout must be a finite number of seconds > 0, got 0"),
        (["--timeout", "-1"], "--timeout must be a finite number of seconds > 0, got -1"),
        (["--limit", "-1"], "--limit must be >= 1 workflows, got -1"),
        (["--limit", "0"], "--limit must be >= 1 workflows, got 0"),
        (["--gap-scale", "-1"], "--gap-scale must be a finite number >= 0"),
        (["--max-output-tokens", "0"], "--max-output-tokens must be >= 1, got 0"),
        (["--vocab-size", "1000"], "--vocab-size must exceed 1000"),
    ],
)
def test_bad_arguments_are_refused_before_the_trace_is_read(tmp_path, flags, message):
    from pbkv_server.cli.bench import app

    missing = tmp_path / "not-read.jsonl"  # never opened: the argument check comes first
    args = ["live-replay", str(missing), "--target", "http://127.0.0.1:9", *flags]
    result = CliRunner().invoke(app, args, terminal_width=400)
    assert result.exit_code == 2, result.output
    assert message in result.output and "No such file" not in result.output


def test_replay_function_checks_its_arguments_too():
    with pytest.raises(ValueError, match="--timeout must be"):
        asyncio.run(replay([], "http://127.0.0.1:9", concurrency=1, timeout_s=0))
    with pytest.raises(ValueError, match="is not an http"):
        asyncio.run(replay([], "127.0.0.1:9", concurrency=1))


def test_a_dead_target_says_why_every_request_failed(tmp_path):
    # nothing listens on a freshly freed loopback port: each request gets a connection error, and
    # the console names it (with how many failed alike) instead of pointing at --json only
    from pbkv_server.cli.bench import app
    from pbkv_server.testing.local_cluster import free_port

    trace = tmp_path / "t.jsonl"
    with TraceWriter(trace) as writer:
        for rec in _records():
            writer.write(rec)
    result = CliRunner().invoke(app, ["live-replay", str(trace), "--target", f"http://127.0.0.1:{free_port()}",
                                      "--api", "chat", "--timeout", "5"], terminal_width=400)
    assert result.exit_code == 1, result.output
    assert "every request failed; the first: ConnectError" in result.output
    assert "(6 failed the same way; --json lists them all)" in result.output
