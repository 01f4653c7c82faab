"""The online context predictor: Witten-Bell blends by hand, the k-step chain against path enumeration."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pbkv_contract.prediction import END_AGENT, PredictionQuery
from pbkv_server.predictors import ContextPredictor, MarkovPredictor, make_predictor
from pbkv_server.predictors.context import MAX_STATES, MAX_STEP_CONTEXT, _advance, _contexts, _state, _top
from pbkv_server.predictors.vocab import uniform_dist


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


# ---------------------------------------------------------------- kept blends against fresh ones
# next_dist keeps each state's blend until the vocabulary or a row it reads grows, predict reuses
# the state observe() built and the k-step chain's successor states. The reference below is the
# blend and chain without any of that (a sorted union of keys, every row summed, every state
# rebuilt), so a kept result that a count or a new agent should have dropped shows up as a
# difference: the floats must be the same bits, in the same key order.


def _reference_next_dist(pred: ContextPredictor, app, state) -> dict[str, float]:
    dist = uniform_dist(pred.vocab.agents(app))
    table = pred._counts.get(app or "", {})
    for ctx in reversed(_contexts(state)):
        row = table.get(ctx)
        if not row:
            continue
        n, t = sum(row.values()), len(row)
        dist = {b: (row.get(b, 0) + t * dist.get(b, 0.0)) / (n + t) for b in sorted(dist.keys() | row.keys())}
    return dist


def _reference_predict(pred: ContextPredictor, query: PredictionQuery) -> list[list[tuple[str, float]]]:
    alive = {_state(query.history + (query.agent,)): 1.0}
    dists = []
    for k in range(pred.horizon):
        if not alive:
            dists.append({END_AGENT: 1.0})
            continue
        nxt, states = {}, {}
        for state, p in alive.items():
            for b, x in _reference_next_dist(pred, query.app, state).items():
                if x <= 0.0:
                    continue
                nxt[b] = nxt.get(b, 0.0) + p * x
                if b != END_AGENT and k < pred.horizon - 1:
                    s = _advance(state, b)
                    states[s] = states.get(s, 0.0) + p * x
        dists.append(nxt)
        alive = _top(states, MAX_STATES)
    return [list(d.items()) for d in dists]


_OPS = st.lists(
    st.tuples(st.sampled_from(["call", "call", "call", "again", "end", "batch", "stranger"]),
              st.integers(0, 3),  # workflow
              st.sampled_from(["o", "o", "a", "b", "c"]),  # agent: few, so states recur
              st.sampled_from(["x", "y", None])),  # app
    min_size=20, max_size=80)


@settings(max_examples=200, deadline=None)
@given(ops=_OPS, horizon=st.integers(1, 3), memo_bound=st.sampled_from([2, 5, 1 << 14]))
def test_kept_blends_and_states_match_a_fresh_computation(ops, horizon, memo_bound):
    import pbkv_server.predictors.context as context_module

    saved = context_module.MAX_MEMO
    context_module.MAX_MEMO = memo_bound  # small bounds: blends and states dropped and rebuilt
    try:
        pred = ContextPredictor(horizon=horizon)
        history: dict[int, list[str]] = {}
        app_of: dict[int, str | None] = {}
        last: dict[int, PredictionQuery] = {}
        for op, w, agent, app in ops:
            hist = history.setdefault(w, [])
            app = app_of.setdefault(w, app)
            if op == "end":
                pred.workflow_ended(app, f"w{w}")
                history.pop(w)
                app_of.pop(w)
                continue
            if op == "again" and w in last:  # the same step again: observe ignores it
                query = last[w]
                pred.observe(query)
                queries = [query]
            elif op == "stranger":  # never observed: predict must add its agents itself
                queries = [PredictionQuery(app, f"s{w}", len(hist), tuple(hist), agent)]
            else:
                query = last[w] = PredictionQuery(app, f"w{w}", len(hist), tuple(hist), agent)
                pred.observe(query)
                hist.append(agent)
                queries = [query]
                if op == "batch":  # two queries at once, the first not the latest observed
                    queries = [PredictionQuery(app, f"b{w}", 0, (), agent)] + queries
            got = [[list(d.items()) for d in p.dists] for p in pred.predict(queries)]
            assert got == [_reference_predict(pred, q_) for q_ in queries]
            for key, memo in pred._memo.items():  # every kept blend, read again now
                for state in list(memo):
                    want = _reference_next_dist(pred, key, state)
                    assert list(pred.next_dist(key, state).items()) == list(want.items())
    finally:
        context_module.MAX_MEMO = saved
