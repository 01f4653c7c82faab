"""Trace format v1 (DESIGN.md section 3): hashing, features, reading, writing."""

import hashlib
import json
import logging
import math
import threading

import pytest

from pbkv_contract.trace import (
    InvocationRecord,
    TraceFormatError,
    TraceWriter,
    WorkflowEndRecord,
    group_workflows,
    read_trace,
)
from pbkv_contract.blocks import block_token_counts, canonical_prompt, prefix_hashes
from pbkv_contract.features import request_features


def _inv(wf="w", step=0, agent="planner", hashes=("a",), **kw):
    return InvocationRecord(app="t", workflow_id=wf, step=step, agent=agent, t_start=1.0 + step, t_end=2.0 + step,
                            prompt_tokens=10, completion_tokens=3, prefix_hashes=list(hashes), **kw)


def test_prefix_hashes_follow_the_chained_sha256_definition():
    text = "<|user|>" + "x" * 100 + "<|end|>"
    expected, prev = [], b""
    for i in range(0, len(text), 32):
        prev = hashlib.sha256(prev + text[i:i + 32].encode()).hexdigest()[:16].encode()
        expected.append(prev.decode())
    assert prefix_hashes([{"role": "user", "content": "x" * 100}], block_chars=32) == expected
    assert len(expected) == math.ceil(len(text) / 32)


def test_shared_prefix_shares_exactly_the_full_leading_blocks():
    system = {"role": "system", "content": "S" * 200}
    a = prefix_hashes([system, {"role": "user", "content": "question one"}], block_chars=64)
    b = prefix_hashes([system, {"role": "user", "content": "question two"}], block_chars=64)
    shared_chars = len("<|system|>" + "S" * 200 + "<|end|><|user|>question ")
    n_shared = sum(1 for x, y in zip(a, b) if x == y)
    assert n_shared == shared_chars // 64
    assert a[n_shared:] != b[n_shared:]


def test_canonical_prompt_keeps_text_parts_of_content_lists():
    msgs = [{"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image_url"}, {"type": "text", "text": "yo"}]}]
    assert canonical_prompt(msgs) == "<|user|>hi\n\nyo<|end|>"


def test_block_token_counts_sum_exactly():
    assert block_token_counts(10, 3) == [3, 3, 4]
    assert sum(block_token_counts(1001, 17)) == 1001
    assert block_token_counts(5, 0) == []


def test_features_use_newest_non_system_message_and_are_unit_norm():
    msgs = [{"role": "user", "content": "alpha beta"}, {"role": "assistant", "content": "gamma delta"},
            {"role": "system", "content": "ignored system text"}]
    f = request_features(msgs)
    assert f == request_features("gamma delta")
    assert math.isclose(sum(v * v for v in f), 1.0, rel_tol=1e-9)
    assert request_features("!!!") == [0.0] * 64
    assert request_features("gamma delta") != request_features("alpha beta")


def test_round_trip_and_grouping(tmp_path):
    path = tmp_path / "t.jsonl"
    with TraceWriter(path) as w:
        w.write(_inv(step=1, agent="coder"))
        w.write(_inv(step=0, agent="planner", block_tokens=[10]))
        w.write(WorkflowEndRecord(app="t", workflow_id="w", t=9.0))
    recs = read_trace(path)
    assert [type(r).__name__ for r in recs] == ["InvocationRecord", "InvocationRecord", "WorkflowEndRecord"]
    assert [r.agent for r in group_workflows(recs)["w"]] == ["planner", "coder"]
    assert recs[1].block_tokens == [10] and recs[0].block_tokens is None


def test_truncated_and_malformed_lines_are_skipped_with_line_numbers(tmp_path, caplog):
    path = tmp_path / "t.jsonl"
    good = json.dumps(_inv().to_json())
    bad_field = json.dumps({**_inv().to_json(), "step": -1})
    path.write_text(good + "\n" + bad_field + "\n\n" + good + "\n" + good[: len(good) // 2])
    with caplog.at_level(logging.WARNING):
        recs = read_trace(path)
    assert len(recs) == 2
    warned = sorted(r.getMessage().split(":")[1] for r in caplog.records)
    assert warned == ["2", "5"]


def test_unknown_version_and_empty_trace_are_clear_errors(tmp_path):
    path = tmp_path / "v2.jsonl"
    path.write_text(json.dumps({**_inv().to_json(), "v": 2}) + "\n")
    with pytest.raises(TraceFormatError, match="version 2"):
        read_trace(path)
    only_end = tmp_path / "end.jsonl"
    only_end.write_text(json.dumps(WorkflowEndRecord(app="t", workflow_id="w", t=1.0).to_json()) + "\n")
    with pytest.raises(TraceFormatError, match="no invocation"):
        read_trace(only_end)


def test_concurrent_writers_never_interleave_lines(tmp_path):
    path = tmp_path / "c.jsonl"
    writer = TraceWriter(path)

    def work(i):
        for s in range(50):
            writer.write(_inv(wf=f"w{i}", step=s, hashes=[f"h{j}" for j in range(40)]))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    writer.close()
    lines = path.read_text().splitlines()
    assert len(lines) == 400
    assert all(json.loads(line)["type"] == "invocation" for line in lines)


def test_lone_surrogates_from_json_hash_instead_of_crashing():
    # json.loads('"\\ud800 x"') yields a lone surrogate; a live server must still hash the prompt.
    text = json.loads('"\\ud800 x"')
    hashes = prefix_hashes([{"role": "user", "content": text}], block_chars=8)
    assert len(hashes) == math.ceil(len("<|user|>" + text + "<|end|>") / 8)
    assert hashes != prefix_hashes([{"role": "user", "content": "\udc00 x"}], block_chars=8)


def test_optional_priority_and_cache_ttl_round_trip_and_bad_values_are_skipped(tmp_path, caplog):
    """``priority`` and ``cache_ttl_s`` are written only when set and read back; a record with a
    string priority or a negative TTL is a malformed line (skipped with a warning)."""
    path = tmp_path / "t.jsonl"
    with TraceWriter(str(path)) as w:
        w.write(_inv(priority=7, cache_ttl_s=300.0))
        w.write(_inv(step=1))
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert (lines[0]["priority"], lines[0]["cache_ttl_s"]) == (7, 300.0)
    assert "priority" not in lines[1] and "cache_ttl_s" not in lines[1]
    recs = read_trace(str(path))
    assert (recs[0].priority, recs[0].cache_ttl_s, recs[1].priority) == (7, 300.0, None)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(json.dumps({**lines[1], **field}) for field in
                             ({"priority": "high"}, {"cache_ttl_s": -1}, {"priority": True}, {})) + "\n")
    with caplog.at_level(logging.WARNING):
        assert len(read_trace(str(bad))) == 1
    assert sum("skipping malformed trace line" in r.message for r in caplog.records) == 3
