"""The HoVer app's two message conventions (``--messages``): per-agent prompts and the shared prefix.

The app runs in LangGraph with a chat model that answers from the scenario and records every
call's messages (no server), one claim at a time so the calls are in workflow order.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest


def _recording_model():
    """The scenario chat model of the scenario tests, recording each call's (agent, messages)."""
    from .test_scenarios import _scenario_chat_model

    class Recording(_scenario_chat_model("hover")):
        calls: list = []

        def _generate(self, messages, stop=None, run_manager=None, **kwargs):
            agent = (run_manager.metadata or {}).get("langgraph_node") if run_manager else None
            roles = {"system": "system", "human": "user", "ai": "assistant"}
            self.calls.append((agent, [{"role": roles[m.type], "content": m.content} for m in messages]))
            return super()._generate(messages, stop, run_manager, **kwargs)

    return Recording(calls=[])


def _run(messages: str):
    from examples.hover_langchain import scenario as _  # noqa: F401  (registers "hover")
    from examples.hover_langchain.app import build_graph
    from examples.hover_langchain.data import load_hover
    from examples.hover_langchain.retrieval import build_index

    claims = load_hover()
    model = _recording_model()
    graph = build_graph(model, build_index(claims), claims[:2], messages=messages)
    claim = next(c for c in claims if c.num_hops == 3)
    state = asyncio.run(graph.ainvoke({"claim": claim}))
    return claim, state, model.calls


def test_shared_convention_extends_one_prefix_call_after_call(fixture_data: Path) -> None:
    from examples.hover_langchain import prompts as P

    claim, state, calls = _run(P.SHARED)
    agents = [a for a, _ in calls]
    assert agents[:4] == [P.DECOMPOSER, P.QUERY_WRITER, P.SUMMARIZER, P.VERIFIER] and state["verdict"]
    system = calls[0][1][0]
    assert system["role"] == "system" and "Tool:" in system["content"]
    assert all(f"- {a}:" in system["content"] for a in P.AGENTS)
    for (_, before), (agent, after) in zip(calls, calls[1:]):
        # every call starts with the previous call's whole prompt, then that call's reply
        assert after[:len(before)] == before and after[len(before)]["role"] == "assistant"
        assert after[-1]["content"].startswith(P.instruction(agent))
    assert f"Claim: {claim.claim}" in calls[-1][1][1]["content"]


def test_per_agent_convention_keeps_each_agents_own_system_prompt(fixture_data: Path) -> None:
    from examples.hover_langchain import prompts as P
    from examples.hover_langchain.data import load_hover

    claim, state, calls = _run(P.PER_AGENT)
    examples = load_hover()[:2]
    for agent, msgs in calls:
        assert msgs[0] == {"role": "system", "content": P.system_prompt(agent, examples)}
    decomposer = next(m for a, m in calls if a == P.DECOMPOSER)
    assert decomposer[1:] == [{"role": "user", "content": P.task_block(claim)}]


def test_unknown_convention_is_refused(fixture_data: Path) -> None:
    with pytest.raises(ValueError, match="unknown message convention"):
        _run("gossip")
