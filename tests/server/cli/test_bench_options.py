"""``pbkv-bench replay`` / ``advise``: options that were ignored or refused late.

Each bad input is one line on stderr and exit status 2, given before the trace is read (a day of
traffic is 0.2-0.5 GB, read for a minute) or, when the trace is needed to judge it, before any
replay; nothing is written.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

import pbkv_contract.trace
import pbkv_server.sim.simulator as simulator
from pbkv_contract.trace import InvocationRecord, read_trace
from pbkv_server.cli.bench import app
from pbkv_server.hardware.profiles import get_profile
from pbkv_server.sim.synth.agents import write_trace

runner = CliRunner()
PROFILE = "a6000x8-qwen3-32b-tp8"


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("opts") / "t.jsonl"
    write_trace(str(path), graph="codegen", workflows=3, seed=5)
    return path


@pytest.fixture
def no_read(monkeypatch):
    """The trace must not be read (nor anything replayed): each does so only in a failing test."""
    def read(*a, **k):
        raise AssertionError("the trace was read before the option was refused")

    monkeypatch.setattr(pbkv_contract.trace, "read_trace", read)
    monkeypatch.setattr(simulator, "simulate", lambda *a, **k: pytest.fail("replayed before refusing"))


def _refused(args: list[str], tmp_path: Path) -> str:
    """The one stderr line of a refused command (exit 2, nothing on stdout, no --json written)."""
    out = tmp_path / "out.json"
    result = runner.invoke(app, [*args, "--json", str(out)])
    assert result.exit_code == 2, result.output
    assert result.stdout == "" and not out.exists(), result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


# 1. --tp / --gpu with --profile (or with no --gpu-memory) were ignored, exit 0


@pytest.mark.parametrize("args,message", [
    (["--profile", PROFILE, "--tp", "4"], "give --profile or --gpu-memory/--model [--tp N] [--gpu G], not both "
                                          "(--profile with --tp)"),
    (["--profile", PROFILE, "--gpu", "h200"], "not both (--profile with --gpu)"),
    (["--profile", PROFILE, "--tp", "1"], "not both (--profile with --tp)"),  # typed, even at its default
    (["--profile", PROFILE, "--gpu", "h100", "--tp", "8"], "not both (--profile with --tp, --gpu)"),
    (["--profile", PROFILE, "--gpu-memory", "80", "--model", "qwen3-14b"],
     "not both (--profile with --gpu-memory, --model)"),
    (["--tp", "4"], "--tp describes the hardware with --gpu-memory/--model; give those too, or --profile alone"),
    (["--gpu", "h200", "--tp", "2"], "--tp and --gpu describe the hardware with --gpu-memory/--model"),
    (["--gpu-memory", "80", "--tp", "2"], "--gpu-memory and --model go together"),
    (["--model", "qwen3-14b"], "--gpu-memory and --model go together"),
])
def test_advise_refuses_hardware_options_given_half_or_twice(trace, tmp_path, no_read, args, message):
    assert message in _refused(["advise", str(trace), *args], tmp_path)


def test_advise_takes_tp_and_gpu_with_gpu_memory_and_model(trace, tmp_path, monkeypatch):
    # the options are still taken where they mean something: the custom setup reaches the replay
    import pbkv_server.sim.advise as advise_module

    seen = []

    def stop(records, hw, **k):
        seen.append(hw.name)
        raise ValueError("stopped before the replays")

    monkeypatch.setattr(advise_module, "advise", stop)
    result = runner.invoke(app, ["advise", str(trace), "--gpu-memory", "80", "--model", "qwen3-14b", "--tp", "2",
                                 "--gpu", "h200"])
    assert "stopped before the replays" in result.stderr and seen == ["h200x2-80gib-qwen3-14b"]


# 2. a bad --predictor was refused only after the trace was read


@pytest.mark.parametrize("command", ["replay", "advise"])
@pytest.mark.parametrize("spec,message", [
    ("nosuch", "unknown predictor 'nosuch' (expected oracle | uniform | markov | context | noise:LAMBDA | PATH "
               "(trained model file)), and predictor model file not found: nosuch"),
    ("noise:2", "noise lambda must be in [0, 1], got 2.0"),
    ("noise:nan", "noise lambda must be in [0, 1], got nan"),
    ("noise:x", "noise lambda must be a number in [0, 1], got 'x'"),
    ("/no/such/model.pt", "predictor model file not found: /no/such/model.pt"),
    (" ", "empty predictor spec (expected oracle | uniform | markov | context | noise:LAMBDA | PATH (trained "
          "model file))"),
])
def test_a_bad_predictor_is_refused_before_the_trace_is_read(trace, tmp_path, no_read, command, spec, message):
    assert _refused([command, str(trace), "--predictor", spec], tmp_path) == f"error: {message}"


@pytest.mark.parametrize("command", ["replay", "advise"])
def test_a_predictor_folder_is_refused_before_the_trace_is_read(trace, tmp_path, no_read, command):
    line = _refused([command, str(trace), "--predictor", str(tmp_path)], tmp_path)
    assert line == f"error: predictor model path is a directory, not a model file: {tmp_path}"


def test_good_predictor_specs_still_replay(trace, tmp_path):
    # noise:0 and noise:1 are the ends of the range: taken, and the replay runs
    for spec in ("noise:0", "noise:1", "markov"):
        result = runner.invoke(app, ["replay", str(trace), "--policy", "lru", "--no-gap", "--predictor", spec,
                                     "--concurrency", "2"])
        assert result.exit_code == 0, (spec, result.output)


# 3. --page-size larger than every prompt: every hit rate 0, then "the trace fits in device memory"


def _longest_prompt(trace: Path) -> int:
    """The most tokens one prompt of ``trace`` pages (its blocks' tokens), by the records."""
    return max(sum(r.tokens_per_block()) for r in read_trace(trace) if isinstance(r, InvocationRecord))


def test_a_page_larger_than_the_device_is_refused_before_the_trace_is_read(trace, tmp_path, no_read):
    device = get_profile(PROFILE).device_kv_tokens
    line = _refused(["replay", str(trace), "--profile", PROFILE, "--page-size", "100000000"], tmp_path)
    assert line == (f"error: --page-size 100,000,000 is larger than the device ({device:,} tok): a KV pool of whole "
                    f"pages would hold none (SGLang then stops: not enough memory); give --page-size <= {device}")
    line = _refused(["replay", str(trace), "--device-tokens", "50000", "--page-size", "50001"], tmp_path)
    assert "--page-size 50,001 is larger than the device (50,000 tok)" in line


def test_a_page_larger_than_every_prompt_is_refused_before_any_replay(trace, tmp_path, monkeypatch):
    longest = _longest_prompt(trace)
    monkeypatch.setattr(simulator, "simulate", lambda *a, **k: pytest.fail("replayed before refusing"))
    line = _refused(["replay", str(trace), "--page-size", str(longest + 1)], tmp_path)
    assert line == (f"error: --page-size {longest + 1:,}: no prompt of the trace fills one page (the longest has "
                    f"{longest:,} tokens); only whole pages are cached, as in SGLang, so nothing would be cached "
                    f"and every policy would replay alike; give --page-size <= {longest}")


def test_a_page_the_longest_prompt_fills_is_replayed(trace, tmp_path):
    out = tmp_path / "r.json"
    longest = _longest_prompt(trace)
    result = runner.invoke(app, ["replay", str(trace), "--policy", "lru", "--no-gap", "--concurrency", "2",
                                 "--page-size", str(longest), "--json", str(out)])
    assert result.exit_code == 0, result.output
    # only the longest prompt fills a page (the next is shorter, by the records): F is that one page
    second = sorted(sum(r.tokens_per_block()) for r in read_trace(trace) if isinstance(r, InvocationRecord))[-2]
    assert second < longest
    assert (f"the trace fits in device memory (distinct prompt pages (--page-size {longest}) F = {longest} tok, "
            f"device") in " ".join(result.stdout.split())
