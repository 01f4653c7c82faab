"""``pbkv-bench live-compare`` (pbkv_server.loadgen.live_compare): server settings, the requests the
simulator replays, the measured timing, and the command against a stand-in SGLang server.

The comparison with a real SGLang server runs in .venv-sglang (tests/sglang/test_live_compare.py).
"""

import json
import os

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse
from typer.testing import CliRunner

from pbkv_contract.trace import InvocationRecord, TraceWriter, WorkflowEndRecord
from pbkv_server.loadgen.live_replay import PromptBook, ReplaySummary, RequestResult
from pbkv_server.loadgen.live_compare import matched_records, measured_profile, server_settings

INFO = {"radix_eviction_policy": "pbkv-he", "max_total_num_tokens": 4096, "page_size": 1,
        "radix_eviction_policy_config": '{"gamma": 0.5, "horizon": 2}', "enable_hierarchical_cache": False}


def test_server_settings_map_the_policy_and_read_capacity_and_plugin_config():
    s = server_settings(INFO)
    assert (s.policy, s.sim_policy, s.device_tokens, s.page_size) == ("pbkv-he", "he", 4096, 1)
    assert (s.gamma, s.horizon, s.predictor) == (0.5, 2, "context")
    assert server_settings({**INFO, "radix_eviction_policy": "lru", "radix_eviction_policy_config": None}).sim_policy == "lru"
    assert server_settings({**INFO, "radix_eviction_policy": "pbkv-lae"}).sim_policy == "lae"
    assert server_settings({**INFO, "page_size": 16}).page_size == 16  # the simulator caches whole pages too


@pytest.mark.parametrize(("change", "message"), [
    ({"page_size": 0}, "page size is 0; expected >= 1"),
    ({"enable_hierarchical_cache": True}, "HiCache"),
    ({"radix_eviction_policy": "lfu"}, "no simulator counterpart"),
    ({"radix_eviction_policy_config": '{"bogus": 1}'}, "unknown key"),
])
def test_server_settings_refuse_what_the_simulator_cannot_match(change, message):
    with pytest.raises(ValueError, match=message):
        server_settings({**INFO, **change})
    with pytest.raises(ValueError, match="is the target SGLang"):
        server_settings({"policy": "lru"})


def _inv(wf, step, hashes, prompt, out, t0, t1):
    return InvocationRecord(app="a", workflow_id=wf, step=step, agent=f"g{step}", t_start=t0, t_end=t1,
                            prompt_tokens=prompt, completion_tokens=out, prefix_hashes=hashes)


def test_matched_records_are_what_the_live_replay_sent():
    # wf x: two steps, 10 s of tool time between them; block "h1" first appears with 6 tokens
    # (prompt 12 over 2 blocks), and wf y's record spreads 20 tokens over it and "h3" (10 + 10).
    records = [
        _inv("x", 0, ["h1", "h2"], 12, 50, 100.0, 101.0),
        _inv("y", 0, ["h1", "h3"], 20, 5, 100.5, 102.0),
        _inv("x", 1, ["h1", "h2", "h4"], 30, 7, 111.0, 113.0),
        WorkflowEndRecord(app="a", workflow_id="x", t=150.0, status="failed"),
    ]
    out = matched_records(records, PromptBook(), gap_scale=0.5, max_output_tokens=8)
    inv = {(r.workflow_id, r.step): r for r in out if isinstance(r, InvocationRecord)}
    assert inv[("x", 0)].block_tokens == [6, 6]
    assert inv[("y", 0)].block_tokens == [6, 10] and inv[("y", 0)].prompt_tokens == 16  # h1 keeps its 6
    assert inv[("x", 1)].block_tokens == [6, 6, 10]
    assert [inv[k].completion_tokens for k in (("x", 0), ("y", 0), ("x", 1))] == [8, 5, 7]
    # the 10 s gap becomes 5 s; durations are kept; the end follows the last invocation at once
    assert (inv[("x", 1)].t_start, inv[("x", 1)].t_end) == (106.0, 108.0)
    ends = {r.workflow_id: r for r in out if isinstance(r, WorkflowEndRecord)}
    assert (ends["x"].t, ends["x"].status) == (108.0, "failed")
    assert (ends["y"].t, ends["y"].status) == (102.0, "completed")


