"""``pbkv-sdk import ghcp``: the Copilot coding-agent release's format to trace v1.

Fixtures are written here to the release's schema (analysis/GitHubCopilotCodingAgents/schema.json);
no real data is used or committed.
"""

from __future__ import annotations

import gzip
import json

import pytest
from typer.testing import CliRunner

from pbkv_contract.marginals import trace_marginals
from pbkv_contract.trace import InvocationRecord, WorkflowEndRecord, read_trace
from pbkv_sdk.cli import app
from pbkv_sdk.importers.ghcp import import_ghcp

runner = CliRunner()


def seg(t, role, seq, n):
    return {"type": t, "role": role, "sequenceId": seq, "token_len": n}


def call(mid, ts, prompt, completion, cached, meta, initiator="agent", duration_ms=2000.0):
    return {"message_id": mid, "timestamp": ts, "duration_ms": duration_ms, "initiator_type": initiator,
            "model": "Model A", "result": "Success", "status_code": "OK",
            "tokens": {"total": prompt + completion, "prompt": prompt, "completion": completion, "cached": cached,
                       "cached_pct": 100.0 * cached / prompt if prompt else 0.0},
            "message_metadata": meta}


def batch(req, ts, ms, n=1):
    return {"timestamp": ts, "duration_ms": ms, "auto_continue": True, "result": "Success", "request_id": req,
            "function_calls": [{"name": "read_file", "status": 1, "duration_ms": ms / n} for _ in range(n)]}


SYSTEM, CTX, USER = seg("System", "system", 0, 3000), seg("Context", "user", 1, 1000), seg("UserMessage", "user", 2, 96)
# Session A, turn 0: call m1 (4,096 tokens), tool batch 1.5 s, call m2 = m1's segments + output + tool
# result (2,048 more), tool batch 0.5 s, call m3 = m2 + 1,024 more. Turn 1: m4 = m3's segments + a new
# user message. With 1,024-token blocks: m1 = 4 blocks; m2 shares all 4 (4,096 tokens); m3 shares m2's
# 6 blocks (6,144); m4 shares m3's 7 blocks (7,168).
HIST1 = seg("History", "assistant", 3, 2048)
HIST2 = seg("FunctionCalls", "tool", 4, 1024)
USER2 = seg("UserMessage", "user", 5, 500)
SESSION_A = {
    "session_id": "sessA", "date": "2026-06-01",
    "turns": [
        {"turn_id": "ta0",
         "llm_calls": [
             call("m1", "2026-06-01T10:00:00.000Z", 4096, 300, 0, [SYSTEM, CTX, USER], "user"),
             call("m2", "2026-06-01T10:00:03.500Z", 6144, 200, 4000, [SYSTEM, CTX, USER, HIST1]),
             call("m3", "2026-06-01T10:00:06.000Z", 7168, 100, 6100, [SYSTEM, CTX, USER, HIST1, HIST2]),
         ],
         "tool_batches": [batch("m1", "2026-06-01T10:00:02.000Z", 1500.0),
                          batch("m2", "2026-06-01T10:00:05.500Z", 500.0, n=2)]},
        {"turn_id": "ta1",
         "llm_calls": [call("m4", "2026-06-01T10:05:00.000Z", 7668, 50, 7000,
                            [SYSTEM, CTX, USER, HIST1, HIST2, USER2], "user")],
         "tool_batches": []},
    ],
}
# Session B: one call whose segments sum to less than its prompt (the rest is its own segment).
SESSION_B = {"session_id": "sessB", "date": "2026-06-01",
             "turns": [{"turn_id": "tb0", "llm_calls": [call("n1", "2026-06-01T11:00:00Z", 5000, 10, 0,
                                                             [SYSTEM], "user")], "tool_batches": []}]}


def write_shard(path, lines, gz=True):
    path.parent.mkdir(parents=True, exist_ok=True)
    data = "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines).encode()
    path.write_bytes(gzip.compress(data) if gz else data)


@pytest.fixture
def release(tmp_path):
    root = tmp_path / "downloaded_data"
    write_shard(root / "date=2026-06-01" / "shard-0000.jsonl.gz", [SESSION_A])
    write_shard(root / "date=2026-06-01" / "shard-0001.jsonl.gz", [SESSION_B])
    return root


