"""--predictor APP=SPEC routing: each app's queries reach its own predictor, in order."""

from __future__ import annotations

import pytest

from pbkv_server.predictors.per_app import AppRoutedPredictor, build_predictor, parse_predictor_flags
from pbkv_server.predictors import ContextPredictor, MarkovPredictor
from pbkv_contract.prediction import Prediction, PredictionQuery, Predictor


class _Fixed(Predictor):
    """Always predicts ``agent`` next; records what it was asked and told."""

    def __init__(self, agent: str):
        self.agent, self.asked, self.ended = agent, [], []
        self.horizon = 2

    def predict(self, queries):
        self.asked.extend(q.workflow_id for q in queries)
        return [Prediction([{self.agent: 1.0}, {"<END>": 1.0}]) for _ in queries]

    def workflow_ended(self, app, workflow_id, status="completed"):
        self.ended.append(workflow_id)


def _q(app, wid):
    return PredictionQuery(app, wid, 0, (), "a")


def test_queries_are_routed_by_app_and_answers_keep_query_order():
    hover, rest = _Fixed("retriever"), _Fixed("coder")
    router = AppRoutedPredictor({"hover": hover, "*": rest}, horizon=2)
    out = router.predict([_q("swe", "w1"), _q("hover", "w2"), _q(None, "w3"), _q("hover", "w4")])
    assert [p.dists[0] for p in out] == [{"coder": 1.0}, {"retriever": 1.0}, {"coder": 1.0}, {"retriever": 1.0}]
    assert hover.asked == ["w2", "w4"] and rest.asked == ["w1", "w3"]
    router.workflow_ended("hover", "w2")
    assert hover.ended == ["w2"] and rest.ended == []


def test_app_without_predictor_and_no_fallback_gets_empty_distributions():
    router = AppRoutedPredictor({"hover": _Fixed("x")}, horizon=2)
    (pred,) = router.predict([_q("swe", "w1")])
    assert pred.dists == [{}, {}]


def test_flags_parse_and_build():
    assert parse_predictor_flags(["hover=model.pt", "markov"]) == {"hover": "model.pt", "*": "markov"}
    with pytest.raises(ValueError):
        parse_predictor_flags(["=markov"])
    assert isinstance(build_predictor({"*": "markov"}, 3), MarkovPredictor)  # one spec: no router
    router = build_predictor({"a": "markov", "b": "markov", "*": "uniform"}, 3)
    assert router.by_app["a"] is router.by_app["b"]  # one online model shared by apps naming it
    router = build_predictor({"a": "context", "b": "context", "*": "markov"}, 3)
    assert isinstance(router.by_app["a"], ContextPredictor) and router.by_app["a"] is router.by_app["b"]
    assert build_predictor({}, 3) is None
    with pytest.raises(ValueError):
        build_predictor({"*": "/no/such/model.pt"}, 3)
    # a live server lists only what it can serve, and names oracle and noise replay-only
    with pytest.raises(ValueError, match=r"^--predictor contxt: unknown predictor 'contxt' \(expected context \| "
                                         r"markov \| uniform \| PATH"):
        build_predictor({"*": "contxt"}, 3)
    for spec in ("oracle", "noise:0.5"):
        with pytest.raises(ValueError, match="reads a trace's future: replays only"):
            build_predictor({"a": spec}, 3)


def _model_for(tmp_path, app: str):
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "sim_fixtures_for_routing", Path(__file__).resolve().parents[1] / "sim" / "sim_fixtures.py")
    fixtures = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fixtures)
    path = tmp_path / f"{app}.pt"
    fixtures.write_model(path, app, ["planner", "coder"])
    return str(path)


def test_model_trained_for_another_app_is_refused_at_startup(tmp_path):
    path = _model_for(tmp_path, "research")
    with pytest.raises(ValueError, match=rf"--predictor codegen={path}: .*trained for app 'research', not 'codegen'"):
        build_predictor({"codegen": path}, 3)
    # Bound to its own app, or to every app ("*"), the same file loads.
    assert build_predictor({"research": path}, 3) is not None
    assert build_predictor({"*": path}, 3) is not None


def test_wrong_app_model_and_missing_file_are_one_line_cli_errors(tmp_path):
    from typer.testing import CliRunner

    from pbkv_server.cli.server import app

    path = _model_for(tmp_path, "research")
    result = CliRunner().invoke(app, ["--port", "0", "--predictor", f"codegen={path}"])
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert "trained for app 'research', not 'codegen'" in result.output
    missing = str(tmp_path / "runs" / "hover" / "predictor.pt")
    result = CliRunner().invoke(app, ["--port", "0", "--predictor", f"hover={missing}"])
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert "file not found" in result.output and missing in result.output
