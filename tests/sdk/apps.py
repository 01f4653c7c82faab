"""Small multi-agent test apps, one per framework, each built from an OpenAI-compatible ``base_url``.

They are real framework code (LangGraph graph with a conditional loop, a parallel fan-out and a
nested subgraph; an AutoGen SelectorGroupChat; a CrewAI sequential crew) written without PBKV:
the LangGraph app and the CrewAI crew contain no PBKV code at all (tests add the one
``instrument(...)`` line of README "Adding PBKV to your app"); the AutoGen builder applies its one
line, ``instrument_team``. Nothing here depends on the fake test server.

The LangGraph claim-check app, per round: ``planner`` -> (``retriever_a`` || ``retriever_b``) ->
``summarizer`` -> subgraph ``verifier`` (``check`` -> ``judge``); it loops back to ``planner``
until ``judge`` says "verified" or ``max_rounds`` rounds ran.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

#: Agents of one LangGraph round, in order; the two retrievers run in parallel.
LANGGRAPH_ROUND = ("planner", ("retriever_a", "retriever_b"), "summarizer", "check", "judge")


class ClaimState(TypedDict, total=False):
    """State of the LangGraph app: the claim, the round counter, the notes so far, the verdict."""

    claim: str
    max_rounds: int
    round: int
    notes: Annotated[list[str], operator.add]
    verdict: str


def build_langgraph_app(
    base_url: str,
    *,
    api_key: str = "not-needed",
    model: str = "test-model",
    streaming: bool = False,
    async_nodes: bool = False,
):
    """Compile the claim-check graph (plain LangGraph + ChatOpenAI, no PBKV code).

    Args:
        base_url: OpenAI-compatible base URL, e.g. ``http://127.0.0.1:8000/v1``.
        streaming: the chat model streams its answers (SSE) instead of one JSON response.
        async_nodes: nodes are ``async def`` and call ``ainvoke`` (run with ``ainvoke``/``astream``).

    Returns:
        A compiled LangGraph; input ``{"claim": str, "max_rounds": int}``.
    """
    from langchain_core.messages import HumanMessage, SystemMessage
    from langchain_openai import ChatOpenAI
    from langgraph.graph import END, START, StateGraph

    llm = ChatOpenAI(
        model=model,
        base_url=base_url,
        api_key=api_key,
        streaming=streaming,
        max_retries=0,
    )

    def prompt(role: str, state: ClaimState) -> list:
        notes = "\n".join(state.get("notes", []))
        return [
            SystemMessage(f"You are the {role} of a fact-checking team."),
            HumanMessage(f"Claim: {state['claim']}\nRound: {state.get('round', 0)}\nNotes:\n{notes}\nYour turn, {role}."),
        ]

    def make_node(role: str, update):
        if async_nodes:

            async def node(state: ClaimState) -> dict[str, Any]:
                reply = await llm.ainvoke(prompt(role, state))
                return update(state, reply.content)

        else:

            def node(state: ClaimState) -> dict[str, Any]:
                reply = llm.invoke(prompt(role, state))
                return update(state, reply.content)

        return node

    def note(role: str):
        return lambda state, text: {"notes": [f"{role}: {text}"]}

    verifier = StateGraph(ClaimState)
    verifier.add_node("check", make_node("check", note("check")))
    verifier.add_node(
        "judge", make_node("judge", lambda state, text: {"verdict": text, "round": state.get("round", 0) + 1})
    )
    verifier.add_edge(START, "check")
    verifier.add_edge("check", "judge")
    verifier.add_edge("judge", END)

    graph = StateGraph(ClaimState)
    graph.add_node("planner", make_node("planner", note("planner")))
    graph.add_node("retriever_a", make_node("retriever_a", note("retriever_a")))
    graph.add_node("retriever_b", make_node("retriever_b", note("retriever_b")))
    graph.add_node("summarizer", make_node("summarizer", note("summarizer")))
    graph.add_node("verifier", verifier.compile())
    graph.add_edge(START, "planner")
    graph.add_edge("planner", "retriever_a")
    graph.add_edge("planner", "retriever_b")
    graph.add_edge(["retriever_a", "retriever_b"], "summarizer")
    graph.add_edge("summarizer", "verifier")

    def again(state: ClaimState) -> str:
        verdict = state.get("verdict", "").lower()
        done = "verified" in verdict and "not verified" not in verdict
        return END if done or state.get("round", 0) >= state.get("max_rounds", 1) else "planner"

    graph.add_conditional_edges("verifier", again, ["planner", END])
    return graph.compile()


#: Participants of the AutoGen team, in the order the selector prompt lists them.
AUTOGEN_AGENTS = ("planner", "coder", "tester")


def build_autogen_team(
    base_url: str,
    *,
    app: str = "swe",
    server_url: str | None = None,
    trace_path: str | None = None,
    api_key: str = "not-needed",
    model: str = "test-model",
    streaming: bool = False,
    max_turns: int = 4,
    body_hints: bool | None = None,
):
    """A SelectorGroupChat of planner/coder/tester sharing one model client, instrumented for PBKV.

    Each turn is one speaker-selection call plus one call of the chosen agent; the run stops
    after ``max_turns`` agent messages (``MaxMessageTermination`` counts the task message too).

    Returns:
        :class:`pbkv_sdk.integrations.autogen.InstrumentedTeam`; ``await team.run(task=...)``.
    """
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.conditions import MaxMessageTermination
    from autogen_agentchat.teams import SelectorGroupChat
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    from pbkv_sdk.integrations.autogen import instrument_team

    client = OpenAIChatCompletionClient(
        model=model,
        base_url=base_url,
        api_key=api_key,
        max_retries=0,
        model_info={
            "vision": False,
            "function_calling": False,
            "json_output": False,
            "structured_output": False,
            "family": "unknown",
        },
    )
    agents = [
        AssistantAgent(name, model_client=client, model_client_stream=streaming, system_message=f"You are the {name}.")
        for name in AUTOGEN_AGENTS
    ]
    team = SelectorGroupChat(
        agents,
        model_client=client,
        termination_condition=MaxMessageTermination(max_turns + 1),
        model_client_streaming=streaming,
    )
    return instrument_team(team, app=app, server_url=server_url, trace_path=trace_path, body_hints=body_hints)


#: Roles of the CrewAI crew, in task order.
CREWAI_ROLES = ("Financial Analyst", "Report Writer")


def build_crewai_crew(
    base_url: str,
    *,
    app: str | None = "finance",
    server_url: str | None = None,
    trace_path: str | None = None,
    api_key: str = "not-needed",
    model: str = "test-model",
    streaming: bool = False,
    body_hints: bool | None = None,
):
    """A sequential two-agent CrewAI crew (analyst, then writer); instruments PBKV unless ``app`` is ``None``.

    Call ``crew.kickoff(inputs={"question": ...})``. Instrumentation is process-wide
    (``pbkv_sdk.integrations.crewai.instrument``, the README's one line); the latest call's
    settings apply. The crew itself has no PBKV code.

    Returns:
        ``crewai.Crew``.
    """
    from crewai import LLM, Agent, Crew, Process, Task

    from pbkv_sdk.integrations.crewai import instrument

    if app is not None:
        instrument(app=app, server_url=server_url, trace_path=trace_path, body_hints=body_hints)
    llm = LLM(model=f"openai/{model}", base_url=base_url, api_key=api_key, stream=streaming, max_retries=0)
    analyst = Agent(role=CREWAI_ROLES[0], goal="Answer the question from the filing", backstory="Reads 10-Ks.", llm=llm)
    writer = Agent(role=CREWAI_ROLES[1], goal="Write the answer up", backstory="Writes crisp notes.", llm=llm)
    analyse = Task(description="Question: {question}. Find the figures.", expected_output="The figures.", agent=analyst)
    write = Task(description="Write the answer to: {question}.", expected_output="A short answer.", agent=writer)
    return Crew(agents=[analyst, writer], tasks=[analyse, write], process=Process.sequential, verbose=False)