def test_import_maps_sessions_turns_calls_and_shares_prefixes(release, tmp_path):
    out = tmp_path / "ghcp.jsonl"
    summary = import_ghcp(release, out)
    records = read_trace(out)
    calls = [r for r in records if isinstance(r, InvocationRecord)]
    assert [(c.workflow_id, c.step, c.agent) for c in calls] == [
        ("sessA-t0", 0, "user"), ("sessA-t0", 1, "agent"), ("sessA-t0", 2, "agent"), ("sessA-t1", 0, "user"),
        ("sessB-t0", 0, "user")]
    assert [c.session_id for c in calls] == ["sessA"] * 4 + ["sessB"]
    assert [c.prompt_tokens for c in calls] == [4096, 6144, 7168, 7668, 5000]
    assert [c.cached_tokens for c in calls] == [0, 4000, 6100, 7000, 0]
    assert [len(c.prefix_hashes) for c in calls] == [4, 6, 7, 8, 5]
    assert all(sum(c.block_tokens) == c.prompt_tokens for c in calls)
    # same segments -> same blocks: each call starts with all of the previous call's full blocks
    assert calls[1].prefix_hashes[:4] == calls[0].prefix_hashes
    assert calls[2].prefix_hashes[:6] == calls[1].prefix_hashes
    assert calls[3].prefix_hashes[:7] == calls[2].prefix_hashes
    # another session's identical-looking system segment is not the same content
    assert calls[4].prefix_hashes[0] != calls[0].prefix_hashes[0]
    # times: timestamps and durations; the trace's gaps hold the tool batches
    assert calls[0].t_end - calls[0].t_start == pytest.approx(2.0)
    assert calls[1].t_start - calls[0].t_end == pytest.approx(1.5)
    ends = [r for r in records if isinstance(r, WorkflowEndRecord)]
    assert [e.workflow_id for e in ends] == ["sessA-t0", "sessA-t1", "sessB-t0"]
    assert (summary.sessions, summary.workflows, summary.invocations, summary.tool_batches) == (2, 3, 5, 2)
    assert summary.tool_batch_ms == pytest.approx(2000.0)
    # both cached shares, by hand: recorded (0+4000+6100+7000+0)/30076; the trace's own
    # (4096+6144+7168)/30076 (first calls of sessions repeat nothing)
    prompt = 4096 + 6144 + 7168 + 7668 + 5000
    assert summary.recorded_cached_share == pytest.approx(17100 / prompt)
    assert summary.trace_cached_share == pytest.approx((4096 + 6144 + 7168) / prompt)
    assert trace_marginals(records)["repeated_prefix_share"] == pytest.approx(summary.trace_cached_share)


def test_calls_without_timestamps_follow_the_tool_batch(tmp_path):
    s = json.loads(json.dumps(SESSION_A))
    s["turns"] = s["turns"][:1]
    for c in s["turns"][0]["llm_calls"][1:]:
        c["timestamp"] = None
    write_shard(tmp_path / "x.jsonl", [s], gz=False)
    import_ghcp(tmp_path / "x.jsonl", tmp_path / "o.jsonl")
    calls = [r for r in read_trace(tmp_path / "o.jsonl") if isinstance(r, InvocationRecord)]
    # m1 ends at 2.0 s, its batch takes 1.5 s; m2 ends 2.0 s later, its batch 0.5 s
    assert [round(c.t_start - calls[0].t_start, 3) for c in calls] == [0.0, 3.5, 6.0]


def test_bad_input_one_line_nothing_else_lost(release, tmp_path):
    bad_call = call("z1", "2026-06-01T12:00:00Z", 100, 1, 0, [])
    del bad_call["tokens"]["prompt"]
    shard = release / "date=2026-06-02" / "shard-0000.jsonl.gz"
    write_shard(shard, ["{not json", json.dumps([1, 2]), {"session_id": "empty", "turns": []},
                        {"session_id": "sessC", "turns": [{"turn_id": "c0", "llm_calls": [bad_call]}]}, SESSION_B | {"session_id": "sessD"}])
    # a truncated shard: its sessions before the cut are kept
    whole = gzip.compress((json.dumps(SESSION_B | {"session_id": "sessE"}) + "\n" + json.dumps(SESSION_A) + "\n").encode())
    (release / "date=2026-06-02" / "shard-0001.jsonl.gz").write_bytes(whole[: len(whole) - 40])
    out = tmp_path / "ghcp.jsonl"
    result = runner.invoke(app, ["import", "ghcp", str(release), "--out", str(out)])
    assert result.exit_code == 0, result.output
    lines = [l for l in result.output.splitlines() if l.strip()]
    assert len(lines) == 2 and "skipped 5 item(s)" in lines[0] and "line is not JSON" in lines[0]
    assert "cached share: recorded" in lines[1] and "trace's own repeated prefix" in lines[1]
    sessions = {r.session_id for r in read_trace(out) if isinstance(r, InvocationRecord)}
    assert sessions == {"sessA", "sessB", "sessD", "sessE"}
    assert "Traceback" not in result.output


def test_nothing_usable_writes_nothing(tmp_path):
    write_shard(tmp_path / "d" / "s.jsonl.gz", ["garbage"])
    out = tmp_path / "o.jsonl"
    keep = json.dumps({"type": "meta", "v": 1, "writer": "x"}) + "\n"  # an earlier trace
    out.write_text(keep)
    result = runner.invoke(app, ["import", "ghcp", str(tmp_path / "d"), "--out", str(out)])
    assert result.exit_code == 2
    assert "no session imported" in result.output and "line is not JSON" in result.output
    assert out.read_text() == keep and not (tmp_path / "o.jsonl.partial").exists()


def test_segment_prefix_hashes_share_exactly_the_equal_leading_blocks():
    from pbkv_contract.blocks import segment_prefix_hashes

    a, ta = segment_prefix_hashes([("s", 300), ("u", 100)], 128)
    b, tb = segment_prefix_hashes([("s", 300), ("u", 100), ("h", 200)], 128)
    c, _ = segment_prefix_hashes([("s", 300), ("v", 100)], 128)
    assert ta == [128, 128, 128, 16] and sum(tb) == 600
    assert b[:3] == a[:3] and b[3] != a[3]  # block 3 holds u's end plus h's start in b
    assert c[:2] == a[:2] and c[2] != a[2]  # block 2 holds s's end and the first of u / v
    # a key that holds the piece separators cannot pose as two pieces
    assert segment_prefix_hashes([("x|y@0+1", 5)], 8) != segment_prefix_hashes([("x", 1), ("y", 4)], 8)
