"""``pbkv-sdk import kv-cache-tester``: kv-cache-tester block-hash traces (Claude Code conversations
with subagents) to trace v1.

Fixtures are written here to the format (kv-cache-tester ``docs/trace_replay_tester.md``), with
4-token blocks so every count is worked out by hand; the real data is used by one test only, which
is skipped unless ``PBKV_DATA_DIR`` holds it.
"""

from __future__ import annotations

import io
import json
import logging
import os
import tarfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pbkv_contract.trace import InvocationRecord, WorkflowEndRecord, iter_trace, read_trace, trace_meta
from pbkv_sdk.cli import app
from pbkv_sdk.importers.blockhash import ImportOptions
from pbkv_sdk.importers.kv_cache_tester import import_kv_cache_tester

runner = CliRunner()


def req(t, prompt, out, ids, stop="tool_use", inputs=("tool_result",), api=1.0, model="opus", **extra):
    return {"t": t, "type": "n", "model": model, "in": prompt, "out": out, "hash_ids": list(ids),
            "input_types": list(inputs), "output_types": ["text", "tool_use"], "stop": stop, "api_time": api,
            "think_time": 0.0, **extra}


def subagent(t, kind, requests, tools=8, system=4):
    return {"t": t, "type": "subagent", "agent_id": "agent_001", "subagent_type": kind, "duration_ms": 1000,
            "total_tokens": 0, "tool_use_count": 1, "status": "completed", "models": ["haiku"],
            "tool_tokens": tools, "system_tokens": system, "requests": requests}


def conversation(cid, requests, tools=8, system=4, block=4, scope="local"):
    return {"id": cid, "models": ["opus"], "block_size": block, "hash_id_scope": scope, "tool_tokens": tools,
            "system_tokens": system, "requests": requests, "totals": {}}


# Conversation c1, 4-token blocks, tool prefix 8 tokens (2 blocks), system 4 (1 block):
#   0: t=0    human text, 10 tokens: ids 1,2   (+2 tail tokens), stops with tool_use
#   1: t=5    tool result, 14 tokens: ids 1,2,3 (+2)
#   -  t=6.5  subagent Explore (starts in turn 0): its calls at 6.5 (9 tokens: ids 20,21 +1) and
#             8.5 (12 tokens: ids 20,21,22), ids in the conversation's own scope
#   2: t=12   tool result, 16 tokens: ids 1,2,3,4, stops with end_turn
#   3: t=100  human text (after end_turn): new turn; 17 tokens: ids 1,2,3,4 (+1)
#   4: t=104  text + tool_result (agent loop): same turn, 20 tokens: ids 1,2,3,4,5
C1 = conversation("c1", [
    req(0.0, 10, 3, [1, 2], inputs=("text",)),
    req(5.0, 14, 3, [1, 2, 3]),
    subagent(6.5, "Explore", [req(0.0, 9, 2, [20, 21], inputs=("text",), api=0.5),
                              req(2.0, 12, 2, [20, 21, 22], api=0.5)]),
    req(12.0, 16, 4, [1, 2, 3, 4], stop="end_turn"),
    req(100.0, 17, 2, [1, 2, 3, 4], inputs=("text",)),
    req(104.0, 20, 2, [1, 2, 3, 4, 5], inputs=("text", "tool_result", "tool_use"), stop="end_turn"),
])
# Conversation c2: the same local ids as c1 (they mean nothing across conversations), the same
# client configuration (model opus, 8 tool tokens, 4 system tokens).
C2 = conversation("c2", [req(0.0, 10, 3, [1, 2], inputs=("text",)), req(3.0, 14, 3, [1, 2, 3])])


