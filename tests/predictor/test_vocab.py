"""The agent vocabulary records a query's agents in first-seen order, END never among them."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pbkv_contract.prediction import END_AGENT, PredictionQuery
from pbkv_server.predictors.vocab import AgentVocabulary

_AGENTS = st.sampled_from(["planner", "coder", "main", "tester", END_AGENT])


def test_add_query_records_history_then_agent_in_first_seen_order():
    vocab = AgentVocabulary({"app": ["main"]})
    vocab.add_query(PredictionQuery("app", "w", 3, ("coder", END_AGENT, "main", "tester", "coder"), "planner"))
    assert vocab.agents("app") == ["main", "coder", "tester", "planner"]
    assert vocab.agents("other") == []


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([None, "a", "b"]), st.lists(_AGENTS, max_size=8), _AGENTS), max_size=12))
def test_add_query_equals_adding_each_agent_in_turn(queries):
    """Against the definition: ``add`` of each history agent, then of the current agent."""
    fast, slow = AgentVocabulary(), AgentVocabulary()
    for app, history, agent in queries:
        fast.add_query(PredictionQuery(app, "w", len(history), tuple(history), agent))
        for name in (*history, agent):
            slow.add(app, name)
        for key in (None, "a", "b"):
            assert fast.agents(key) == slow.agents(key)
            assert END_AGENT not in fast.agents(key)