def test_measured_profile_takes_decode_time_per_token_and_prefill_rate_from_the_replay():
    results = [RequestResult("w", 0, "a", True, ttft_s=0.5, latency_s=1.5, prompt_tokens=1000, cached_tokens=0,
                             completion_tokens=11),  # 0.1 s per token after the first
               RequestResult("w", 1, "a", True, ttft_s=0.5, latency_s=0.8, prompt_tokens=1200, cached_tokens=200,
                             completion_tokens=4),  # 0.1 s per token
               RequestResult("w", 2, "a", False)]
    summary = ReplaySummary("generate", "http://x", 1, 1, 3, 1, 3.0, None, None, None, None, None, 2200, 200, 0.09,
                            results=results)
    p = measured_profile(summary, 4096)
    assert p.decode_base_s == pytest.approx(0.1) and p.decode_per_seq_s == 0
    assert p.prefill_tokens_per_s == pytest.approx(2000 / 1.0)
    assert (p.device_kv_tokens, p.host_kv_tokens) == (4096, 0)


def test_command_prints_live_and_simulated_hit_rates_side_by_side(tmp_path, serve_asgi):
    """A stand-in SGLang answers from a dict of seen prefixes (no eviction: pool far larger than the
    trace), so the live hit rate is exact prefix reuse, which the simulator must reproduce."""
    seen: list[list[int]] = []
    app = FastAPI()

    @app.get("/server_info")
    async def info():
        return {**INFO, "radix_eviction_policy": "lru", "max_total_num_tokens": 100000}

    @app.post("/generate")
    async def generate(request: Request):
        ids = (await request.json())["input_ids"]
        cached = max((len(os.path.commonprefix([ids, old])) for old in seen), default=0)
        seen.append(ids)

        async def stream():
            yield "data: " + json.dumps({"text": "a", "meta_info": {"prompt_tokens": len(ids), "cached_tokens": cached,
                                                                     "completion_tokens": 1}}) + "\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")

    @app.post("/pbkv/v1/workflows/{workflow_id}/end", status_code=204)
    async def end(workflow_id: str):
        return None

    server = serve_asgi(app)
    trace = tmp_path / "t.jsonl"
    with TraceWriter(trace) as writer:
        for w in range(2):
            for step in range(3):
                hashes = ["sys"] + [f"{w}-{k}" for k in range(step + 1)]
                writer.write(_inv(f"w{w}", step, hashes, 40 * len(hashes), 1, 10.0 * step, 10.0 * step + 1))
    out = tmp_path / "cmp.json"
    from pbkv_server.cli.bench import app as cli

    result = CliRunner().invoke(cli, ["live-compare", str(trace), "--target", server.url, "--concurrency", "1",
                                      "--vocab-size", "32000", "--json", str(out)], terminal_width=200)
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    # by hand: prompts of 80, 120, 160 tokens per workflow; hits 0, 80, 120 for w0 and 40, 80, 120 for w1
    assert data["live"]["cached_tokens"] == 440 and data["live"]["prompt_tokens"] == 720
    assert data["sim"]["hit_rate"] == pytest.approx(440 / 720) == data["live"]["hit_rate"]
    assert data["sim"]["prompt_tokens"] == 720
    assert "SGLang (live)" in result.output and "simulator" in result.output and "+0.0%" in result.output
    # the serving figures on both sides, in bench_serving's names: 6 one-token requests each
    assert data["live"]["serving"]["completed"] == 6 == data["sim"]["completed"]
    assert data["live"]["serving"]["total_input"] == 720 == data["sim"]["total_input"]
    assert "p99_ttft_ms" in result.output and "request_throughput" in result.output


def test_command_refuses_an_unwritable_json_path_before_replaying(tmp_path):
    from pbkv_server.cli.bench import app as cli

    trace = tmp_path / "t.jsonl"
    with TraceWriter(trace) as writer:
        writer.write(_inv("w", 0, ["a"], 10, 1, 0.0, 1.0))
    result = CliRunner().invoke(cli, ["live-compare", str(trace), "--target", "http://127.0.0.1:9", "--json",
                                      str(tmp_path)], terminal_width=200)
    assert result.exit_code == 2 and "is a directory" in result.output
