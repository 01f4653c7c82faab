"""AutoGen SelectorGroupChat instrumented with instrument_team, against the fake server."""

from __future__ import annotations

import asyncio
import logging
import re

import pytest

from pbkv_sdk import ending
from pbkv_sdk.recorder import flush_all
from pbkv_contract.trace import InvocationRecord, WorkflowEndRecord, iter_trace

from .apps import build_autogen_team
from .fake_openai import FakeOpenAI

_TASK_RE = re.compile(r"fix bug (\d+)")
# The fake selector answers the first listed candidate; the previous speaker is not a candidate,
# so speakers alternate planner, coder, planner, ... and each turn starts with a selection call.
TWO_TURNS = ["speaker_selector", "planner", "speaker_selector", "coder"]


def wire(fake: FakeOpenAI) -> dict[str, tuple[str, list[str]]]:
    """workflow id -> (the task its requests are about, agents by step)."""
    seen: dict[str, tuple[set, list]] = {}
    for req in fake.requests:
        wf, agent, step, app = fake.hints_of(req)
        assert app == "swe"
        text = " ".join(str(m.get("content")) for m in req.body["messages"])
        tasks, steps = seen.setdefault(wf, (set(), []))
        tasks.update(_TASK_RE.findall(text))
        steps.append((step, agent))
    out = {}
    for wf, (tasks, steps) in seen.items():
        assert len(tasks) == 1, f"{wf} mixed tasks {tasks}"
        steps.sort()
        assert [s for s, _ in steps] == list(range(len(steps)))
        out[wf] = (tasks.pop(), [a for _, a in steps])
    return out


@pytest.mark.parametrize("streaming", [False, True], ids=["json", "sse"])
def test_run_names_participants_and_selector_and_ends_once(fake_llm, tmp_path, streaming):
    trace = tmp_path / "t.jsonl"
    team = build_autogen_team(fake_llm.base_url, server_url=fake_llm.url, trace_path=str(trace), streaming=streaming)
    result = asyncio.run(team.run(task="fix bug 7"))
    assert [m.source for m in result.messages] == ["user", "planner", "coder", "planner", "coder"]
    assert ending.flush(5.0) and flush_all(10.0)
    [(wf, (task, agents))] = wire(fake_llm).items()
    assert task == "7" and agents == TWO_TURNS * 2
    assert [(w, s) for w, s, _ in fake_llm.ends] == [(wf, "completed")]
    records = list(iter_trace(trace, strict=True))
    assert [r.agent for r in records if isinstance(r, InvocationRecord)] == TWO_TURNS * 2
    assert isinstance(records[-1], WorkflowEndRecord) and records[-1].workflow_id == wf


def test_run_stream_yields_like_the_team_and_ends_with_the_task_result(fake_llm):
    team = build_autogen_team(fake_llm.base_url, server_url=fake_llm.url, max_turns=2)

    async def main():
        return [item async for item in team.run_stream(task="fix bug 3")]

    items = asyncio.run(main())
    from autogen_agentchat.base import TaskResult  # AutoGen: imported by the test that needs it

    assert isinstance(items[-1], TaskResult) and len(items[-1].messages) == 3
    assert ending.flush(5.0)
    assert [s for _, s, _ in fake_llm.ends] == ["completed"]
    assert list(wire(fake_llm).values()) == [("3", TWO_TURNS)]


def test_team_reruns_are_separate_workflows(fake_llm):
    team = build_autogen_team(fake_llm.base_url, server_url=fake_llm.url, max_turns=2)

    async def main():
        await team.run(task="fix bug 1")
        await team.reset()  # the team's own API, reached through the wrapper; clears the history
        await team.run(task="fix bug 2")

    asyncio.run(main())
    assert ending.flush(5.0)
    runs = wire(fake_llm)
    assert sorted(t for t, _ in runs.values()) == ["1", "2"]
    assert all(agents == TWO_TURNS for _, agents in runs.values())
    assert sorted(w for w, _, _ in fake_llm.ends) == sorted(runs)


def test_eight_concurrent_teams_never_mix_hints(fake_llm):
    fake_llm.chunk_delay_s = 0.002
    teams = [build_autogen_team(fake_llm.base_url, server_url=fake_llm.url, streaming=i % 2 == 0) for i in range(8)]

    async def main():
        await asyncio.gather(*(team.run(task=f"fix bug {i}") for i, team in enumerate(teams)))

    asyncio.run(main())
    assert ending.flush(5.0)
    runs = wire(fake_llm)
    assert sorted(t for t, _ in runs.values()) == [str(i) for i in range(8)]
    assert all(agents == TWO_TURNS * 2 for _, agents in runs.values())
    assert sorted((w, s) for w, s, _ in fake_llm.ends) == sorted((w, "completed") for w in runs)


def test_a_failing_model_ends_the_workflow_failed(fake_llm, free_port):
    team = build_autogen_team(f"http://127.0.0.1:{free_port}/v1", server_url=fake_llm.url)
    with pytest.raises(Exception):
        asyncio.run(team.run(task="fix bug 9"))
    assert ending.flush(5.0)
    assert [(w, s) for w, s, _ in fake_llm.ends] == [(team.last_workflow.workflow_id, "failed")]


