"""The SDK's LangGraph, AutoGen and CrewAI test apps (tests/sdk/apps.py) run unchanged against
pbkv-server: every request is served, hints arrive in step order, each workflow ends once."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
import time
from pathlib import Path

import httpx
import pytest

from pbkv_sdk import ending
from pbkv_contract.trace import InvocationRecord, group_workflows, read_trace

from .server_http_fixtures import metric

_APPS_PATH = Path(__file__).resolve().parents[2] / "sdk" / "apps.py"


def _apps():
    # Loaded by path: tests/sdk is another suite's package; its apps module imports only pbkv_sdk.
    # Registered in sys.modules so that LangGraph can resolve the state's type hints.
    name = "pbkv_sdk_test_apps"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, _APPS_PATH)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _served(trace_path: Path, app: str) -> dict[str, list[InvocationRecord]]:
    by_wf = group_workflows(r for r in read_trace(trace_path) if isinstance(r, InvocationRecord))
    for wid, invs in by_wf.items():
        assert {r.app for r in invs} == {app}
        assert [r.step for r in invs] == list(range(len(invs))), f"{wid}: steps not 0..n-1"
    return by_wf


def _ends(server, n: int) -> float:
    """Client end signals the server counted, once ``n`` arrived or 5 s passed (they are async)."""
    ending.flush(5.0)
    deadline = time.monotonic() + 30  # generous under load; a pass ends it early
    while True:
        try:
            value = metric(httpx.get(server.url + "/metrics", timeout=30).text, "pbkv_workflow_ends_total",
                           {"status": "completed", "source": "client"})
        except KeyError:  # no end counted yet
            value = 0.0
        if value >= n or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


@pytest.mark.parametrize("streaming", [False, True], ids=["json", "sse"])
def test_langgraph_app_runs_against_pbkv_server(start_server, tmp_path, streaming):
    from pbkv_sdk.integrations.langchain import instrument, uninstrument

    apps = _apps()
    trace = tmp_path / "served.jsonl"
    server = start_server(trace_out=str(trace))
    instrument(app="claims", server_url=server.url)
    try:
        graph = apps.build_langgraph_app(server.base_url, streaming=streaming)
        state = graph.invoke({"claim": "The Eiffel Tower is in Rome.", "max_rounds": 2})
    finally:
        uninstrument()
    assert state["verdict"] and 1 <= state["round"] <= 2
    assert _ends(server, 1) == 1
    (invs,) = _served(trace, "claims").values()
    agents = [r.agent for r in invs]
    per_round = len(agents) // state["round"]
    assert per_round == 6 and len(agents) == 6 * state["round"]
    assert agents[0] == "planner" and set(agents[1:3]) == {"retriever_a", "retriever_b"}
    assert agents[3:6] == ["summarizer", "check", "judge"]


@pytest.mark.parametrize("body_hints", [False, True], ids=["headers", "body"])
def test_autogen_team_runs_against_pbkv_server(start_server, tmp_path, body_hints):
    from pbkv_sdk.recorder import flush_all
    from pbkv_sdk.stats import summarize

    apps = _apps()
    trace = tmp_path / "served.jsonl"
    client_trace = tmp_path / "client.jsonl"
    server = start_server(trace_out=str(trace))
    team = apps.build_autogen_team(server.base_url, app="swe", server_url=server.url, max_turns=4,
                                   trace_path=str(client_trace), body_hints=body_hints)
    result = asyncio.run(team.run(task="Please fix bug 17 in the parser."))
    assert len(result.messages) == 5  # the task + 4 agent turns
    assert _ends(server, 1) == 1 and flush_all(10.0)
    (invs,) = _served(trace, "swe").values()
    agents = [r.agent for r in invs]
    # Each turn: one speaker-selection call, then the chosen participant's call.
    assert agents[0::2] == ["speaker_selector"] * 4
    assert set(agents[1::2]) <= set(apps.AUTOGEN_AGENTS)
    assert [m.source for m in result.messages[1:]] == agents[1::2]
    # The selector calls are flagged internal in the server's trace as in the client's own.
    (client_invs,) = _served(client_trace, "swe").values()
    assert [(r.agent, r.internal) for r in client_invs] == [(r.agent, r.internal) for r in invs]
    assert [r.internal for r in invs] == [True, None] * 4
    # Transitions go participant to participant: the hidden selector calls are not agent steps.
    turns = agents[1::2]
    summary = summarize(read_trace(trace))
    assert summary.internal == 4
    assert all("speaker_selector" not in pair for pair in summary.transitions)
    assert sorted(p for p in summary.transitions.elements() if p[1] != "<END>") == sorted(zip(turns, turns[1:]))


def test_crewai_crew_runs_against_pbkv_server(start_server, tmp_path):
    from pbkv_sdk.integrations.crewai import uninstrument

    apps = _apps()
    trace = tmp_path / "served.jsonl"
    server = start_server(trace_out=str(trace))
    try:
        crew = apps.build_crewai_crew(server.base_url, app="finance", server_url=server.url)
        output = crew.kickoff(inputs={"question": "What was 3M's FY2018 capital expenditure?"})
    finally:
        uninstrument()
    assert str(output).strip()
    assert _ends(server, 1) == 1
    (invs,) = _served(trace, "finance").values()
    assert [r.agent for r in invs] == list(apps.CREWAI_ROLES)
    # The writer's task prompt carries the analyst's answer (CrewAI passes task context along).
    assert invs[1].prompt_tokens > invs[0].completion_tokens > 0
