"""``pbkv-bench study regime``: the grid by hand on a hand-made trace, the acceptance lists by hand,
and the quick sweep end to end (JSON shape, determinism, speedup and capture from the same JSON)."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from pbkv_server.cli.bench import app
from pbkv_server.sim.capacity import working_set
from pbkv_server.sim.study.regime import QUICK, RegimeSettings, RegimeWorkload, acceptance, grid, run_workload
from pbkv_server.sim.synth.agents import write_trace
from .sim_fixtures import make_end, make_inv

runner = CliRunner()


def _hand_trace():
    """Three workflows, each two calls: a shared 100-token block S, its own block P (50 tokens,
    used by both calls) and, in the second call, a 30-token block used once; 3 output tokens.

    By hand (capacity.py's definitions): S = 100, mean R_w = 50 (P), unshared prompt tokens per
    request = (50 + 80) / 2 = 65; so at C = 2: W = 100 + 2 x 50 = 200, A = 2 x 65 = 130; at
    C >= 3 (all three in flight): W = 250, A = 195. Largest request: 100 + 50 + 30 + 3 = 183.
    """
    records = []
    for w in ("w1", "w2", "w3"):
        records.append(make_inv(w, 0, "a", ["S", f"P-{w}"], [100, 50], t_start=0.0, t_end=1.0))
        records.append(make_inv(w, 1, "b", ["S", f"P-{w}", f"Q-{w}"], [100, 50, 30], t_start=2.0, t_end=3.0))
        records.append(make_end(w, 4.0))
    return records


def test_grid_devices_are_a_plus_f_w_by_hand():
    ws = working_set(_hand_trace(), by_session=True)
    assert (ws.shared_tokens, ws.mean_private_tokens) == (100, 50)
    notes: list[str] = []
    settings = RegimeSettings(device_fractions=(0.25, 1.0), host_ratios=(0.0, 1.0), concurrency_factors=(1, 2, 3))
    cells = grid(ws, 2, settings, smallest_device=183, notes=notes)
    got = [(c.concurrency, c.host_ratio, c.device_fraction, c.device_tokens, c.host_tokens) for c in cells]
    assert got == [
        # C=2: A + 0.25 W = 130 + 50 = 180 < 183 (the largest request) -> 183; A + W = 330
        (2, 0.0, 0.25, 183, 0), (2, 0.0, 1.0, 330, 0), (2, 1.0, 0.25, 183, 183), (2, 1.0, 1.0, 330, 330),
        # C=4 (3 in flight): 195 + 62.5 = 257.5 -> 258; 195 + 250 = 445
        (4, 0.0, 0.25, 258, 0), (4, 0.0, 1.0, 445, 0), (4, 1.0, 0.25, 258, 258), (4, 1.0, 1.0, 445, 445),
    ]  # C=6 has the same three in flight as C=4: skipped
    assert [(c.live_tokens, c.in_flight_tokens) for c in cells[:1] + cells[4:5]] == [(200, 130), (250, 195)]
    assert any("concurrency 6 (3x) skipped" in n for n in notes)
    assert any("device raised from 180 to 183" in n for n in notes)


def test_run_workload_on_hand_trace_regimes():
    result = run_workload(RegimeWorkload("hand", "hand", "markov", 2, "h100-qwen2.5-32b"), QUICK,
                          records=_hand_trace())
    cells = result["cells"]
    assert len(cells) == 8 and result["smallest_device_tokens"] == 183
    by = {(c["concurrency"], c["host_ratio"], c["device_fraction"]): c for c in cells}
    # A + W = 330 at C=2: device 183 holds less (short without host, fits with a 183 host); 330 fits
    assert by[(2, 0.0, 0.25)]["regime"] == "short"
    assert by[(2, 1.0, 0.25)]["regime"] == "fits with host"
    assert by[(2, 0.0, 1.0)]["regime"] == "fits in device"
    for c in cells:
        assert list(c["policies"]) == ["lru", "lae", "he", "pbkv", "sglang-session", "opt"]
        assert c["policies"]["lru"]["latency_speedup"] == 1.0


def _cell(c, f, h, pbkv_speedup, pbkv_capture, opt_speedup):
    return {"concurrency": c, "device_fraction": f, "host_ratio": h, "opt_gain": opt_speedup >= 1.05,
            "policies": {"pbkv": {"latency_speedup": pbkv_speedup, "latency_capture": pbkv_capture},
                         "opt": {"latency_speedup": opt_speedup}}}


def test_acceptance_lists_by_hand():
    cells = [_cell(8, 0.25, 0.0, 1.04, 0.5, 1.10),  # opt gain, capture 0.5 -> listed
             _cell(8, 0.5, 0.0, 1.09, 0.9, 1.10),  # opt gain, capture 0.9 -> fine
             _cell(8, 0.75, 0.0, 0.998, math.nan, 1.001),  # no gain, but slower than LRU -> listed
             _cell(8, 1.0, 0.0, 0.9995, math.nan, 1.0)]  # within 0.999 -> fine
    acc = acceptance(cells)
    assert acc["opt_gain_cells"] == 2
    assert [(r["device_fraction"], r["capture"]) for r in acc["capture_below"]] == [(0.25, 0.5)]
    assert [r["device_fraction"] for r in acc["slower_than_lru"]] == [0.75]


@pytest.fixture(scope="module")
def quick_runs(tmp_path_factory):
    """The quick sweep on a tiny synthetic trace, twice, through the CLI."""
    tmp = tmp_path_factory.mktemp("regime")
    trace = tmp / "tiny.jsonl"
    write_trace(str(trace), graph="codegen", workflows=8, seed=3)
    outs = []
    for name in ("a", "b"):
        out = tmp / name
        result = runner.invoke(app, ["study", "regime", str(trace), "--quick", "--concurrency", "4",
                                     "--out-dir", str(out)])
        assert result.exit_code == 0, result.output
        outs.append(out)
    return outs


@pytest.mark.slow
def test_quick_sweep_json_shape_and_determinism(quick_runs):
    a, b = quick_runs
    text = (a / "study.json").read_text()
    assert text == (b / "study.json").read_text()  # deterministic: identical run to run
    data = json.loads(text)
    assert data["settings"]["device_fractions"] == [0.25, 1.0] and data["settings"]["host_ratios"] == [0.0, 1.0]
    (w,) = data["workloads"]
    assert w["label"] == "tiny" and w["base_concurrency"] == 4
    # 8 workflows: C=8 (2x) is a second concurrency; 2 x 2 x 2 cells in run order
    assert [(c["concurrency"], c["host_ratio"], c["device_fraction"]) for c in w["cells"]] == [
        (4, 0.0, 0.25), (4, 0.0, 1.0), (4, 1.0, 0.25), (4, 1.0, 1.0),
        (8, 0.0, 0.25), (8, 0.0, 1.0), (8, 1.0, 0.25), (8, 1.0, 1.0)]
    keys = {"mean_latency_s", "mean_ttft_s", "hit_rate", "host_hit_rate", "prefill_saved", "latency_speedup",
            "latency_capture"}
    for c in w["cells"]:
        assert set(c) >= {"device_tokens", "host_tokens", "live_tokens", "in_flight_tokens", "regime", "opt_gain",
                          "verdict", "policies"}
        assert c["device_tokens"] == max(math.ceil(c["in_flight_tokens"] + c["device_fraction"] * c["live_tokens"]),
                                         w["smallest_device_tokens"])
        assert c["host_tokens"] == round(c["host_ratio"] * c["device_tokens"])
        for figures in c["policies"].values():
            assert set(figures) == keys
    assert set(w["acceptance"]) == {"policy", "opt_gain_cells", "capture_below", "slower_than_lru"}
    assert (a / "tiny_regime.png").stat().st_size > 10_000
    assert "Acceptance (pbkv)" in (a / "report.md").read_text()


@pytest.mark.slow
def test_quick_sweep_speedup_and_capture_from_the_same_json(quick_runs):
    data = json.loads((quick_runs[0] / "study.json").read_text())
    for c in data["workloads"][0]["cells"]:
        lru, opt = c["policies"]["lru"]["mean_latency_s"], c["policies"]["opt"]["mean_latency_s"]
        for figures in c["policies"].values():
            assert figures["latency_speedup"] == pytest.approx(lru / figures["mean_latency_s"], rel=1e-12)
            if lru / opt >= 1.005:
                assert figures["latency_capture"] == pytest.approx((lru - figures["mean_latency_s"]) / (lru - opt),
                                                                   rel=1e-9, abs=1e-12)
            else:
                assert figures["latency_capture"] is None  # no gap to capture (measures.MIN_DIFFERENCE)
        assert c["opt_gain"] == (lru / opt >= 1.05)


def test_bad_workload_is_one_line(tmp_path):
    result = runner.invoke(app, ["study", "regime", str(tmp_path / "missing.jsonl"), "--out-dir", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert "no such file or folder" in result.output and "Traceback" not in result.output
    result = runner.invoke(app, ["study", "regime", "synth:codegen", "--host-ratios", "x", "--out-dir", str(tmp_path)])
    assert result.exit_code == 2 and "--host-ratios must be comma-separated numbers" in result.output
    # fractions below 1 and a host ratio of 0 are the grid's own values (docs/chatdev-regime.md's command)
    result = runner.invoke(app, ["study", "regime", str(tmp_path / "missing.jsonl"), "--device-fractions", "0.25,0.5,1",
                                 "--host-ratios", "0,1", "--out-dir", str(tmp_path / "o2")])
    assert result.exit_code == 2 and "no such file or folder" in result.output, result.output


@pytest.mark.parametrize("option, value, line", [
    ("--device-fractions", "0.5,,1", "--device-fractions '0.5,,1': item 2 is empty (a doubled or trailing comma?)"),
    ("--device-fractions", "0.5,1,", "--device-fractions '0.5,1,': item 3 is empty (a doubled or trailing comma?)"),
    ("--device-fractions", "0.5,0.50", "--device-fractions '0.5,0.50': 0.5 is listed twice"),
    ("--host-ratios", "nan", "--host-ratios must be finite numbers, got nan"),
    ("--concurrency-factors", "1,inf", "--concurrency-factors must be finite numbers, got inf"),
])
def test_a_number_list_is_read_as_a_policy_list_is(option, value, line, tmp_path):
    # found by a new-user check: `0.5,,1` and `0.5,0.5` were accepted where `--policies` refuses both
    result = runner.invoke(app, ["study", "regime", "synth:codegen", option, value, "--out-dir", str(tmp_path)])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [f"error: {line}"], result.output


@pytest.mark.slow
def test_docs_script_tables_come_from_the_json(quick_runs, tmp_path):
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    spec = importlib.util.spec_from_file_location("make_regime_docs", root / "scripts" / "make_regime_docs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    page = tmp_path / "page.md"
    page.write_text(f"# t\n\n{mod.BEGIN}\nold\n{mod.END}\n")
    assert mod.main(["--study", str(quick_runs[0] / "study.json"), "--out-dir", str(tmp_path / "o"),
                     "--page", str(page)]) == 0
    text = page.read_text()
    data = json.loads((quick_runs[0] / "study.json").read_text())
    cells = data["workloads"][0]["cells"]
    best = max(c["policies"]["opt"]["latency_speedup"] for c in cells)
    assert f"| tiny |" in text and f"{best:.3f}x (C=" in text and "old" not in text
    assert (tmp_path / "o" / "tiny_regime.png").is_file() and (tmp_path / "o" / "report.md").is_file()
    assert mod.main(["--study", str(quick_runs[0] / "study.json"), "--page", str(page), "--check"]) == 0
    assert mod.main(["--study", str(tmp_path / "nope.json"), "--page", str(page)]) == 2
