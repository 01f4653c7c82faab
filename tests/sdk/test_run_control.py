"""Run-control paths of each framework, with the real framework against the fake server: every
path maps to one workflow id and at most one end with the right status (README "Adding PBKV to
your app", run-control table). A paused workflow gets no end until it finishes."""

from __future__ import annotations

import asyncio
from typing import TypedDict

import pytest

from pbkv_sdk import ending

from .cancel import cancel_after
from .fake_openai import FakeOpenAI, tool_call
from .settle import settle_ends


class _State(TypedDict, total=False):
    text: str
    approved: str


def _hitl_graph(base_url: str):
    """writer (LLM) -> approve (interrupt, human in the loop) -> finalize (LLM), with a checkpointer."""
    from langchain_openai import ChatOpenAI
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import interrupt

    llm = ChatOpenAI(model="m", base_url=base_url, api_key="x", max_retries=0)

    def writer(state: _State) -> dict:
        return {"text": llm.invoke(f"draft {state['text']}").content}

    def approve(state: _State) -> dict:
        return {"approved": interrupt("approve the draft?")}

    def finalize(state: _State) -> dict:
        return {"text": llm.invoke(f"final {state['approved']}").content}

    graph = StateGraph(_State)
    for name, fn in (("writer", writer), ("approve", approve), ("finalize", finalize)):
        graph.add_node(name, fn)
    graph.add_edge(START, "writer")
    graph.add_edge("writer", "approve")
    graph.add_edge("approve", "finalize")
    graph.add_edge("finalize", END)
    return graph.compile(checkpointer=InMemorySaver())


@pytest.fixture
def lc_handler(fake_llm: FakeOpenAI):
    from pbkv_sdk.integrations.langchain import instrument, uninstrument

    handler = instrument(app="hitl", server_url=fake_llm.url)
    yield handler
    uninstrument()


def _hints(fake: FakeOpenAI) -> list[tuple]:
    return [fake.hints_of(r)[:3] for r in fake.requests]


def test_langgraph_interrupt_pauses_and_resume_continues_the_same_workflow(fake_llm, lc_handler):
    from langgraph.types import Command

    graph = _hitl_graph(fake_llm.base_url)
    config = {"configurable": {"thread_id": "t1"}}
    paused = graph.invoke({"text": "x"}, config)
    assert "__interrupt__" in paused
    assert ending.flush(5.0) and fake_llm.ends == []  # paused is not finished
    assert list(lc_handler.paused_workflows) == ["t1"]
    graph.invoke(Command(resume="yes"), config)
    assert ending.flush(5.0)
    [(wf, _, _), (wf2, _, _)] = _hints(fake_llm)
    assert _hints(fake_llm) == [(wf, "writer", 0), (wf, "finalize", 1)] and wf2 == wf
    assert [(w, s) for w, s, _ in fake_llm.ends] == [(wf, "completed")]
    assert lc_handler.paused_workflows == {} and lc_handler.active_workflows == 0


def _stream_to_the_interrupt(graph, config, mode: str, leave: str, before_resume) -> None:
    """Run ``graph`` with ``stream``/``astream`` until it pauses, leaving the loop by ``break`` at
    the ``__interrupt__`` event or by reading it to its end; ``before_resume()``; then resume with
    ``invoke``/``ainvoke`` on the same thread."""
    from langgraph.types import Command

    seen: list[str] = []
    if mode == "sync":
        for chunk in graph.stream({"text": "x"}, config):
            seen.extend(chunk)
            if "__interrupt__" in chunk and leave == "break":
                break
        before_resume()
        graph.invoke(Command(resume="yes"), config)
    else:
        async def main():
            # the broken-out async generator stays open until the loop shuts down, after the resume
            async for chunk in graph.astream({"text": "x"}, config):
                seen.extend(chunk)
                if "__interrupt__" in chunk and leave == "break":
                    break
            before_resume()
            await graph.ainvoke(Command(resume="yes"), config)

        asyncio.run(main())
    assert seen == ["writer", "__interrupt__"]


