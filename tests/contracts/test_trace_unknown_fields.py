"""Trace format v1 from other tools: ``null`` optional fields read as unknown, graded problems,
one warning per file with counts."""

import json
import logging

import pytest

from pbkv_contract.features import FEATURE_DIM
from pbkv_contract.trace import (
    InvocationRecord,
    TraceFileReport,
    TraceFormatError,
    WorkflowEndRecord,
    iter_trace,
    parse_line,
    read_trace,
)

OPTIONAL = ("ttft_s", "cached_tokens", "block_chars", "features", "text", "block_tokens", "session_id", "internal",
            "priority", "cache_ttl_s")


def _line(**overrides):
    data = {"type": "invocation", "v": 1, "app": "t", "workflow_id": "w", "step": 0, "agent": "planner",
            "t_start": 1.0, "t_end": 2.0, "prompt_tokens": 10, "completion_tokens": 3, "prefix_hashes": ["a", "b"],
            "ttft_s": 0.5, "cached_tokens": 4, "block_chars": 64, "features": [0.125] * FEATURE_DIM,
            "text": "hi", "block_tokens": [6, 4], "session_id": "s", "internal": True, "priority": 3,
            "cache_ttl_s": 60.0}
    data.update(overrides)
    return json.dumps({k: v for k, v in data.items() if v is not ...})


def test_null_in_every_optional_field_reads_as_unknown():
    rec = parse_line(_line(**{name: None for name in OPTIONAL}))
    assert (rec.ttft_s, rec.cached_tokens, rec.block_chars, rec.features, rec.text, rec.block_tokens) == (
        None, None, None, [], None, None)
    assert (rec.session_id, rec.internal, rec.priority, rec.cache_ttl_s) == (None, None, None, None)
    # unknown block tokens: replay spreads the prompt evenly
    assert rec.tokens_per_block() == [5, 5]
    end = parse_line(json.dumps({"type": "workflow_end", "v": 1, "app": "t", "workflow_id": "w", "t": 3.0,
                                 "status": None}))
    assert end == WorkflowEndRecord(app="t", workflow_id="w", t=3.0, status="completed")


def test_absent_optional_fields_read_like_null_ones():
    absent = parse_line(_line(**{name: ... for name in OPTIONAL}))
    null = parse_line(_line(**{name: None for name in OPTIONAL}))
    assert absent == null


def test_known_values_are_kept_and_unknown_ones_left_out_when_writing():
    rec = parse_line(_line())
    assert (rec.ttft_s, rec.cached_tokens, rec.block_chars, rec.text, rec.block_tokens) == (0.5, 4, 64, "hi", [6, 4])
    assert rec.cached_tokens == 4 and parse_line(_line(cached_tokens=0)).cached_tokens == 0  # 0 is not unknown
    unknown = parse_line(_line(**{name: None for name in OPTIONAL}))
    written = unknown.to_json()
    assert not set(OPTIONAL) - {"features"} & set(written)
    assert parse_line(json.dumps(written)) == unknown


def test_invalid_optional_fields_read_as_unknown_and_keep_the_line():
    notes = []
    rec = parse_line(_line(features=[1.0, 2.0], cached_tokens=-1, ttft_s="fast", block_tokens=[1, 2, 3],
                           block_chars=0, text=7), notes)
    assert (rec.features, rec.cached_tokens, rec.ttft_s, rec.block_tokens, rec.block_chars, rec.text) == (
        [], None, None, None, None, None)
    assert sorted(name for name, _ in notes) == sorted(["features", "cached_tokens", "ttft_s", "block_tokens",
                                                        "block_chars", "text"])
    assert dict(notes)["features"] == f"has 2 numbers, not {FEATURE_DIM}; read as unknown"
    assert parse_line(_line(features=[float("nan")] * FEATURE_DIM)).features == []


def test_unknown_fields_are_ignored_and_integral_floats_read_as_ints():
    notes = []
    rec = parse_line(_line(step=2.0, prompt_tokens=10.0, model="gpt-x", latency_ms=12), notes)
    assert rec.step == 2 and isinstance(rec.step, int) and rec.prompt_tokens == 10
    assert notes == [("model", "unknown field, ignored"), ("latency_ms", "unknown field, ignored")]
    with pytest.raises(ValueError, match="step must be an integer >= 0"):
        parse_line(_line(step=2.5))


@pytest.mark.parametrize("field", ["app", "workflow_id", "step", "agent", "t_start", "t_end", "prompt_tokens",
                                   "completion_tokens", "prefix_hashes"])
def test_a_null_or_missing_required_field_makes_the_line_unusable(field):
    with pytest.raises(ValueError, match=f"invocation field {field} is null"):
        parse_line(_line(**{field: None}))
    with pytest.raises(ValueError, match=f"invocation field {field} is missing"):
        parse_line(_line(**{field: ...}))


