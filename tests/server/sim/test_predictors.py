"""Prediction providers: oracle, uniform, noise wrapper, online Markov, and the spec factory."""

from __future__ import annotations

import math

import pytest

from pbkv_contract.trace import InvocationRecord, WorkflowEndRecord
from pbkv_server.predictors import (
    MarkovPredictor,
    NoisePredictor,
    OraclePredictor,
    UniformPredictor,
    make_predictor,
    mix,
)
from pbkv_contract.prediction import END_AGENT, PredictionQuery
from .sim_fixtures import write_model


def inv(wid: str, step: int, agent: str, app: str = "app") -> InvocationRecord:
    return InvocationRecord(app=app, workflow_id=wid, step=step, agent=agent, t_start=float(step),
                            t_end=step + 0.5, prompt_tokens=10, completion_tokens=2, prefix_hashes=["a"])


def q(wid: str, step: int, agent: str, history=(), app: str = "app") -> PredictionQuery:
    return PredictionQuery(app=app, workflow_id=wid, step=step, history=tuple(history), agent=agent)


TRACE = [
    inv("w1", 0, "planner"), inv("w1", 1, "coder"), inv("w1", 2, "tester"),
    inv("w1", 3, "analyzer"), inv("w1", 4, "coder"), WorkflowEndRecord("app", "w1", 9.0),
    inv("w2", 0, "planner"), inv("w2", 1, "coder"),
]


def test_oracle_returns_the_true_next_agents_then_end():
    oracle = OraclePredictor(TRACE, horizon=3)
    (p,) = oracle.predict([q("w1", 1, "coder", ["planner"])])
    assert p.dists == [{"tester": 1.0}, {"analyzer": 1.0}, {"coder": 1.0}]
    (p,) = oracle.predict([q("w1", 3, "analyzer", ["planner", "coder", "tester"])])
    assert p.dists == [{"coder": 1.0}, {END_AGENT: 1.0}, {END_AGENT: 1.0}]
    assert p.survival() == [1.0, 1.0, 0.0]


def test_oracle_sorts_steps_even_if_trace_lines_are_out_of_order():
    oracle = OraclePredictor([inv("w", 2, "c"), inv("w", 0, "a"), inv("w", 1, "b")], horizon=2)
    assert oracle.predict([q("w", 0, "a")])[0].dists == [{"b": 1.0}, {"c": 1.0}]


def test_oracle_unknown_workflow_falls_back_to_uniform_over_trace_agents():
    oracle = OraclePredictor(TRACE, horizon=2)
    (p,) = oracle.predict([q("nope", 0, "planner")])
    assert oracle.unknown_queries == 1
    # app "app" has planner, coder, tester, analyzer + END = 5 outcomes
    assert p.dists[0] == pytest.approx({a: 0.2 for a in ["planner", "coder", "tester", "analyzer", END_AGENT]})


def test_uniform_is_over_agents_seen_so_far_plus_end():
    uni = UniformPredictor(horizon=2)
    (p,) = uni.predict([q("w", 0, "a")])
    assert p.dists == [{"a": 0.5, END_AGENT: 0.5}] * 2
    uni.observe(q("w", 1, "b", ["a"]))
    (p,) = uni.predict([q("x", 0, "c", app="other")])
    assert p.dists[0] == {"c": 0.5, END_AGENT: 0.5}  # apps keep separate vocabularies
    (p,) = uni.predict([q("w", 2, "a", ["a", "b"])])
    assert p.dists[0] == pytest.approx({"a": 1 / 3, "b": 1 / 3, END_AGENT: 1 / 3})


def test_noise_mix_is_convex_combination_computed_by_hand():
    p = {"a": 1.0}
    u = {"a": 0.25, "b": 0.25, "c": 0.25, END_AGENT: 0.25}
    m = mix(p, u, 0.4)
    assert m == pytest.approx({"a": 0.6 + 0.1, "b": 0.1, "c": 0.1, END_AGENT: 0.1})
    assert math.isclose(sum(m.values()), 1.0)


def test_noise_wrapper_lambda_endpoints_and_middle():
    oracle = OraclePredictor(TRACE, horizon=2)
    known = {"app": ["planner", "coder", "tester", "analyzer"]}
    query = q("w1", 1, "coder", ["planner"])
    zero = NoisePredictor(oracle, 0.0, UniformPredictor(2, known)).predict([query])[0]
    assert zero.dists[0]["tester"] == 1.0 and zero.dists[0]["coder"] == 0.0
    one = NoisePredictor(oracle, 1.0, UniformPredictor(2, known)).predict([query])[0]
    assert one.dists[0] == pytest.approx({a: 0.2 for a in known["app"] + [END_AGENT]})
    half = NoisePredictor(oracle, 0.5, UniformPredictor(2, known)).predict([query])[0]
    # k=2: oracle says analyzer -> 0.5 * 1 + 0.5 * 0.2 = 0.6; others 0.5 * 0.2 = 0.1
    assert half.dists[1] == pytest.approx({"analyzer": 0.6, "planner": 0.1, "coder": 0.1, "tester": 0.1, END_AGENT: 0.1})


