"""CrewAI sequential crew with the PBKV hooks, listener and interceptor, against the fake server."""

from __future__ import annotations

import asyncio
import logging
import re
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from pbkv_sdk import ending
from pbkv_sdk.integrations.crewai import uninstrument
from pbkv_sdk.recorder import flush_all
from pbkv_contract.trace import InvocationRecord, WorkflowEndRecord, iter_trace

from .apps import CREWAI_ROLES, build_crewai_crew
from .fake_openai import FakeOpenAI
from .settle import settle_ends

_QUESTION_RE = re.compile(r"question-(\d+)")


@pytest.fixture(autouse=True)
def _uninstrument():
    yield
    uninstrument()


def wire(fake: FakeOpenAI) -> dict[str, tuple[str, list[str]]]:
    """workflow id -> (the question its requests are about, roles by step)."""
    seen: dict[str, tuple[set, list]] = {}
    for req in fake.requests:
        wf, agent, step, app = fake.hints_of(req)
        assert app == "finance" and wf is not None
        text = " ".join(str(m.get("content")) for m in req.body["messages"])
        questions, steps = seen.setdefault(wf, (set(), []))
        questions.update(_QUESTION_RE.findall(text))
        steps.append((step, agent))
    out = {}
    for wf, (questions, steps) in seen.items():
        assert len(questions) == 1, f"{wf} mixed questions {questions}"
        steps.sort()
        assert [s for s, _ in steps] == list(range(len(steps)))
        out[wf] = (questions.pop(), [a for _, a in steps])
    return out


def ends_after_flush(fake: FakeOpenAI, n: int) -> list[tuple[str, str]]:
    """End signals once ``n`` arrived (or 30 s passed): the fallback listener runs on CrewAI's pool."""
    deadline = time.monotonic() + 30.0  # generous under load; a pass ends it early
    while len(fake.ends) < n and time.monotonic() < deadline:
        ending.flush(1.0)
        time.sleep(0.01)
    settle_ends()  # every handler that could send a duplicate has run, and its end has arrived
    return sorted((w, s) for w, s, _ in fake.ends)


@pytest.mark.parametrize("streaming", [False, True], ids=["json", "sse"])
def test_kickoff_is_one_workflow_with_roles_as_agents(fake_llm, tmp_path, streaming):
    trace = tmp_path / "t.jsonl"
    crew = build_crewai_crew(fake_llm.base_url, server_url=fake_llm.url, trace_path=str(trace), streaming=streaming)
    out = crew.kickoff(inputs={"question": "question-1"})
    assert out.raw.startswith("reply")
    [(wf, (question, roles))] = wire(fake_llm).items()
    assert question == "1" and roles == list(CREWAI_ROLES)
    assert all(bool(r.body.get("stream")) == streaming for r in fake_llm.requests)
    assert ends_after_flush(fake_llm, 1) == [(wf, "completed")]
    assert flush_all(10.0)
    records = list(iter_trace(trace, strict=True))
    assert [(r.step, r.agent) for r in records if isinstance(r, InvocationRecord)] == list(enumerate(CREWAI_ROLES))
    assert isinstance(records[-1], WorkflowEndRecord) and records[-1].workflow_id == wf


def test_repeated_kickoffs_of_one_crew_are_separate_workflows_each_ended_once(fake_llm):
    crew = build_crewai_crew(fake_llm.base_url, server_url=fake_llm.url)
    for i in range(3):
        crew.kickoff(inputs={"question": f"question-{i}"})
    runs = wire(fake_llm)
    assert sorted(q for q, _ in runs.values()) == ["0", "1", "2"]
    assert all(roles == list(CREWAI_ROLES) for _, roles in runs.values())
    assert ends_after_flush(fake_llm, 3) == sorted((w, "completed") for w in runs)