def write_dir(path: Path, docs: dict[str, object]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    for name, doc in docs.items():
        (path / name).write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def run_import(tmp_path, docs, **options):
    src = write_dir(tmp_path / "traces", docs)
    out = tmp_path / "out.jsonl"
    summary = import_kv_cache_tester(src, out, ImportOptions(app="claude-code", **options))
    return summary, out


def invocations(out) -> list[InvocationRecord]:
    return [r for r in read_trace(out) if isinstance(r, InvocationRecord)]


def test_one_hash_per_block_with_its_tokens_and_the_partial_block_of_the_call_own(tmp_path):
    summary, out = run_import(tmp_path, {"trace_1.json": C1})
    recs = invocations(out)
    assert [r.prompt_tokens for r in recs] == [10, 14, 9, 12, 16, 17, 20]  # arrival order, subagent's interleaved
    assert [r.block_tokens for r in recs] == [[4, 4, 2], [4, 4, 4, 2], [4, 4, 1], [4, 4, 4], [4] * 4, [4] * 4 + [1],
                                              [4] * 5]
    a, b, sub1, sub2, c, d, e = (r.prefix_hashes for r in recs)
    # equal ids are equal chained hashes; the partial last block is the call's own
    assert a[:2] == b[:2] and b[:3] == c[:3] == d[:3] and c == d[:4] == e[:4]
    assert a[2] != b[2] and d[4] not in e
    # the subagent's ids are the conversation's scope: its two calls share theirs, not the main agent's
    assert sub1[:2] == sub2[:2] and not set(sub1) & set(a + b + c)
    assert [r.agent for r in recs] == ["main", "main", "Explore", "Explore", "main", "main", "main"]
    assert [r.step for r in recs] == list(range(7)) and {r.workflow_id for r in recs} == {"c1"}
    # times: arrival and arrival + api_time; the subagent's from its entry's start
    assert [(r.t_start, r.t_end) for r in recs][1:4] == [(5.0, 6.0), (6.5, 7.0), (8.5, 9.0)]
    blocks = 3 + 4 + 3 + 3 + 4 + 5 + 5
    assert (summary.calls_seen, summary.calls, summary.subagents, summary.blocks) == (7, 7, 1, blocks)
    assert summary.skipped == {} and summary.agents == {"main": 5, "Explore": 2}
    ends = [r for r in read_trace(out) if isinstance(r, WorkflowEndRecord)]
    assert [(e.workflow_id, e.t) for e in ends] == [("c1", 105.0)]


def test_conversations_share_nothing_unless_asked_and_then_their_tool_or_system_prefix(tmp_path):
    docs = {"trace_1.json": C1, "trace_2.json": C2}
    _, out = run_import(tmp_path / "none", docs)
    first = {r.workflow_id: r.prefix_hashes for r in invocations(out) if r.step == 0}
    assert not set(first["c1"]) & set(first["c2"])  # same local ids, different conversations
    # tools: the first 8 // 4 = 2 blocks are keyed by (model, tool tokens)
    summary, out = run_import(tmp_path / "tools", docs, shared_prefix="tools")
    recs = invocations(out)
    first = {r.workflow_id: r.prefix_hashes for r in recs if r.step == 0}
    assert first["c1"][:2] == first["c2"][:2] and first["c1"][2] != first["c2"][2]
    c1 = [r.prefix_hashes for r in recs if r.workflow_id == "c1"]
    assert c1[0][:2] == c1[1][:2] and c1[1][:3] == c1[4][:3]  # sharing inside c1 unchanged
    # the subagent's calls have the main agent's configuration here (model opus, 8 + 4 tokens) but
    # other ids (20, 21): they keep keys of their own, shared by both its calls
    sub = [r.prefix_hashes for r in recs if r.agent == "Explore"]
    assert sub[0][:2] == sub[1][:2] and not set(sub[0]) & set(c1[0])
    # tools+system: (8 + 4) // 4 = 3 blocks; c2's step 1 has ids 1, 2, 3 as c1's step 1
    _, out = run_import(tmp_path / "system", docs, shared_prefix="tools+system")
    recs = invocations(out)
    second = {r.workflow_id: r.prefix_hashes for r in recs if r.step == 1}
    assert second["c1"][:3] == second["c2"][:3]
    meta = trace_meta(out)
    assert meta.options["shared_prefix"] == "tools+system" and "shared system/tool prefix: tools+system" in meta.note


def test_a_call_whose_prefix_differs_from_its_configuration_s_keeps_its_own_keys_from_there(tmp_path):
    """c3's second call changes its system block (id 9 instead of 3): with tools+system its first two
    blocks stay shared and the rest follows its own ids."""
    c3 = conversation("c3", [req(0.0, 12, 1, [1, 2, 3], inputs=("text",)), req(2.0, 12, 1, [1, 2, 9])])
    _, out = run_import(tmp_path, {"t3.json": c3, "t2.json": C2}, shared_prefix="tools+system")
    recs = {(r.workflow_id, r.step): r.prefix_hashes for r in invocations(out)}
    assert recs[("c3", 1)][:2] == recs[("c3", 0)][:2] == recs[("c2", 0)][:2]
    assert recs[("c3", 0)][2] == recs[("c2", 1)][2] != recs[("c3", 1)][2]


def test_turns_open_at_human_input_and_subagents_join_the_turn_that_started_them(tmp_path):
    summary, out = run_import(tmp_path, {"trace_1.json": C1}, workflow="turn")
    recs = invocations(out)
    assert [(r.workflow_id, r.step, r.agent) for r in recs] == [
        ("c1-t0", 0, "main"), ("c1-t0", 1, "main"), ("c1-t0", 2, "Explore"), ("c1-t0", 3, "Explore"),
        ("c1-t0", 4, "main"), ("c1-t1", 0, "main"), ("c1-t1", 1, "main")]
    assert {r.session_id for r in recs} == {"c1"}
    ends = [(e.workflow_id, e.t) for e in read_trace(out) if isinstance(e, WorkflowEndRecord)]
    assert ends == [("c1-t0", 13.0), ("c1-t1", 105.0)]
    assert summary.workflows == 2
    # a human message after a tool call (the user interrupted) opens a turn too
    c = conversation("c", [req(0.0, 8, 1, [1, 2], inputs=("text",)), req(5.0, 8, 1, [1, 2], inputs=("text",))])
    _, out = run_import(tmp_path / "b", {"c.json": c}, workflow="turn")
    assert [r.workflow_id for r in invocations(out)] == ["c-t0", "c-t1"]


def test_the_gap_cap_shortens_idle_stretches_and_moves_later_calls(tmp_path):
    """c1 with --max-gap 10: the idle stretch 13 -> 100 (87 s) becomes 10 s, so calls 3 and 4
    start 77 s earlier; the others (gaps of 4, 0.5, 3 and 3 s) stay."""
    summary, out = run_import(tmp_path, {"trace_1.json": C1}, max_gap_s=10.0)
    starts = [r.t_start for r in invocations(out)]
    assert starts == [0.0, 5.0, 6.5, 8.5, 12.0, 23.0, 27.0]
    assert (summary.gaps_capped, summary.gap_s_removed) == (1, 77.0)
    assert "gaps capped at 10 s" in trace_meta(out).note


def test_calls_above_the_context_limit_are_dropped_or_truncated_and_counted(tmp_path):
    summary, out = run_import(tmp_path / "drop", {"trace_1.json": C1}, context_limit=15)
    assert [r.prompt_tokens for r in invocations(out)] == [10, 14, 9, 12]
    assert summary.skipped == {"prompt above the context limit (15 tokens), dropped": 3}
    assert summary.calls_seen == summary.calls + 3 == 7
    summary, out = run_import(tmp_path / "cut", {"trace_1.json": C1}, context_limit=15, over_limit="truncate")
    recs = invocations(out)
    assert [r.prompt_tokens for r in recs] == [10, 14, 9, 12, 15, 15, 15]
    assert recs[-1].block_tokens == [4, 4, 4, 3] and recs[-1].prefix_hashes[:3] == recs[1].prefix_hashes[:3]
    assert (summary.truncated, summary.skipped) == (3, {})
    assert "calls above cut to it" in trace_meta(out).note


def test_bad_files_are_one_line_each_and_every_call_is_accounted_for(tmp_path):
    bad_calls = conversation("c4", [req(0.0, 8, 1, [1, 2], inputs=("text",)),
                                    {"t": 1.0, "in": 8, "out": 1},                       # no hash_ids
                                    req(2.0, "8", 1, [1, 2]),                             # in not a number
                                    req(3.0, 4, 1, [1, 2, 3]),                            # 3 ids for 4 tokens
                                    "not a request",
                                    {"t": 4.0, "type": "subagent", "requests": [req(0.0, 8, 1, [7, 8])]}])
    docs = {"a.json": C2, "b.json": "{not json", "c.json": [1, 2], "d.json": {"id": "x"},
            "e.json": conversation("e", [], block=0), "f.json": bad_calls, "g.txt": "ignored"}
    result_dir = write_dir(tmp_path / "traces", docs)
    out = tmp_path / "out.jsonl"
    result = runner.invoke(app, ["import", "kv-cache-tester", str(result_dir), "--out", str(out)])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    for name, why in (("b.json", "not JSON"), ("c.json", "not a JSON object"), ("d.json", "no 'requests' list"),
                      ("e.json", "block_size must be an integer >= 1")):
        assert f"bad file {name}: {why}" in text
    assert "6 file(s), 4 bad: 2 conversations (1 subagents), 2 workflows" in text
    assert "calls: 8 seen = 4 imported + 4 skipped" in text
    for reason in ("request without a 'hash_ids' list of ints", "request without usable 'in'/'out' token counts",
                   "request with more hash_ids than its prompt fills", "request is not a JSON object"):
        assert f"skipped 1: {reason}" in text
    assert "options: workflow = conversation; gaps not capped; context limit none" in text
    assert len(invocations(out)) == 4


def test_reads_a_tar_gz_in_place_and_stops_after_max_conversations(tmp_path):
    archive = tmp_path / "traces.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name, doc in (("./trace_2.json", C2), ("./trace_1.json", C1), ("./README", "x")):
            data = json.dumps(doc).encode() if not isinstance(doc, str) else doc.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    out = tmp_path / "o.jsonl"
    summary = import_kv_cache_tester(archive, out, ImportOptions(app="cc", max_conversations=1))
    assert (summary.files, summary.conversations) == (1, 1)
    assert {r.workflow_id for r in invocations(out)} == {"c2"}  # archive order
    assert trace_meta(out).source == "traces.tar.gz"


def test_nothing_usable_writes_nothing_and_exits_2(tmp_path):
    src = write_dir(tmp_path / "t", {"b.json": "[]"})
    out = tmp_path / "o.jsonl"
    keep = json.dumps({"type": "meta", "v": 1, "writer": "x"}) + "\n"  # an earlier trace
    out.write_text(keep)
    result = runner.invoke(app, ["import", "kv-cache-tester", str(src), "--out", str(out)])
    assert result.exit_code == 2 and "no conversation imported" in result.output
    assert out.read_text() == keep and not (tmp_path / "o.jsonl.partial").exists()
    result = runner.invoke(app, ["import", "kv-cache-tester", str(src), "--out", str(out), "--workflow", "day"])
    assert result.exit_code == 2 and "workflow must be one of conversation, turn" in result.output
    result = runner.invoke(app, ["import", "kv-cache-tester", str(src), "--out", str(out), "--app", ""])
    assert result.exit_code == 2 and "the app name must not be empty" in result.output


def test_the_trace_validates_and_replays_block_by_block_with_its_options_printed(tmp_path):
    """A 100k-token call stays 1,563 hashes (1,562 whole 64-token blocks and its 32-token tail), in
    the trace and in the replay's engine requests (never one key per token); ``validate`` accepts
    the meta line and ``replay`` prints it."""
    from pbkv_server.cli.bench import app as bench_app
    from pbkv_server.sim.simulator import load_workload

    big = conversation("big", [req(0.0, 100_000, 10, range(1, 1563), inputs=("text",)),
                               req(9.0, 100_100, 10, range(1, 1564))], tools=12_000, system=3_000, block=64)
    _, out = run_import(tmp_path, {"big.json": big}, max_gap_s=60.0, context_limit=128_000)
    recs = invocations(out)
    assert [len(r.prefix_hashes) for r in recs] == [1563, 1564]
    assert recs[0].block_tokens[-2:] == [64, 32] and sum(recs[1].block_tokens) == 100_100
    workload = load_workload(list(iter_trace(out)))
    assert [len(q.blocks) for q in workload.units[0].requests] == [1563, 1564]
    assert runner.invoke(app, ["validate", str(out)]).exit_code == 0
    result = runner.invoke(bench_app, ["replay", str(out), "--policy", "lru", "--no-gap", "--profile",
                                       "a6000x8-qwen3-32b-tp8", "--concurrency", "2"])
    assert result.exit_code == 0, result.output
    assert ("trace written by pbkv-sdk import kv-cache-tester: workflow = conversation; gaps capped at 60 s; "
            "context limit 128,000 prompt tokens (calls above dropped)") in " ".join(result.output.split())


REAL = Path(os.environ.get("PBKV_DATA_DIR", "../shared/data")) / "claude-code" / "traces.tar.gz"


@pytest.mark.skipif(not REAL.exists(), reason="the shared Claude Code traces are not in PBKV_DATA_DIR")
def test_real_traces_every_call_is_imported_or_skipped_with_its_reason(tmp_path):
    out = tmp_path / "cc.jsonl"
    summary = import_kv_cache_tester(REAL, out, ImportOptions(app="claude-code", workflow="turn", max_conversations=3,
                                                              context_limit=128_000))
    assert summary.conversations + summary.empty == 3 and not summary.bad_files
    assert summary.calls_seen == summary.calls + sum(summary.skipped.values()) > 0
    recs = invocations(out)
    assert len(recs) == summary.calls and max(r.prompt_tokens for r in recs) <= 128_000
    assert all(len(r.prefix_hashes) == -(-r.prompt_tokens // 64) for r in recs)


def test_when_every_call_is_skipped_the_reasons_are_printed_too(tmp_path):
    src = write_dir(tmp_path / "t", {"a.json": conversation("a", [{"t": "a", "in": 8, "out": 1, "hash_ids": [1, 2]},
                                                                  req(1.0, -100, 1, [1])]),
                                     "b.json": conversation("b", [req(0.0, 40, 1, list(range(10)))])})
    out = tmp_path / "o.jsonl"
    result = runner.invoke(app, ["import", "kv-cache-tester", str(src), "--out", str(out), "--context-limit", "10"])
    assert result.exit_code == 2, result.output
    lines = [" ".join(line.split()) for line in result.output.splitlines() if line.strip()]
    assert lines[0] == (f"error: {src}: 2 file(s), 0 bad, all 3 call(s) skipped, no conversation imported; "
                        f"nothing written to {out}")
    assert sorted(lines[1:]) == ["skipped 1: prompt above the context limit (10 tokens), dropped",
                                 "skipped 1: request without a usable 't'",
                                 "skipped 1: request without usable 'in'/'out' token counts"]
    assert not out.exists()


def test_a_bad_file_is_reported_on_one_line_once(tmp_path, caplog):
    src = write_dir(tmp_path / "t", {"a.json": C2, "b.json": "{not json"})
    result = runner.invoke(app, ["import", "kv-cache-tester", str(src), "--out", str(tmp_path / "o.jsonl")])
    assert result.exit_code == 0, result.output
    assert result.output.count("b.json") == 1 and "bad file b.json: not JSON" in result.output
    # a warning would reach stderr as a second line (logging's last-resort handler; pytest's
    # capture takes its place here)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and "b.json" in r.getMessage()]


def _archive(path: Path, n: int) -> bytes:
    """A .tar.gz of n conversations whose ids do not compress (so a cut loses the later files)."""
    import random
    rng = random.Random(1)
    with tarfile.open(path, "w:gz") as tar:
        for i in range(n):
            ids = [rng.randrange(10 ** 9) for _ in range(500)]
            data = json.dumps(conversation(f"c{i}", [req(0.0, 2000, 1, ids, inputs=("text",))])).encode()
            info = tarfile.TarInfo(f"trace_{i}.json")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path.read_bytes()


def test_a_truncated_archive_is_a_partial_import_said_plainly_on_the_summary_line(tmp_path):
    whole = _archive(tmp_path / "whole.tar.gz", 10)
    cut = tmp_path / "traces.tar.gz"
    cut.write_bytes(whole[: len(whole) * 6 // 10])
    out = tmp_path / "o.jsonl"
    result = runner.invoke(app, ["import", "kv-cache-tester", str(cut), "--out", str(out)])
    assert result.exit_code == 0, result.output  # partial imports are documented: what was read is kept
    lines = [" ".join(line.split()) for line in result.output.splitlines() if line.strip()]
    read = len({r.workflow_id for r in invocations(out)})
    assert 0 < read < 10
    assert lines[0].startswith(f"{read} file(s), 0 bad: {read} conversations")
    assert (f"PARTIAL IMPORT: the archive traces.tar.gz is damaged or truncated (" in lines[0]
            and f"trace_{read}.json and any later files not read)" in lines[0])
    assert not any("bad file" in line for line in lines)
    # cut before its first file is whole: nothing imported, and the line says why
    cut.write_bytes(whole[:2000])
    result = runner.invoke(app, ["import", "kv-cache-tester", str(cut), "--out", str(out)])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    assert "no conversation imported; the archive traces.tar.gz is damaged or truncated" in " ".join(result.output.split())


def test_input_with_nothing_to_import_is_one_error_line_and_exit_2(tmp_path):
    """An empty file, an empty folder, a tar without a trace_*.json: bad input, one ``error:`` line
    (naming the first bad file where there is one), exit 2, nothing written."""
    (tmp_path / "empty.json").write_text("")
    (tmp_path / "nothing").mkdir()
    with tarfile.open(tmp_path / "other.tar.gz", "w:gz") as tar:
        data = b"hello"
        info = tarfile.TarInfo("readme.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    for name, says in (("empty.json", "1 file(s), 1 bad (first: empty.json: "), ("nothing", "0 file(s), 0 bad, "),
                       ("other.tar.gz", "0 file(s), 0 bad, ")):
        out = tmp_path / f"{name}.jsonl"
        result = runner.invoke(app, ["import", "kv-cache-tester", str(tmp_path / name), "--out", str(out)])
        lines = result.output.strip().splitlines()
        assert result.exit_code == 2 and len(lines) == 1, result.output
        assert lines[0].startswith("error: ") and says in lines[0] and "nothing written" in lines[0], lines
        assert not out.exists() and not Path(f"{out}.partial").exists()
