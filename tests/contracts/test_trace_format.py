"""Trace format v1 (docs/architecture.md, "Trace format"): hashing, features, reading, writing."""

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
    iter_trace,
    read_trace,
)
from pbkv_contract.blocks import block_token_counts, canonical_prompt, prefix_hashes
from pbkv_contract.features import request_features


def _inv(wf="w", step=0, agent="planner", hashes=("a",), **kw):
    return InvocationRecord(app="t", workflow_id=wf, step=step, agent=agent, t_start=1.0 + step, t_end=2.0 + step,
                            prompt_tokens=10, completion_tokens=3, prefix_hashes=list(hashes), **kw)


def test_prefix_hashes_follow_the_chained_full_width_sha256_definition():
    text = "<|user|>" + "x" * 100 + "<|end|>"
    expected, prev = [], b"pbkv-chat-v1"
    for i in range(0, len(text), 32):
        prev = hashlib.sha256(prev + text[i:i + 32].encode()).hexdigest().encode()
        expected.append(prev.decode())
    assert prefix_hashes([{"role": "user", "content": "x" * 100}], block_chars=32) == expected
    assert len(expected) == math.ceil(len(text) / 32) and all(len(h) == 64 for h in expected)


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


def test_truncated_and_malformed_lines_are_skipped_with_one_warning_naming_the_first(tmp_path, caplog):
    path = tmp_path / "t.jsonl"
    good = json.dumps(_inv().to_json())
    bad_field = json.dumps({**_inv().to_json(), "step": -1})
    path.write_text(good + "\n" + bad_field + "\n\n" + good + "\n" + good[: len(good) // 2])
    with caplog.at_level(logging.WARNING):
        recs = read_trace(path)
    assert len(recs) == 2
    [warning] = caplog.records
    assert warning.getMessage().startswith(f"{path}:2: skipped 2 of 4 lines that cannot be used; the first: ")
    assert "step must be an integer >= 0" in warning.getMessage()


def test_bytes_that_are_not_utf8_are_replaced_and_counted_as_mended(tmp_path, caplog):
    # a latin-1 agent name in an otherwise valid line: the line is kept, the byte becomes U+FFFD,
    # and the file's warning counts it (the first line, JSON-escaped é, is not mended)
    path = tmp_path / "t.jsonl"
    good = json.dumps(_inv(agent="caf\u00e9").to_json()).encode()
    latin1 = good.replace("caf\\u00e9".encode(), b"caf\xe9")
    assert latin1 != good
    path.write_bytes(good + b"\n" + latin1 + b"\n" + latin1 + b"\n")
    with caplog.at_level(logging.WARNING):
        recs = read_trace(path)
    assert [r.agent for r in recs] == ["caf\u00e9", "caf\ufffd", "caf\ufffd"]
    [warning] = caplog.records
    assert warning.getMessage() == (f"{path}: fields read as unknown, mended or ignored: utf-8 on 2 lines "
                                    "(first: line 2: invalid UTF-8 bytes replaced by U+FFFD)")


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


def test_internal_flag_round_trips_and_old_lines_without_it_read_as_agent_steps(tmp_path):
    path = tmp_path / "t.jsonl"
    with TraceWriter(path) as w:
        w.write(_inv(step=0, agent="speaker_selector", internal=True))
        w.write(_inv(step=1, agent="planner"))
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0]["internal"] is True and "internal" not in lines[1]  # written only when set
    old = dict(lines[1])  # a line written before the field existed
    path.write_text(json.dumps(old) + "\n" + json.dumps({**old, "step": 2, "internal": "yes"}) + "\n")
    recs = list(iter_trace(path))  # an invalid optional field reads as unknown: the line is kept
    assert [(r.step, r.internal) for r in recs] == [(1, None), (2, None)]


def test_optional_priority_and_cache_ttl_round_trip_and_bad_values_read_as_unknown(tmp_path, caplog):
    """``priority`` and ``cache_ttl_s`` are written only when set and read back; a string priority,
    a boolean one or a negative TTL is read as unknown and the line kept, with one warning line."""
    path = tmp_path / "t.jsonl"
    with TraceWriter(str(path)) as w:
        w.write(_inv(priority=7, cache_ttl_s=300.0))
        w.write(_inv(step=1, priority=-2))
        w.write(_inv(step=2))
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert (lines[0]["priority"], lines[0]["cache_ttl_s"]) == (7, 300.0)
    assert "priority" not in lines[2] and "cache_ttl_s" not in lines[2]
    recs = read_trace(str(path))
    assert [(r.priority, r.cache_ttl_s) for r in recs] == [(7, 300.0), (-2, None), (None, None)]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(json.dumps({**lines[2], **field}) for field in
                             ({"priority": "high"}, {"cache_ttl_s": -1}, {"priority": True}, {})) + "\n")
    with caplog.at_level(logging.WARNING):
        recs = read_trace(str(bad))
    assert [(r.priority, r.cache_ttl_s) for r in recs] == [(None, None)] * 4
    warnings = [r.message for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "priority on 2 lines" in warnings[0] and "cache_ttl_s on 1 line" in warnings[0]


def test_appending_after_a_cut_off_last_line_starts_a_new_line(tmp_path):
    # a crash mid-write leaves a partial last line: the next writer's first record must not be
    # glued onto it (only the cut line is lost, and the reader skips just that one)
    path = tmp_path / "t.jsonl"
    good = json.dumps(_inv(wf="w1").to_json())
    path.write_text(good + "\n" + good[: len(good) // 2])
    with TraceWriter(path) as writer:
        writer.write(_inv(wf="w2"))
    assert [r.workflow_id for r in iter_trace(path)] == ["w1", "w2"]
    with TraceWriter(path) as writer:  # a file that ends with a line break gets no blank line
        writer.write(_inv(wf="w3"))
    assert path.read_text().endswith("\n" + json.dumps(_inv(wf="w3").to_json(), separators=(",", ":")) + "\n")


def test_a_meta_line_says_how_the_trace_was_made_and_is_not_a_workload_record(tmp_path, caplog):
    """The first line of a converted trace: read by trace_meta, valid for validate, never handed to a
    trace's consumers (they see invocations and workflow ends only), and no warning."""
    from pbkv_contract.trace import TraceFileReport, TraceMeta, trace_meta
    from pbkv_sdk.stats import validate_file

    path = tmp_path / "t.jsonl"
    meta = TraceMeta("pbkv-sdk import x", "src.tar.gz", {"max_gap_s": 60.0}, "gaps capped at 60 s")
    with TraceWriter(path) as writer:
        writer.write(meta)
        writer.write(InvocationRecord("app", "w", 0, "a", 0.0, 1.0, 5, 1, ["h"]))
        writer.write(WorkflowEndRecord("app", "w", 2.0))
    assert json.loads(path.read_text().splitlines()[0]) == {"type": "meta", "v": 1, "writer": "pbkv-sdk import x",
                                                           "source": "src.tar.gz", "options": {"max_gap_s": 60.0},
                                                           "note": "gaps capped at 60 s"}
    assert trace_meta(path) == meta
    with caplog.at_level(logging.WARNING):
        report = TraceFileReport(str(path))
        records = list(iter_trace(path, report=report))
    assert [type(r).__name__ for r in records] == ["InvocationRecord", "WorkflowEndRecord"]
    assert (report.lines, report.records, report.skipped, report.meta) == (3, 2, [], meta) and not caplog.records
    assert len(read_trace(path)) == 2
    checked = validate_file(path)
    assert (checked.valid, checked.invalid, len(checked.records), checked.meta) == (3, [], 2, meta)
    # a trace without one, or whose meta line is broken, has none (the broken line is skipped as usual)
    path.write_text('{"type": "meta", "v": 1, "options": {}}\n' + path.read_text().split("\n", 1)[1])
    assert trace_meta(path) is None and len(read_trace(path)) == 2
