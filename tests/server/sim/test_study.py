"""``pbkv-bench study``: aggregation and admission limits by hand, a small study end to end, the CLI."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from pbkv_server.cli.bench import app
from pbkv_server.engine.policies import BASELINE_POLICY, DEFAULT_POLICY, REPLAY, available_policies, policy_info
from pbkv_server.engine.guard import host_value
from pbkv_server.hardware.profiles import get_profile
from pbkv_server.sim.study.paper import Point, Run, StudySettings, admission_limits, aggregate, run_study, study_steps
from pbkv_server.sim.synth.agents import generate, write_trace

runner = CliRunner()


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """One torch thread, as the CLI uses (on a shared machine more threads spin and run 10x slower)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_aggregate_gives_mean_and_population_std_per_point():
    runs = [Run("gamma", "p", 0.5, 0, {"hit_rate": 0.2}), Run("gamma", "p", 0.5, 1, {"hit_rate": 0.4}),
            Run("gamma", "p", 0.7, None, {"hit_rate": 0.3})]
    a, b = aggregate(runs)
    assert (a.x, a.n, b.x, b.n) == (0.5, 2, 0.7, 1)
    assert a.mean["hit_rate"] == pytest.approx(0.3) and a.std["hit_rate"] == pytest.approx(0.1)
    assert b.std["hit_rate"] == 0.0


def test_admission_limit_is_the_first_concurrency_with_a_request_waiting_on_average():
    def point(policy, c, queue):
        return Point("concurrency", policy, c, 1, {"mean_queue_length": queue}, {"mean_queue_length": 0.0})

    points = [point("a", 96, 3.0), point("a", 24, 0.1), point("a", 48, 1.0), point("b", 24, 0.2), point("b", 48, 0.9)]
    assert admission_limits(points) == {"a": 48, "b": None}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """An example-like output folder: synthetic test and training traces and a trained GraphSAGE file."""
    from pbkv_train.backbones import train_backbone
    from pbkv_train.store import save_model

    root = tmp_path_factory.mktemp("run") / "codegen_run"
    root.mkdir()
    write_trace(str(root / "test.jsonl"), graph="codegen", workflows=10, seed=1)
    train = list(generate(graph="codegen", workflows=24, seed=2))
    write_trace(str(root / "train.jsonl"), graph="codegen", workflows=24, seed=2)
    bb = train_backbone("graphsage", train, seed=0, epochs=2)
    save_model(root / "predictor.pt", bb.model, bb.vocab)
    return root


SMALL = dict(profile="h100-qwen2.5-32b", device_tokens=60_000, concurrency=4, concurrencies=(2, 4), seeds=2, epochs=2,
             backbones=("graphsage", "markov3"), horizons=(1, 2), gammas=(0.5, 1.0), rhos=(0.0, 0.3),
             lambdas=(0.0, 1.0))


@pytest.mark.slow
def test_a_small_study_runs_every_study_with_the_counted_replays_and_ratios_to_the_baseline(run_dir):
    from pbkv_contract.trace import read_trace

    settings = StudySettings(**SMALL)
    seen: dict[str, int] = {}
    result = run_study(read_trace(run_dir / "test.jsonl"), str(run_dir / "predictor.pt"), settings,
                       train_records=read_trace(run_dir / "train.jsonl"),
                       on_replay=lambda s: seen.__setitem__(s, seen.get(s, 0) + 1))
    assert seen == study_steps(settings, 2)
    points = result.points
    # the online ones: an offline policy (pbkv-nextuse) is not part of the paper's sweeps
    predictive = [p for p in available_policies(REPLAY) if policy_info(p).predictive and not policy_info(p).offline]
    # every online policy is swept, predictive ones once per seed; the baseline's ratios are 1
    sweep = [p for p in points if p.study == "concurrency"]
    assert {(p.policy, p.x) for p in sweep} == {(q, c) for q in available_policies(REPLAY)
                                                 if not policy_info(q).offline for c in (2, 4)}
    assert all(p.n == (2 if p.policy in predictive else 1) for p in sweep)
    base = [p for p in sweep if p.policy == BASELINE_POLICY]
    assert all(p.mean["hit_ratio"] == 1.0 and p.mean["latency_ratio"] == 1.0 for p in base)
    b4 = next(p for p in base if p.x == 4)
    # measures against lru and opt replayed once per concurrency (means of linear figures are the
    # figures of the means): capture = (L_lru - L) / (L_lru - L_opt), saved = hit + v x host hit
    v = host_value(get_profile(SMALL["profile"]))
    assert set(result.references) == set(result.baselines) == {2, 4}
    for p in sweep:
        l_base, l_ref = result.baselines[p.x]["mean_latency_s"], result.references[p.x]["mean_latency_s"]
        if l_base / l_ref >= 1.005:
            assert p.mean["latency_capture"] == pytest.approx((l_base - p.mean["mean_latency_s"]) / (l_base - l_ref))
        else:
            assert math.isnan(p.mean["latency_capture"])
        assert p.mean["prefill_saved"] == pytest.approx(p.mean["hit_rate"] + v * p.mean["host_hit_rate"])
        if p.n == 1:
            assert p.mean["latency_speedup"] == pytest.approx(l_base / p.mean["mean_latency_s"])
            assert p.mean["latency_ratio"] == p.mean["latency_speedup"]  # the older key, same figure
    for p in points:  # every ratio is against the baseline replayed at the same concurrency
        if p.study != "concurrency":
            assert p.mean["hit_ratio"] == pytest.approx(p.mean["hit_rate"] / b4.mean["hit_rate"])
    # the baseline point is the plain replay of the trace at that setup (host tier = device, the study's default)
    from pbkv_server.sim.simulator import ReplayConfig, ReplayOptions, load_workload, simulate

    config = ReplayConfig(BASELINE_POLICY, get_profile(SMALL["profile"]), device_tokens=SMALL["device_tokens"],
                          host_tokens=SMALL["device_tokens"])
    direct = simulate(load_workload(read_trace(run_dir / "test.jsonl")), config, ReplayOptions(concurrency=4)).summary
    assert (b4.mean["hit_rate"], b4.mean["mean_latency_s"]) == (direct["hit_rate"], direct["mean_latency_s"])
    # a backbone's accuracy is that of a model trained on the training trace, scored on the test trace
    from pbkv_train.backbones import train_backbone

    backbone = {p.x: p for p in points if p.study == "backbone"}
    assert set(backbone) == {"graphsage", "markov3"}
    train, test = read_trace(run_dir / "train.jsonl"), read_trace(run_dir / "test.jsonl")
    for name, point in backbone.items():
        accs = []
        for seed in range(2):
            acc = train_backbone(name, train, app=result.trace["app"], seed=seed, k=3, epochs=2).accuracy(test)
            accs.append(sum(a for a in acc if not math.isnan(a)) / sum(1 for a in acc if not math.isnan(a)))
        assert point.mean["accuracy"] == pytest.approx(sum(accs) / 2, abs=1e-12), name
    assert {p.x for p in points if p.study == "horizon"} == {1, 2}
    noise = [p for p in points if p.study == "noise"]
    assert {p.policy for p in noise} == set(predictive) and all(p.n == 1 for p in noise)
    rho = {(p.policy, p.x) for p in points if p.study == "rho"}
    assert DEFAULT_POLICY in {q for q, _ in rho} and all(policy_info(q).prefetches for q, _ in rho)
    json.dumps(result.to_json(), allow_nan=True)  # JSON-ready


