"""Replay, predictor training and ``pbkv-sdk validate`` accept the same trace lines (one parser), and a
v1 trace written by another tool with ``null`` in every optional field replays and trains."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from pbkv_contract.trace import TraceFileReport, iter_trace
from pbkv_sdk.cli import app as sdk_app
from pbkv_server.cli.bench import app as bench_app
from pbkv_server.sim.synth.agents import generate

runner = CliRunner()
OPTIONAL = ("ttft_s", "cached_tokens", "block_chars", "features", "text", "block_tokens")


@pytest.fixture(scope="module")
def null_trace(tmp_path_factory):
    """20 synthetic codegen workflows written as another tool would: every optional field null."""
    path = tmp_path_factory.mktemp("foreign") / "nulls.jsonl"
    lines = []
    for rec in generate("codegen", 20, seed=5):
        data = rec.to_json()
        if data["type"] == "invocation":
            data.update({name: None for name in OPTIONAL})
        else:
            data["status"] = None
        lines.append(json.dumps(data))
    path.write_text("\n".join(lines) + "\n")
    return path


def _invocations(path) -> int:
    return sum(json.loads(line)["type"] == "invocation" for line in path.read_text().splitlines())


def test_a_trace_with_nulls_in_every_optional_field_replays(null_trace, tmp_path):
    out = tmp_path / "r.json"
    result = runner.invoke(bench_app, ["replay", str(null_trace), "--policy", "lru,he", "--no-gap",
                                       "--device-tokens", "40000", "--json", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["lru"]["requests"] == data["he"]["requests"] == _invocations(null_trace)
    assert data["lru"]["workflows"] == 20


@pytest.mark.slow
def test_a_trace_with_nulls_in_every_optional_field_trains(null_trace, tmp_path):
    model = tmp_path / "m.pt"
    from pbkv_train.cli import app as predictor_app  # torch: imported by the test that needs it
    from pbkv_train.store import load_model

    result = runner.invoke(predictor_app, ["train", str(null_trace), "--out", str(model), "--epochs", "1",
                                           "--threads", "1"])
    assert result.exit_code == 0, result.output
    loaded = load_model(model, app="codegen")
    assert loaded.info["train_workflows"] == 18  # 90% of the 20 workflows; the rest validates


def test_a_trace_with_nulls_in_every_optional_field_validates(null_trace):
    result = runner.invoke(sdk_app, ["validate", str(null_trace)])
    assert result.exit_code == 0, result.output
    assert f"{len(null_trace.read_text().splitlines())} valid, 0 invalid" in result.output


def test_validate_rejects_exactly_the_lines_replay_and_training_skip(null_trace, tmp_path):
    lines = null_trace.read_text().splitlines()
    good = json.loads(lines[0])
    bad = {
        3: lines[2][:30],                                            # truncated
        5: json.dumps({**good, "agent": None}),                      # required field null
        8: json.dumps({**good, "v": None}),                          # no version
        9: "[1, 2]",                                                 # not an object
        12: json.dumps({**good, "type": "llm_call"}),                # unknown type
    }
    soft = {6: json.dumps({**good, "features": [1.0], "model": "x"})}  # read as unknown / ignored: valid
    mixed = [bad.get(i, soft.get(i, line)) for i, line in enumerate(lines[:14], start=1)]
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join(mixed) + "\n")
    report = TraceFileReport(str(path))
    read = list(iter_trace(path, report=report))  # what replay and training read (read_trace)
    assert [lineno for lineno, _ in report.skipped] == sorted(bad)
    result = runner.invoke(sdk_app, ["validate", str(path)])
    assert result.exit_code == 1
    listed = [int(line.split(":")[1]) for line in result.output.splitlines() if line.startswith(str(path))]
    assert listed == sorted(bad)
    assert f"{len(read)} valid, {len(bad)} invalid" in result.output


def test_validate_refuses_a_trace_without_invocations_as_replay_does(tmp_path):
    path = tmp_path / "ends.jsonl"
    path.write_text(json.dumps({"type": "workflow_end", "v": 1, "app": "a", "workflow_id": "w", "t": 1.0}) + "\n")
    result = runner.invoke(sdk_app, ["validate", str(path)])
    assert result.exit_code == 1 and "no invocation record" in " ".join(result.output.split())  # any width
    replayed = runner.invoke(bench_app, ["replay", str(path), "--policy", "lru"])
    assert replayed.exit_code == 2 and "no invocation records" in " ".join(replayed.output.split())