def test_eight_concurrent_kickoffs_never_mix_hints(fake_llm):
    fake_llm.chunk_delay_s = 0.002
    crews = [build_crewai_crew(fake_llm.base_url, server_url=fake_llm.url, streaming=i % 2 == 0) for i in range(8)]

    async def run_async(indexes):
        await asyncio.gather(*(crews[i].kickoff_async(inputs={"question": f"question-{i}"}) for i in indexes))

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda i: crews[i].kickoff(inputs={"question": f"question-{i}"}), range(4)))
    asyncio.run(run_async(range(4, 8)))  # kickoff_async runs kickoff in worker threads
    runs = wire(fake_llm)
    assert sorted(q for q, _ in runs.values()) == [str(i) for i in range(8)]
    assert all(roles == list(CREWAI_ROLES) for _, roles in runs.values())
    assert ends_after_flush(fake_llm, 8) == sorted((w, "completed") for w in runs)


def test_a_failing_llm_ends_the_kickoff_failed_once(fake_llm, free_port):
    crew = build_crewai_crew(f"http://127.0.0.1:{free_port}/v1", server_url=fake_llm.url)
    with pytest.raises(Exception):
        crew.kickoff(inputs={"question": "question-5"})
    assert [s for _, s in ends_after_flush(fake_llm, 1)] == ["failed"]
    from pbkv_sdk.integrations.crewai import INSTRUMENTOR

    assert INSTRUMENTOR.handle._task_agent == {}  # the failed task's agent is forgotten too


def test_a_failed_kickoff_leaves_the_callers_agent_as_it_was(fake_llm, free_port):
    # the failed task never reaches post_step: its agent stayed the caller's, and a later LLM call
    # outside any crew in the same thread was stamped with the crew's role (found as a leak between
    # tests: a vLLM test later in the process saw 'Financial Analyst' as its agent)
    from pbkv_sdk.context import current_agent, current_workflow

    crew = build_crewai_crew(f"http://127.0.0.1:{free_port}/v1", server_url=fake_llm.url)
    with pytest.raises(Exception):
        crew.kickoff(inputs={"question": "question-6"})
    assert (current_agent(), current_workflow()) == (None, None)


def test_crew_completes_with_one_warning_when_pbkv_server_is_down(fake_llm, free_port, caplog):
    crew = build_crewai_crew(fake_llm.base_url, server_url=f"http://127.0.0.1:{free_port}")
    with caplog.at_level(logging.WARNING, logger="pbkv_sdk"):
        for i in range(2):
            assert crew.kickoff(inputs={"question": f"question-{i}"}).raw.startswith("reply")
        settle_ends(10.0)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("pbkv_sdk")]
    assert len(warnings) == 1 and "end signal" in warnings[0].getMessage()
    assert len(fake_llm.requests) == 4


def test_native_akickoff_runs_are_one_workflow_each(fake_llm):
    crews = [build_crewai_crew(fake_llm.base_url, server_url=fake_llm.url, streaming=i == 1) for i in range(3)]

    async def main():
        await asyncio.gather(*(c.akickoff(inputs={"question": f"question-{i}"}) for i, c in enumerate(crews)))

    asyncio.run(main())
    runs = wire(fake_llm)
    assert sorted(q for q, _ in runs.values()) == ["0", "1", "2"]
    assert all(roles == list(CREWAI_ROLES) for _, roles in runs.values())
    assert ends_after_flush(fake_llm, 3) == sorted((w, "completed") for w in runs)