@pytest.mark.slow
def test_study_without_a_training_trace_skips_the_trained_studies_and_says_so(run_dir):
    from pbkv_contract.trace import read_trace

    settings = StudySettings(**{**SMALL, "studies": ("backbone", "gamma")})
    result = run_study(read_trace(run_dir / "test.jsonl"), str(run_dir / "predictor.pt"), settings)
    assert {p.study for p in result.points} == {"gamma"} and all(p.n == 1 for p in result.points)
    assert any("no training trace" in n for n in result.notes)


@pytest.mark.slow
def test_study_command_writes_a_report_json_and_one_figure_per_study(run_dir, tmp_path):
    out = tmp_path / "out"
    result = runner.invoke(app, ["study", str(run_dir), "--out-dir", str(out), "--profile", "h100-qwen2.5-32b",
                                 "--device-tokens", "60000", "--concurrency", "4", "--concurrencies", "2,4",
                                 "--seeds", "1", "--epochs", "2", "--studies", "concurrency,gamma,noise"])
    assert result.exit_code == 0, result.output
    report = (out / "report.md").read_text()
    for study, figure in (("concurrency", "fig5a_concurrency"), ("gamma", "fig10_gamma"), ("noise", "fig12_noise")):
        png = out / f"codegen_run_{figure}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"({png.name})" in report, study
    # every study table is introduced by the host tier and the speedup convention, and has the measures
    tables = report.count("| policy | n | device hit |")
    assert tables == 3 and report.count("Host tier 1x device (60,000 tok); speedup vs lru = its mean latency / "
                                        "the policy's (x, >1 faster).") == tables
    assert report.count("| prefill saved | hit x lru | speedup vs lru | latency capture |") == tables
    assert "'-' when opt is not at least 0.5% faster than lru" in report
    data = json.loads((out / "study.json").read_text())
    assert set(data["codegen_run"]["references"]) == {"2", "4"}
    # the report names each policy's admission limit, recomputed here from the JSON's sweep points
    sweep = [Point(**{k: v for k, v in p.items() if k in Point.__dataclass_fields__})
             for p in data["codegen_run"]["points"] if p["study"] == "concurrency"]
    limits = admission_limits(sweep)
    reached = {q: c for q, c in limits.items() if c is not None}
    # the sweep covers every online replay policy (the study's default), each at C = 2 and 4
    online = {q for q in available_policies(REPLAY) if not policy_info(q).offline}
    assert set(limits) == online and sorted((p.policy, p.x) for p in sweep) == sorted((q, c) for q in online for c in (2, 4))
    if reached:
        assert all(f"{q} C={c}" in report for q, c in reached.items()), reached
    else:
        assert "No policy reaches the admission limit up to C=4" in report
    assert {p["study"] for p in data["codegen_run"]["points"]} == {"concurrency", "gamma", "noise"}


@pytest.mark.slow
@pytest.mark.parametrize("args, message", [
    (["--concurrencies", "2,x"], "--concurrencies must be comma-separated whole numbers"),
    (["--studies", "concurrency,dance"], "unknown study 'dance'"),
    (["--gammas-are-not-an-option"], None),
    (["--seeds", "0"], "seeds and epochs must be >= 1"),
    (["--seeds", "11"], "seeds must be at most 10"),
    (["--policies", "opt"], "cannot be swept"),
])
def test_bad_study_options_stop_before_any_replay(run_dir, tmp_path, args, message):
    result = runner.invoke(app, ["study", str(run_dir), "--out-dir", str(tmp_path / "o"), *args])
    assert result.exit_code == 2
    if message is not None:
        assert message in result.output and "Traceback" not in result.output
    assert not (tmp_path / "o").exists()


def test_study_of_a_folder_without_a_trace_is_one_error_line(tmp_path):
    result = runner.invoke(app, ["study", str(tmp_path), "--out-dir", str(tmp_path / "o")])
    assert result.exit_code == 2 and "holds no test.jsonl and predictor.pt" in result.output
