"""``pbkv-bench replay``: the host tier follows --device-tokens (--host-ratio), gap closed and the
device + host hit rate per policy, torch limited to --threads before a model loads."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pbkv_server.cli.bench import app
from pbkv_server.engine.policies import BASELINE_POLICY, REFERENCE_POLICY
from pbkv_server.hardware.profiles import DEFAULT_HOST_RATIO, PAPER_HOST_RATIO, get_profile, host_tokens_for
from pbkv_server.sim.study.paper import StudySettings
from pbkv_server.sim.report import gap_closed
from .sim_fixtures import write_model

runner = CliRunner()
PROFILE = "h100-qwen2.5-32b"


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("report") / "t.jsonl"
    result = runner.invoke(app, ["synth", "--graph", "codegen", "--workflows", "16", "--seed", "4", "--out", str(path)])
    assert result.exit_code == 0, result.output
    return path


def _replay(trace, tmp_path, *args) -> tuple[dict, str]:
    out = tmp_path / "r.json"
    result = runner.invoke(app, ["replay", str(trace), "--profile", PROFILE, "--concurrency", "4",
                                 "--json", str(out), *args])
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text()), " ".join(result.output.split())


def test_host_tokens_rule():
    p = get_profile(PROFILE)
    assert DEFAULT_HOST_RATIO == 2.0  # SGLang HiCache's default --hicache-ratio
    assert host_tokens_for(p) == p.host_kv_tokens
    assert host_tokens_for(p, device_tokens=30_000) == 60_000
    assert host_tokens_for(p, device_tokens=30_001, host_ratio=1.5) == 45_002  # round(45001.5), half to even
    assert host_tokens_for(p, host_ratio=1) == p.device_kv_tokens  # a ratio applies to the profile's device too
    assert host_tokens_for(p, device_tokens=30_000, host_ratio=0) == 0
    assert host_tokens_for(p, device_tokens=30_000, host_tokens=7, host_ratio=1) == 7  # explicit wins
    for bad in (-1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="host ratio"):
            host_tokens_for(p, device_tokens=30_000, host_ratio=bad)


@pytest.mark.parametrize("args,host", [
    (["--device-tokens", "30000"], 30_000),  # PAPER_HOST_RATIO = 1, as pbkv-bench study
    (["--device-tokens", "30000", "--host-ratio", "2"], 60_000),
    (["--device-tokens", "30000", "--host-ratio", "1", "--host-tokens", "5000"], 5_000),
])
def test_the_host_tier_follows_the_device_size_and_the_table_and_json_say_so(trace, tmp_path, args, host):
    data, output = _replay(trace, tmp_path, "--policy", "lru", "--no-gap", *args)
    assert (data["lru"]["device_tokens"], data["lru"]["host_tokens"]) == (30_000, host)
    assert data["lru"]["host_ratio"] == host / 30_000
    assert f"device 30000 tok, host {host} tok ({host / 30_000:.3g}x)" in output


def test_host_ratio_0_means_no_host_tier(trace, tmp_path):
    data, _ = _replay(trace, tmp_path, "--policy", "lru,pbkv", "--no-gap", "--device-tokens", "30000",
                      "--host-ratio", "0")
    for summary in data.values():
        assert summary["host_tokens"] == 0 and summary["host_hit_rate"] == 0.0
        assert summary["prefetched_tokens"] == 0


def test_without_device_tokens_the_profiles_device_runs_with_a_host_tier_of_the_same_size(trace, tmp_path):
    p = get_profile(PROFILE)
    data, output = _replay(trace, tmp_path, "--policy", "lru", "--no-gap")
    # the PBKV paper's setup (HiCache HICACHE_RATIO=1), with or without --device-tokens, as study's default
    assert (data["lru"]["device_tokens"], data["lru"]["host_tokens"]) == (p.device_kv_tokens, p.device_kv_tokens)
    assert PAPER_HOST_RATIO == 1.0 and StudySettings().host_ratio == PAPER_HOST_RATIO
    assert f"device {p.device_kv_tokens} tok, host {p.device_kv_tokens} tok (1x)" in output


@pytest.mark.parametrize("ratio", ["-1", "nan", "1e308"])  # 1e308 x device tokens overflowed to a traceback
def test_bad_host_ratio_is_a_clear_error(trace, ratio):
    result = runner.invoke(app, ["replay", str(trace), "--host-ratio", ratio])
    assert result.exit_code == 2 and "--host-ratio: host ratio must be a number from 0" in result.output
    assert "Traceback" not in result.output


@pytest.mark.slow
def test_gap_closed_is_computed_per_policy_on_the_baseline_to_reference_scale(trace, tmp_path):
    listed, output = _replay(trace, tmp_path, "--policy", "he", "--device-tokens", "30000")
    # the baseline and the reference ran for the scale only: the JSON and table list what was asked for
    assert list(listed) == ["he"]
    # an independent check: all three listed, each replayed in its own right
    full, _ = _replay(trace, tmp_path, "--policy", f"he,{BASELINE_POLICY},{REFERENCE_POLICY}", "--device-tokens",
                      "30000")
    h, base, ref = (full[p]["hit_rate"] for p in ("he", BASELINE_POLICY, REFERENCE_POLICY))
    assert base != ref and listed["he"]["hit_rate"] == h
    assert (listed["he"]["gap_baseline_hit_rate"], listed["he"]["gap_reference_hit_rate"]) == (base, ref)
    assert listed["he"]["gap_closed"] == pytest.approx((h - base) / (ref - base), rel=1e-12)
    assert full["he"]["gap_closed"] == listed["he"]["gap_closed"]
    assert full[BASELINE_POLICY]["gap_closed"] == 0.0 and full[REFERENCE_POLICY]["gap_closed"] == 1.0
    for s in full.values():
        assert s["device_host_hit_rate"] == pytest.approx(s["hit_rate"] + s["host_hit_rate"])
        assert (s["gap_baseline"], s["gap_reference"]) == (BASELINE_POLICY, REFERENCE_POLICY)
    assert f"gap closed: 0 = {BASELINE_POLICY} {base:.3f}, 1 = {REFERENCE_POLICY} {ref:.3f}" in output
    assert f"{listed['he']['gap_closed']:.2f}" in output


def test_no_gap_runs_only_the_listed_policies_and_leaves_gap_closed_empty(trace, tmp_path):
    data, output = _replay(trace, tmp_path, "--policy", "he", "--no-gap", "--device-tokens", "30000")
    assert list(data) == ["he"] and data["he"]["gap_closed"] is None
    assert data["he"]["gap_baseline_hit_rate"] is None and data["he"]["gap_reference_hit_rate"] is None
    assert f"0 = {BASELINE_POLICY} (not run), 1 = {REFERENCE_POLICY} (not run)" in output
    # the table's row, not the progress bar's (on a non-terminal stderr it follows the plain lines)
    row = [line for line in output.split(" he ")[1:] if not line.startswith("━")]
    assert row and row[0].split()[1] == "-"  # hit rate, then "-" for gap closed


def test_gap_closed_formula_and_edge_cases():
    assert gap_closed(0.3, 0.2, 0.4) == pytest.approx(0.5)
    assert gap_closed(0.1, 0.2, 0.4) == pytest.approx(-0.5)  # below the baseline
    assert gap_closed(0.5, 0.2, 0.4) == pytest.approx(1.5)  # above the reference (it is no bound)
    assert gap_closed(0.3, 0.25, 0.25) is None  # no gap to close
    assert gap_closed(0.7150, 0.7149, 0.7151) is None  # under half a point: a ratio of noise
    assert gap_closed(0.7175, 0.715, 0.720) == pytest.approx(0.5)  # half a point is a gap
    assert gap_closed(0.3, None, 0.4) is None and gap_closed(0.3, 0.2, None) is None


def test_torch_is_limited_to_threads_before_the_model_loads_and_restored_after(trace, tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    import pbkv_train.serving as serving

    model = tmp_path / "codegen.pt"
    write_model(model, "codegen", ["planner", "coder", "tester", "analyzer"])
    seen = []
    real = serving.load_predictor

    def spy(path, app=None):
        seen.append(torch.get_num_threads())
        return real(path, app=app)

    monkeypatch.setattr(serving, "load_predictor", spy)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        _replay(trace, tmp_path, "--policy", "he", "--no-gap", "--predictor", str(model),
                "--device-tokens", "30000", "--threads", "1")
        assert seen and set(seen) == {1}
        assert torch.get_num_threads() == 2  # an in-process caller gets its setting back
    finally:
        torch.set_num_threads(before)


def test_a_replay_with_a_builtin_predictor_does_not_import_torch(trace):
    code = ("import sys; from typer.testing import CliRunner; from pbkv_server.cli.bench import app; "
            f"r = CliRunner().invoke(app, ['replay', {str(trace)!r}, '--policy', 'he', '--no-gap', "
            "'--device-tokens', '30000']); assert r.exit_code == 0, r.output; print('torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"