def test_noise_rejects_lambda_outside_unit_interval():
    with pytest.raises(ValueError, match="lambda"):
        NoisePredictor(UniformPredictor(), 1.5)


def feed(markov: MarkovPredictor, wid: str, agents: list[str], end: bool = True) -> None:
    for i, a in enumerate(agents):
        markov.observe(q(wid, i, a, agents[:i]))
    if end:
        markov.workflow_ended("app", wid)


def test_markov_cold_start_is_uniform():
    m = MarkovPredictor(horizon=2)
    (p,) = m.predict([q("w", 0, "a")])
    assert p.dists[0] == {"a": 0.5, END_AGENT: 0.5}


def test_markov_counts_match_hand_computation():
    m = MarkovPredictor(horizon=3)
    feed(m, "w1", ["p", "c", "t"])              # p->c, c->t, t->END
    feed(m, "w2", ["p", "c", "t", "a", "c", "t"])  # p->c, c->t, t->a, a->c, c->t, t->END
    # Counts: p->c 2; c->t 3; t->END 2, t->a 1; a->c 1.
    assert m.transition_row("app", "t") == pytest.approx({END_AGENT: 2 / 3, "a": 1 / 3})
    (p,) = m.predict([q("w3", 2, "t", ["p", "c"])])
    assert p.dists[0] == pytest.approx({END_AGENT: 2 / 3, "a": 1 / 3})
    # k=2, given the workflow is still running (it is at a): a -> c; k=3: c -> t
    assert p.dists[1] == pytest.approx({"c": 1.0})
    assert p.dists[2] == pytest.approx({"t": 1.0})
    # s^(2) P^(2)(c) = (1 - 2/3) * 1 = 1/3, the chance that the 2nd next invocation is c
    assert p.survival() == pytest.approx([1.0, 1 / 3, 1 / 3])


def test_markov_survival_times_prediction_is_the_chains_path_probability():
    """PBKV Eq. 2 weighs P^(k) by s^(k) = prod_{j<k} (1 - P^(j)(END)), so the Markov provider must
    give P^(k) conditional on the workflow still running: then s^(k) P^(k)(c) equals the chance
    that the k-th next invocation is c, computed here independently by enumerating every path of
    the learned chain (END ends a path)."""
    m = MarkovPredictor(horizon=4)
    feed(m, "w1", ["p", "c", "t"])
    feed(m, "w2", ["p", "c", "t", "a", "c", "t"])
    feed(m, "w3", ["p", "a", "p", "c"])
    feed(m, "w4", ["p", "c", "a"])
    (pred,) = m.predict([q("w5", 0, "p")])
    paths = {("p",): 1.0}
    for k in range(4):
        by_agent: dict[str, float] = {}
        grown = {}
        for path, prob in paths.items():
            for nxt, t in m.transition_row("app", path[-1]).items():
                if nxt != END_AGENT:
                    grown[path + (nxt,)] = prob * t
                    by_agent[nxt] = by_agent.get(nxt, 0.0) + prob * t
        paths = grown
        s = pred.survival()[k]
        for agent in ("p", "c", "t", "a"):
            assert s * pred.dists[k].get(agent, 0.0) == pytest.approx(by_agent.get(agent, 0.0), abs=1e-12)
        assert sum(pred.dists[k].values()) == pytest.approx(1.0)


def test_markov_after_certain_end_predicts_end():
    m = MarkovPredictor(horizon=3)
    feed(m, "w1", ["p", "c"])  # p -> c -> END always
    (pred,) = m.predict([q("w2", 1, "c", ["p"])])
    assert pred.dists == [{END_AGENT: 1.0}] * 3


def test_markov_ignores_duplicate_observations_and_repeated_ends():
    m = MarkovPredictor(horizon=1)
    feed(m, "w", ["p", "c"], end=False)
    m.observe(q("w", 1, "c", ["p"]))  # duplicate of step 1
    m.workflow_ended("app", "w")
    m.workflow_ended("app", "w")  # idempotent
    assert m.transition_row("app", "p") == {"c": 1.0}
    assert m.transition_row("app", "c") == {END_AGENT: 1.0}