def test_the_async_interceptor_path_stamps_and_records(fake_llm, tmp_path):
    """CrewAI's async transport calls aon_outbound/aon_inbound (used by LLM.acall)."""
    import httpx
    from crewai.llms.hooks.transport import AsyncHTTPTransport

    import pbkv_sdk
    from pbkv_sdk.integrations.crewai import PBKVInterceptor

    trace = tmp_path / "t.jsonl"

    async def main():
        async with httpx.AsyncClient(transport=AsyncHTTPTransport(interceptor=PBKVInterceptor())) as client:
            with pbkv_sdk.workflow(app="finance", workflow_id="wf-async", server_url=fake_llm.url, trace_path=trace):
                with pbkv_sdk.agent("Report Writer"):
                    for stream in (False, True):
                        body = {"model": "m", "stream": stream, "messages": [{"role": "user", "content": "question-1"}]}
                        async with client.stream("POST", fake_llm.base_url + "/chat/completions", json=body) as r:
                            await r.aread()

    asyncio.run(main())
    assert [fake_llm.hints_of(r) for r in fake_llm.requests] == [
        ("wf-async", "Report Writer", 0, "finance"), ("wf-async", "Report Writer", 1, "finance")
    ]
    assert flush_all(10.0)
    records = list(iter_trace(trace, strict=True))
    # JSON: server usage (6 reply words); SSE without usage: 5 content chunks counted
    assert [(r.step, r.completion_tokens) for r in records if isinstance(r, InvocationRecord)] == [(0, 6), (1, 5)]


def test_ended_kickoffs_leave_no_state_behind(fake_llm):
    from pbkv_sdk.integrations.crewai import INSTRUMENTOR

    crew = build_crewai_crew(fake_llm.base_url, server_url=fake_llm.url)
    for i in range(3):
        crew.kickoff(inputs={"question": f"question-{i}"})
    ends_after_flush(fake_llm, 3)
    inst = INSTRUMENTOR.handle
    assert inst._active == {} and inst._kickoff_of == {} and inst._task_agent == {}  # a long-running app must not grow them


def test_the_forced_final_answer_after_max_iter_carries_its_agent(fake_llm):
    """An agent that never answers is asked once more after ``max_iter`` (CrewAI's forced final
    answer, issue 35 item 4): that call is the agent's too, not ``unknown``."""
    import json

    from crewai import LLM, Agent, Crew, Process, Task
    from crewai.tools import tool

    from pbkv_sdk.integrations.crewai import instrument

    @tool("lookup")
    def lookup(query: str) -> str:
        """Look a figure up."""
        return f"no figure for {query}"

    def never_final(body, n):
        if not body.get("tools"):  # the forced call offers no tools: any text is the answer
            return f"reply {n}: forced answer"
        call = {"id": f"call-{n}", "type": "function", "function": {"name": "lookup", "arguments": json.dumps({"query": f"q{n}"})}}
        return {"content": None, "tool_calls": [call]}

    fake_llm.reply_fn = never_final
    instrument(app="finance", server_url=fake_llm.url)
    llm = LLM(model="openai/test-model", base_url=fake_llm.base_url, api_key="x", max_retries=0)
    scout = Agent(role="Scout", goal="Find the figure", backstory="Looks things up.", llm=llm, tools=[lookup], max_iter=2)
    writer = Agent(role=CREWAI_ROLES[1], goal="Write the answer up", backstory="Writes crisp notes.", llm=llm)
    find = Task(description="Question: {question}. Find the figure.", expected_output="The figure.", agent=scout)
    write = Task(description="Write the answer to: {question}.", expected_output="A short answer.", agent=writer)
    crew = Crew(agents=[scout, writer], tasks=[find, write], process=Process.sequential, verbose=False)
    crew.kickoff(inputs={"question": "question-9"})
    [(wf, (question, roles))] = wire(fake_llm).items()
    forced = [i for i, r in enumerate(fake_llm.requests) if not r.body.get("tools")]
    assert forced, "the fake never saw the forced final answer call"
    # max_iter=2: the tool-calling turns, then the forced call, all Scout's; then the writer
    assert roles[0] == "Scout" and roles[-1] == CREWAI_ROLES[1] and roles.count(CREWAI_ROLES[1]) == 1
    assert set(roles[:-1]) == {"Scout"}, roles
    assert ends_after_flush(fake_llm, 1) == [(wf, "completed")]