def test_lines_without_version_or_of_another_version():
    with pytest.raises(ValueError, match="no trace version") as info:
        parse_line(_line(v=...))
    assert not isinstance(info.value, TraceFormatError)  # one bad line, not another format
    with pytest.raises(TraceFormatError, match="version 2"):
        parse_line(_line(v=2))
    with pytest.raises(TraceFormatError):
        parse_line(_line(v=True))


def test_2000_lines_with_1000_bad_ones_give_one_warning_with_the_count(tmp_path, caplog):
    path = tmp_path / "half.jsonl"
    lines = []
    for i in range(1000):
        lines.append(_line(workflow_id=f"w{i}"))
        lines.append(_line(workflow_id=f"w{i}", agent=None) if i % 2 else _line(workflow_id=f"w{i}")[:40])
    path.write_text("\n".join(lines) + "\n")
    with caplog.at_level(logging.WARNING):
        records = read_trace(path)
    assert len(records) == 1000
    [warning] = caplog.records
    assert warning.getMessage().startswith(f"{path}:2: skipped 1000 of 2000 lines that cannot be used; the first: "
                                           "not valid JSON")


def test_invalid_optional_fields_give_one_warning_per_file_listing_each_field(tmp_path, caplog):
    path = tmp_path / "soft.jsonl"
    path.write_text("\n".join([_line(), _line(features=[1.0], extra=1), _line(features="x"), _line(cached_tokens=-2)])
                    + "\n")
    report = TraceFileReport(str(path))
    with caplog.at_level(logging.WARNING):
        records = list(iter_trace(path, report=report))
    assert len(records) == 4 and not report.skipped
    assert report.fields == {"features": [2, 2, "has 1 numbers, not 64; read as unknown"],
                             "extra": [1, 2, "unknown field, ignored"],
                             "cached_tokens": [1, 4, "must be an integer >= 0; read as unknown"]}
    [warning] = caplog.records
    assert warning.getMessage() == (
        f"{path}: fields read as unknown, mended or ignored: features on 2 lines (first: line 2: has 1 numbers, not 64; "
        "read as unknown); extra on 1 line (first: line 2: unknown field, ignored); cached_tokens on 1 line "
        "(first: line 4: must be an integer >= 0; read as unknown)")


def test_strict_reading_raises_at_the_first_problem_of_any_kind(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text(_line() + "\n" + _line(features=[1.0]) + "\n")
    with pytest.raises(ValueError, match=r"s.jsonl:2: field features: has 1 numbers"):
        list(iter_trace(path, strict=True))
    path.write_text(_line() + "\n" + _line(cached_tokens=None, ttft_s=None) + "\n")  # null is not a problem
    assert len(list(iter_trace(path, strict=True))) == 2


def test_a_trace_without_usable_invocations_says_what_was_skipped(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join([_line(agent=None)] * 3) + "\n")
    with pytest.raises(TraceFormatError, match=rf"no invocation records \(3 unusable lines skipped; first: "
                                                rf"{path}:1: invocation field agent is null\)"):
        read_trace(path)


def test_records_round_trip_through_a_file(tmp_path):
    rec = InvocationRecord(app="t", workflow_id="w", step=0, agent="a", t_start=1.0, t_end=2.0, prompt_tokens=5,
                           completion_tokens=1, prefix_hashes=["x"], cached_tokens=0)
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(rec.to_json()) + "\n")
    assert read_trace(path) == [rec]


def test_inconsistent_values_are_mended_and_the_line_kept():
    # t_end before t_start would make a negative latency that poisons every mean it enters
    rec = parse_line(_line(t_start=5000.0, t_end=4000.0))
    assert (rec.t_start, rec.t_end) == (5000.0, 5000.0)
    # more cached than prompt tokens cannot be a measurement: unknown, not a figure
    notes = []
    rec = parse_line(_line(prompt_tokens=10, cached_tokens=11), notes)
    assert rec.cached_tokens is None and ("cached_tokens", "more than prompt_tokens; read as unknown") in notes
    assert parse_line(_line(prompt_tokens=10, cached_tokens=10)).cached_tokens == 10  # all cached is fine


def test_lone_surrogates_in_text_fields_are_replaced_so_every_consumer_can_print_them(tmp_path, caplog):
    # '\\ud800' in JSON decodes to a lone surrogate: valid JSON, but no UTF-8 output can carry it
    line = _line(agent="\ud800x", app="a\udfffb")
    notes = []
    rec = parse_line(line, notes)
    assert (rec.agent, rec.app) == ("\ufffdx", "a\ufffdb")
    rec.agent.encode("utf-8")  # printable now
    assert {name for name, _ in notes} == {"agent", "app"}
    path = tmp_path / "s.jsonl"
    path.write_text(line + "\n" + _line(step=1) + "\n")
    with caplog.at_level(logging.WARNING):
        assert [r.agent for r in read_trace(str(path))] == ["\ufffdx", "planner"]
    assert sum("lone surrogate" in r.message for r in caplog.records) == 1