def test_markov_smoothing_adds_alpha_to_every_outcome():
    m = MarkovPredictor(horizon=1, alpha=1.0)
    feed(m, "w", ["p", "c"])
    # vocabulary {p, c, END}; row p: counts c=1 -> (1+1)/(1+3) for c, 1/4 for p and END
    assert m.transition_row("app", "p") == pytest.approx({"c": 0.5, "p": 0.25, END_AGENT: 0.25})


def test_factory_builds_each_spec():
    assert isinstance(make_predictor("uniform", 3), UniformPredictor)
    assert isinstance(make_predictor("markov", 3), MarkovPredictor)
    assert isinstance(make_predictor("oracle", 3, TRACE), OraclePredictor)
    noisy = make_predictor("noise:0.25", 2, TRACE)
    assert isinstance(noisy, NoisePredictor) and noisy.lam == 0.25 and noisy.horizon == 2


@pytest.mark.parametrize("spec,match", [("oracle", "trace"), ("noise:abc", "lambda"), ("noise:2", "lambda"),
                                        ("  ", "empty predictor spec")])
def test_factory_rejects_bad_specs_clearly(spec, match):
    with pytest.raises(ValueError, match=match):
        make_predictor(spec, 3, None if spec == "oracle" else TRACE)


@pytest.mark.parametrize("spec", ["/no/such/model.pt", "models/m.pt", "m.pt", "~/no-such-pbkv-model"])
def test_factory_missing_model_path_says_file_not_found_not_unknown_predictor(spec):
    with pytest.raises(ValueError) as info:
        make_predictor(spec, 3, TRACE)
    assert str(info.value) == f"predictor model file not found: {spec}"


def test_factory_directory_as_model_path_says_so(tmp_path):
    with pytest.raises(ValueError) as info:
        make_predictor(str(tmp_path), 3, TRACE)
    assert str(info.value) == f"predictor model path is a directory, not a model file: {tmp_path}"


def test_factory_spec_that_is_neither_a_name_nor_a_file_names_both_readings():
    with pytest.raises(ValueError) as info:
        make_predictor("markof", 3, TRACE)
    text = str(info.value)
    assert "unknown predictor 'markof'" in text and "markov" in text  # the known names are listed
    assert "predictor model file not found: markof" in text


def test_factory_loads_a_model_file_for_its_app_and_rejects_one_for_another_app(tmp_path):
    from pbkv_train.store import ModelFileError

    path = tmp_path / "m.pt"
    write_model(path, "codegen", ["planner", "coder"])
    model = make_predictor(str(path), 3, app="codegen")
    assert model.app == "codegen" and model.horizon == 3
    assert make_predictor(str(path), 3).app == "codegen"  # no app given: any app's model loads
    with pytest.raises(ModelFileError, match="trained for app 'codegen', not 'hover'"):
        make_predictor(str(path), 3, app="hover")


def test_factory_expands_home_in_model_paths(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    write_model(tmp_path / "m.pt", "codegen", ["planner"])
    assert make_predictor("~/m.pt", 3, app="codegen").app == "codegen"


def test_factory_builtin_specs_ignore_the_app():
    assert isinstance(make_predictor("markov", 3, app="anything"), MarkovPredictor)
    assert isinstance(make_predictor("oracle", 3, TRACE, app="anything"), OraclePredictor)


@pytest.mark.parametrize("policy", ["he", "pbkv", "pbkv-aggressive"])
def test_batched_predictions_give_the_same_replay_as_one_call_per_invocation(policy):
    """A predictor that does not learn online (the oracle here, a trained model in practice) is
    asked once per scheduling step for all new invocations; every figure of the replay equals the
    one-call-per-invocation replay, and the predictor is called fewer times."""
    from pbkv_server.hardware.profiles import get_profile
    from pbkv_server.sim.simulator import ReplayConfig, ReplayOptions, load_workload, simulate
    from pbkv_server.sim.synth.agents import generate

    records = list(generate("codegen", 40, seed=9))
    workload = load_workload(records)
    runs = {}
    for batch in (False, True):
        result = simulate(workload, ReplayConfig(policy, get_profile("h100-qwen2.5-32b"), device_tokens=120_000,
                                                 batch_predictions=batch),
                          ReplayOptions(concurrency=16, predictor=make_predictor("oracle", 3, records)))
        s = result.summary
        runs[batch] = ((s["hit_rate"], s["host_hit_rate"], s["evictions"], s["evicted_tokens"],
                        s["prefetched_tokens"], s["mean_latency_s"], s["timeline"]), result.engine.stats.predictor_call_s)
    assert runs[True][0] == runs[False][0]
    assert len(runs[True][1]) < len(runs[False][1]) == workload.invocations
