"""The online context predictor: Witten-Bell blends by hand, the k-step chain against path enumeration."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from pbkv_contract.prediction import END_AGENT, PredictionQuery
from pbkv_server.predictors import ContextPredictor, MarkovPredictor, make_predictor
from pbkv_server.predictors.context import MAX_STEP_CONTEXT, _advance, _state


def q(wid: str, agents: list[str], app: str = "app") -> PredictionQuery:
    """The query of the last call of ``agents`` (the earlier ones are its history)."""
    return PredictionQuery(app=app, workflow_id=wid, step=len(agents) - 1, history=tuple(agents[:-1]), agent=agents[-1])


def learn(pred, wid: str, agents: list[str], app: str = "app", end: bool = True) -> None:
    for i in range(1, len(agents) + 1):
        pred.observe(q(wid, agents[:i], app))
    if end:
        pred.workflow_ended(app, wid)


def test_cold_start_is_uniform_over_agents_seen_and_end():
    (p,) = ContextPredictor(horizon=1).predict([q("w", ["o", "a"])])
    assert p.dists[0] == pytest.approx({END_AGENT: 1 / 3, "a": 1 / 3, "o": 1 / 3})


def test_the_orchestrators_next_agent_follows_from_what_the_workflow_did():
    # One learned workflow: o a o b, then END. Agents o, a, b + END: the uniform base is 1/4 each.
    pred = ContextPredictor(horizon=1)
    learn(pred, "w1", ["o", "a", "o", "b"])
    # A new workflow's first call, o. Contexts shortest first (Witten-Bell, by hand):
    #   last agent o: followers a (after o), b (after o a o): n=2, t=2
    #       a = b = (1 + 2/4) / 4 = 0.375; o = END = (2/4) / 4 = 0.125
    #   (o, {o}) and (o, {o}, 1): follower a, n=1, t=1 each:
    #       a = (1 + 0.375) / 2 = 0.6875 -> (1 + 0.6875) / 2 = 0.84375
    #       b = 0.375 / 4 = 0.09375; o = END = 0.125 / 4 = 0.03125
    (p,) = pred.predict([q("w2", ["o"])])
    assert p.dists[0] == pytest.approx({"a": 0.84375, "b": 0.09375, "o": 0.03125, END_AGENT: 0.03125})
    # The third call, o after o a: only the last agent's row is shared with a fresh history; the
    # history o a o was followed by b: (o a o, {o,a}, 3), (o a o, {o,a}) and o a o hold b once
    #   last agent o: a = b = 0.375, o = END = 0.125
    #   (a, o): b once -> b = (1 + 0.375) / 2 = 0.6875, a = 0.1875, o = END = 0.0625
    #   three more contexts with b once: b = 1 - (1 - 0.6875) / 8 = 0.9609375
    (p,) = pred.predict([q("w2", ["o", "a", "o"])])
    assert p.dists[0] == pytest.approx({"b": 0.9609375, "a": 0.0234375, "o": 0.0078125, END_AGENT: 0.0078125})
    # The first-order chain cannot tell the two calls of o apart: a and b, half each
    markov = MarkovPredictor(horizon=1)
    learn(markov, "w1", ["o", "a", "o", "b"])
    assert markov.predict([q("w2", ["o", "a", "o"])])[0].dists[0] == pytest.approx({"a": 0.5, "b": 0.5})


def test_an_unseen_history_falls_back_to_the_last_agents_row():
    pred = ContextPredictor(horizon=1)
    learn(pred, "w1", ["o", "a", "o", "b"])
    # o b o was never seen, nor (b, o): only the last agent o's row (a = b = 0.375) applies
    (p,) = pred.predict([q("w2", ["o", "b", "o"])])
    assert p.dists[0] == pytest.approx({"a": 0.375, "b": 0.375, "o": 0.125, END_AGENT: 0.125})


def _paths(pred: ContextPredictor, app: str, state, k: int) -> list[dict[str, float]]:
    """P(k-th next call is c, the workflow still running before it), by enumerating every path."""
    out = [dict() for _ in range(k)]

    def walk(state, depth: int, prob: float) -> None:
        for b, p in pred.next_dist(app, state).items():
            out[depth][b] = out[depth].get(b, 0.0) + prob * p
            if b != END_AGENT and depth + 1 < k:
                walk(_advance(state, b), depth + 1, prob * p)
    walk(state, 0, 1.0)
    return out


def test_k_step_distributions_are_the_path_probabilities_given_survival():
    pred = ContextPredictor(horizon=3)
    for i, wf in enumerate(["oaob", "oaoc", "obo", "oaobo", "oc"]):
        learn(pred, f"w{i}", list(wf))
    agents = ["o", "a"]
    (p,) = pred.predict([q("new", agents)])
    paths = _paths(pred, "app", _state(agents), 3)
    survival = p.survival()
    for k in range(3):
        joint = {b: survival[k] * v for b, v in p.dists[k].items()}
        assert joint == pytest.approx(paths[k], abs=1e-12), k
        assert sum(p.dists[k].values()) == pytest.approx(1.0)


def test_duplicate_observations_and_repeated_ends_count_once():
    once, twice = ContextPredictor(horizon=1), ContextPredictor(horizon=1)
    learn(once, "w", ["o", "a", "o"])
    learn(twice, "w", ["o", "a"], end=False)
    twice.observe(q("w", ["o", "a"]))  # the same step again
    learn(twice, "w", ["o", "a", "o"])
    twice.workflow_ended("app", "w")
    assert twice._counts == once._counts


def test_a_long_workflow_adds_no_context_after_the_step_cap():
    def contexts(calls: int) -> int:
        pred = ContextPredictor(horizon=1)
        learn(pred, "w", ["o", "a"] * (calls // 2))
        return len(pred._counts["app"])
    assert contexts(4 * MAX_STEP_CONTEXT) == contexts(40 * MAX_STEP_CONTEXT)


def test_apps_learn_apart():
    pred = ContextPredictor(horizon=1)
    learn(pred, "w1", ["o", "a"], app="x")
    learn(pred, "w2", ["o", "b"], app="y")
    dist = pred.predict([q("w3", ["o"], app="x")])[0].dists[0]
    assert "b" not in dist and dist["a"] > 0.5


def test_the_factory_builds_it_by_name():
    assert isinstance(make_predictor("context", 2), ContextPredictor)
    assert make_predictor("context", 2).horizon == 2
    with pytest.raises(ValueError, match="horizon"):
        ContextPredictor(horizon=0)


_SCRIPT = """
import json
from pbkv_contract.prediction import PredictionQuery
from pbkv_server.predictors import ContextPredictor
p = ContextPredictor(horizon=3)
for i, wf in enumerate(["oaobxc", "oaocxb", "obxo", "oaobo", "ocx", "oxabc"]):
    for j in range(1, len(wf) + 1):
        p.observe(PredictionQuery("app", f"w{i}", j - 1, tuple(wf[:j - 1]), wf[j - 1]))
    p.workflow_ended("app", f"w{i}")
out = p.predict([PredictionQuery("app", "n", 1, ("o",), "a")])[0].dists
print(json.dumps([sorted(d.items()) for d in out]))
"""


def test_predictions_are_the_same_under_any_hash_seed():
    # dict and set orders of strings change with PYTHONHASHSEED; the sums must not
    runs = []
    for seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True, check=True)
        runs.append(json.loads(out.stdout))
    assert runs[0] == runs[1] == runs[2]
