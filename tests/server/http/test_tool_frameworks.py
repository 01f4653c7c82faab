"""Framework code that runs only on tool calls, against a real pbkv-server (sim engine) on 127.0.0.1:
an OpenAI Agents SDK handoff, a LangGraph ReAct agent's ToolNode, an AutoGen AssistantAgent's tool.

The server uses ``CallOnceScenario`` (a tool call on each fresh turn, text after a tool result),
so each run's path is fixed; the default settings are exercised by the HTTP tests."""

from __future__ import annotations

import asyncio

import pytest

SCENARIO = "tests.server.http.server_http_fixtures:CallOnceScenario"


def test_openai_agents_handoff_runs_the_second_agent_and_its_tool(start_server):
    agents = pytest.importorskip("agents")
    from openai import AsyncOpenAI

    server = start_server(policy="lru", scenario=SCENARIO)
    agents.set_trace_processors([])  # the default exporter would post traces to api.openai.com
    added: list[tuple[int, int]] = []

    @agents.function_tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        added.append((a, b))
        return a + b

    async def run():
        model = agents.OpenAIChatCompletionsModel("m", AsyncOpenAI(base_url=server.base_url, api_key="x",
                                                                   max_retries=0))
        billing = agents.Agent(name="Billing", instructions="You are the billing agent.", model=model, tools=[add])
        triage = agents.Agent(name="Triage", instructions="Route billing questions.", model=model,
                              handoffs=[billing])
        return await agents.Runner.run(triage, "What is 3 plus 5 on my invoice?")

    result = asyncio.run(run())
    assert result.last_agent.name == "Billing"  # the handoff (a tool call of Triage) happened
    kinds = [type(item).__name__ for item in result.new_items]
    assert kinds == ["HandoffCallItem", "HandoffOutputItem", "ToolCallItem", "ToolCallOutputItem",
                     "MessageOutputItem"], kinds
    assert len(added) == 1 and all(isinstance(x, int) for x in added[0])
    assert isinstance(result.final_output, str) and result.final_output


def test_langgraph_react_agent_runs_its_tool_and_finishes(start_server):
    pytest.importorskip("langgraph.prebuilt")
    from langchain_core.messages import AIMessage, ToolMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from langgraph.prebuilt import create_react_agent

    server = start_server(policy="lru", scenario=SCENARIO)
    queries: list[str] = []

    @tool
    def search_passages(query: str, k: int) -> str:
        """Search encyclopedia passages for ``query``; returns up to ``k`` titles."""
        queries.append(query)
        return "Title: The 1998 film (studio: Example Pictures)"

    llm = ChatOpenAI(model="m", base_url=server.base_url, api_key="x", max_retries=0)
    agent = create_react_agent(llm, [search_passages])
    state = agent.invoke({"messages": [("user", "Which studio released the 1998 film?")]})
    messages = state["messages"]
    assert [type(m).__name__ for m in messages] == ["HumanMessage", "AIMessage", "ToolMessage", "AIMessage"]
    assert messages[1].tool_calls[0]["name"] == "search_passages" and len(queries) == 1
    assert isinstance(messages[2], ToolMessage) and "Example Pictures" in messages[2].content
    final = messages[-1]
    assert isinstance(final, AIMessage) and not final.tool_calls and final.content


@pytest.mark.parametrize("streaming", [False, True], ids=["json", "sse"])
def test_autogen_assistant_agent_calls_its_tool(start_server, streaming):
    pytest.importorskip("autogen_agentchat")
    from autogen_agentchat.agents import AssistantAgent
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    server = start_server(policy="lru", scenario=SCENARIO)
    looked_up: list[str] = []

    async def lookup_patch(path: str) -> str:
        """Return the current contents of the file at ``path``."""
        looked_up.append(path)
        return "def apply_fix(value):\n    return value\n"

    async def run():
        client = OpenAIChatCompletionClient(model="m", base_url=server.base_url, api_key="x", max_retries=0,
                                            model_info={"vision": False, "function_calling": True,
                                                        "json_output": False, "structured_output": False,
                                                        "family": "unknown"})
        agent = AssistantAgent("coder", model_client=client, tools=[lookup_patch], model_client_stream=streaming,
                               reflect_on_tool_use=True)
        return await agent.run(task="Look at src/fix.py and propose a change.")

    result = asyncio.run(run())
    kinds = [type(m).__name__ for m in result.messages if type(m).__name__ != "ModelClientStreamingChunkEvent"]
    assert kinds == ["TextMessage", "ToolCallRequestEvent", "ToolCallExecutionEvent", "TextMessage"], kinds
    assert len(looked_up) == 1 and looked_up[0]
    assert result.messages[-1].source == "coder" and result.messages[-1].content


def test_crewai_agent_calls_its_tool_natively(start_server):
    pytest.importorskip("crewai")
    from crewai import LLM, Agent, Crew, Process, Task
    from crewai.tools import tool

    server = start_server(policy="lru", scenario=SCENARIO)
    fetched: list[str] = []

    @tool("fetch_filing")
    def fetch_filing(ticker: str) -> str:
        """Fetch the latest 10-K excerpt of the company with this ticker."""
        fetched.append(ticker)
        return "Revenue 2023: 1,200 million USD"

    llm = LLM(model="openai/m", base_url=server.base_url, api_key="x", max_retries=0)
    analyst = Agent(role="analyst", goal="Answer from the filing", backstory="Reads 10-Ks.", llm=llm,
                    tools=[fetch_filing], allow_delegation=False)
    task = Task(description="What was the 2023 revenue of ACME?", expected_output="The figure.", agent=analyst)
    out = Crew(agents=[analyst], tasks=[task], process=Process.sequential, verbose=False).kickoff()
    assert len(fetched) == 1 and fetched[0]  # the offered tool was called through function calling
    assert out.raw