@pytest.mark.parametrize("leave", ["break", "exhaust"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_langgraph_stream_left_at_the_interrupt_pauses_and_the_resume_ends_it_once(fake_llm, lc_handler, mode, leave):
    graph = _hitl_graph(fake_llm.base_url)
    config = {"configurable": {"thread_id": f"t-{mode}-{leave}"}}
    ends_at_pause: list = []

    def before_resume():
        assert ending.flush(5.0)
        ends_at_pause.extend(fake_llm.ends)
        assert list(lc_handler.paused_workflows) == [config["configurable"]["thread_id"]]
        assert lc_handler.active_workflows == 0

    _stream_to_the_interrupt(graph, config, mode, leave, before_resume)
    assert ending.flush(5.0)
    assert ends_at_pause == []  # paused at the interrupt: no end, however the loop was left
    wf = fake_llm.hints_of(fake_llm.requests[0])[0]
    assert _hints(fake_llm) == [(wf, "writer", 0), (wf, "finalize", 1)]  # one workflow, steps go on
    [(end_wf, status, t_end)] = fake_llm.ends
    assert (end_wf, status) == (wf, "completed") and t_end >= fake_llm.requests[-1].t  # after the final node
    assert lc_handler.paused_workflows == {} and lc_handler.active_workflows == 0


def test_langgraph_new_input_on_a_paused_thread_cancels_it_and_starts_a_new_workflow(fake_llm, lc_handler):
    graph = _hitl_graph(fake_llm.base_url)
    config = {"configurable": {"thread_id": "t2"}}
    graph.invoke({"text": "first"}, config)
    graph.invoke({"text": "second"}, config)  # starts over: the first run will never finish
    assert ending.flush(5.0)
    first, second = (h[0] for h in _hints(fake_llm))
    assert first != second and _hints(fake_llm) == [(first, "writer", 0), (second, "writer", 0)]
    assert [(w, s) for w, s, _ in fake_llm.ends] == [(first, "cancelled")]
    assert list(lc_handler.paused_workflows) == ["t2"]


def test_langgraph_cancelled_task_and_abandoned_stream_end_cancelled_and_a_raising_node_failed(fake_llm, lc_handler):
    from tests.sdk.apps import build_langgraph_app

    graph = build_langgraph_app(fake_llm.base_url, async_nodes=True)
    fake_llm.reply_delay_s = 0.3

    asyncio.run(cancel_after(graph.ainvoke({"claim": "c", "max_rounds": 1}), 0.15))
    fake_llm.reply_delay_s = 0.0
    for _ in build_langgraph_app(fake_llm.base_url).stream({"claim": "s", "max_rounds": 1}):
        break  # the caller stops consuming after the first node
    hitl = _hitl_graph(fake_llm.base_url + "/broken")  # writer's request gets a 404: the node raises
    with pytest.raises(Exception):
        hitl.invoke({"text": "x"}, {"configurable": {"thread_id": "t3"}})
    assert ending.flush(5.0)
    assert [s for _, s, _ in fake_llm.ends] == ["cancelled", "cancelled", "failed"]
    assert lc_handler.active_workflows == 0 and lc_handler.paused_workflows == {}


def _handoff_script(body: dict, n: int):
    """The helper hands off to the user until the user's reply is in the conversation."""
    if any(m.get("role") == "user" and "approved" in str(m.get("content")) for m in body["messages"]):
        return "done"
    return {"content": None, "tool_calls": [tool_call("transfer_to_user", {}, f"c{n}")]}


def _swarm(base_url: str):
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.conditions import HandoffTermination, MaxMessageTermination
    from autogen_agentchat.teams import Swarm
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    from pbkv_sdk.integrations.autogen import instrument_team

    info = {"vision": False, "function_calling": True, "json_output": False, "structured_output": False, "family": "unknown"}
    client = OpenAIChatCompletionClient(model="m", base_url=base_url, api_key="x", max_retries=0, model_info=info)
    helper = AssistantAgent("helper", model_client=client, handoffs=["user"])
    team = Swarm([helper], termination_condition=HandoffTermination(target="user") | MaxMessageTermination(3))
    return instrument_team(team, app="swarm", server_url=base_url.removesuffix("/v1"))


def test_autogen_handoff_to_the_user_pauses_the_run_and_the_next_run_continues_it(fake_llm):
    from autogen_agentchat.messages import HandoffMessage

    fake_llm.reply_fn = _handoff_script

    async def main():
        team = _swarm(fake_llm.base_url)
        first = await team.run(task="need approval")
        assert isinstance(first.messages[-1], HandoffMessage) and team.paused_workflow is not None
        assert ending.flush(5.0) and fake_llm.ends == []
        await team.run(task=HandoffMessage(source="user", target="helper", content="approved"))
        team2 = _swarm(fake_llm.base_url)
        await team2.run(task="need approval")
        await team2.reset()  # the paused run is abandoned
        return team, team2

    team, team2 = asyncio.run(main())
    assert ending.flush(5.0)
    wf = team.last_workflow.workflow_id
    assert _hints(fake_llm)[:2] == [(wf, "helper", 0), (wf, "helper", 1)]
    assert [(w, s) for w, s, _ in fake_llm.ends] == [(wf, "completed"), (team2.last_workflow.workflow_id, "cancelled")]


def test_autogen_cancellation_token_ends_the_run_cancelled(fake_llm):
    from autogen_core import CancellationToken

    from tests.sdk.apps import build_autogen_team

    fake_llm.reply_delay_s = 0.3

    async def main():
        team = build_autogen_team(fake_llm.base_url, server_url=fake_llm.url)
        token = CancellationToken()
        task = asyncio.create_task(team.run(task="fix bug 1", cancellation_token=token))
        await asyncio.sleep(0.45)  # inside the first agent call
        token.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert ending.flush(5.0)
    assert [s for _, s, _ in fake_llm.ends] == ["cancelled"]


def test_crewai_cancelled_akickoff_ends_cancelled_once(fake_llm):
    from pbkv_sdk.integrations.crewai import uninstrument

    from tests.sdk.apps import build_crewai_crew

    fake_llm.reply_delay_s = 0.3
    crew = build_crewai_crew(fake_llm.base_url, server_url=fake_llm.url)

    try:
        asyncio.run(cancel_after(crew.akickoff(inputs={"question": "question-1"}), 0.15))
        settle_ends(5.0)  # CrewAI's event bus has run every handler that could send a late duplicate
    finally:
        uninstrument()
    assert [s for _, s, _ in fake_llm.ends] == ["cancelled"]


def test_crewai_guardrail_retry_and_a_hierarchical_manager_stay_in_one_workflow(fake_llm):
    from crewai import LLM, Agent, Crew, Process, Task

    from pbkv_sdk.integrations.crewai import instrument, uninstrument

    verdicts = iter([(False, "cite the filing"), (True, "ok")])

    def guardrail(output):
        ok, feedback = next(verdicts)
        return (True, output) if ok else (False, feedback)

    instrument(app="finance", server_url=fake_llm.url)
    try:
        llm = LLM(model="openai/m", base_url=fake_llm.base_url, api_key="x", max_retries=0)
        analyst = Agent(role="Analyst", goal="g", backstory="b", llm=llm)
        task = Task(description="question-1", expected_output="x", agent=analyst, guardrail=guardrail)
        Crew(agents=[analyst], tasks=[task]).kickoff()
        settle_ends(5.0)
        [(wf, _, _)] = fake_llm.ends
        assert _hints(fake_llm) == [(wf, "Analyst", 0), (wf, "Analyst", 1)]  # the retry is step 1 of the same run
        fake_llm.requests.clear()
        fake_llm.ends.clear()
        worker = Agent(role="Worker", goal="g", backstory="b", llm=llm)
        Crew(agents=[worker], tasks=[Task(description="question-2", expected_output="x")], process=Process.hierarchical,
             manager_llm=llm).kickoff()
        settle_ends(5.0)
    finally:
        uninstrument()
    [(wf2, status, _)] = fake_llm.ends
    hints = _hints(fake_llm)
    assert status == "completed" and {w for w, _, _ in hints} == {wf2}
    assert [s for _, _, s in hints] == list(range(len(hints)))
    assert hints[0][1] == "Crew Manager"  # the manager's own calls carry its role