def test_closing_the_stream_early_ends_the_workflow_cancelled(fake_llm):
    team = build_autogen_team(fake_llm.base_url, server_url=fake_llm.url)

    async def main():
        stream = team.run_stream(task="fix bug 4")
        await stream.__anext__()  # the task message
        await stream.aclose()

    asyncio.run(main())
    assert ending.flush(5.0)
    assert [s for _, s, _ in fake_llm.ends] == ["cancelled"]


def test_team_completes_with_one_warning_when_pbkv_server_is_down(fake_llm, free_port, caplog):
    async def main():
        for i in range(2):
            team = build_autogen_team(fake_llm.base_url, server_url=f"http://127.0.0.1:{free_port}", max_turns=2)
            assert len((await team.run(task=f"fix bug {i}")).messages) == 3

    with caplog.at_level(logging.WARNING, logger="pbkv_sdk"):
        asyncio.run(main())
        assert ending.flush(10.0)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("pbkv_sdk")]
    assert len(warnings) == 1 and "end signal" in warnings[0].getMessage()


class _TeamWithRenamedInternals:
    """A real team seen through a proxy that hides ``_participants`` / ``_model_client``, as a
    future autogen-agentchat that renamed them would."""

    def __init__(self, team):
        self._team = team

    def __getattr__(self, name):
        if name in ("_participants", "_model_client"):
            raise AttributeError(name)
        return getattr(self._team, name)


def test_a_team_without_the_private_attributes_runs_with_one_warning_and_unnamed_agents(fake_llm, caplog):
    import pbkv_sdk
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.conditions import MaxMessageTermination
    from autogen_agentchat.teams import RoundRobinGroupChat
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    from pbkv_sdk.integrations.autogen import instrument_team

    info = {"vision": False, "function_calling": False, "json_output": False, "structured_output": False, "family": "unknown"}
    client = OpenAIChatCompletionClient(
        model="m", base_url=fake_llm.base_url, api_key="x", max_retries=0, model_info=info,
        http_client=pbkv_sdk.async_http_client(),  # an explicit PBKV client still works (stamps once)
    )
    agents = [AssistantAgent(n, model_client=client) for n in ("planner", "coder")]

    async def main():
        for i in range(2):  # two teams: still one warning
            team = RoundRobinGroupChat(agents, termination_condition=MaxMessageTermination(3))
            wrapped = instrument_team(_TeamWithRenamedInternals(team), app="swe", server_url=fake_llm.url)
            assert len((await wrapped.run(task=f"fix bug {i}")).messages) == 3
            await team.reset()

    with caplog.at_level(logging.WARNING, logger="pbkv_sdk"):
        asyncio.run(main())
        assert ending.flush(5.0)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("pbkv_sdk")]
    assert len(warnings) == 1 and "_participants" in warnings[0]
    runs = wire(fake_llm)  # workflow ids and steps still flow; agents are 'unknown'
    assert sorted(t for t, _ in runs.values()) == ["0", "1"]
    assert all(agents == ["unknown", "unknown"] for _, agents in runs.values())
    assert sorted((w, s) for w, s, _ in fake_llm.ends) == sorted((w, "completed") for w in runs)


def test_an_agent_whose_model_client_cannot_be_reached_gives_one_warning_not_an_error(caplog):
    from types import SimpleNamespace

    from autogen_agentchat.agents import AssistantAgent
    from autogen_ext.models.replay import ReplayChatCompletionClient

    from pbkv_sdk.integrations.autogen import NamedModelClient, instrument_team

    replay = ReplayChatCompletionClient(["ok"])  # no httpx client inside
    named = AssistantAgent("a", model_client=replay)
    hidden = AssistantAgent("b", model_client=replay)
    del hidden._model_client  # as if renamed
    team = SimpleNamespace(_participants=[named, hidden, AssistantAgent("c", model_client=replay)])
    with caplog.at_level(logging.WARNING, logger="pbkv_sdk"):
        instrument_team(team, app="swe")
    messages = sorted(r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)
    # a client without an httpx client inside is fine now (the transports stamp process-wide)
    assert len(messages) == 1 and "model client of agent 'b'" in messages[0]
    assert isinstance(named._model_client, NamedModelClient) and named._model_client.agent_name == "a"


def test_a_malformed_workflow_id_is_replaced_not_raised(caplog):
    """The SDK fails open: a user-chosen id outside the protocol (spaces, 200 chars) must not
    break the team's run; a fresh id is used and one warning says so, as in the other
    integrations."""
    import asyncio

    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.conditions import MaxMessageTermination
    from autogen_agentchat.teams import RoundRobinGroupChat
    from autogen_ext.models.replay import ReplayChatCompletionClient

    from pbkv_sdk.integrations.autogen import instrument_team

    client = ReplayChatCompletionClient(["done"])
    team = instrument_team(RoundRobinGroupChat([AssistantAgent("writer", model_client=client)],
                                               termination_condition=MaxMessageTermination(2)),
                           app="demo", server_url=None)
    result = asyncio.run(team.run(task="go", workflow_id="not a valid id " * 20))
    assert result.messages and team.last_workflow.workflow_id != "not a valid id " * 20
    assert any("workflow id" in r.message.lower() for r in caplog.records)
