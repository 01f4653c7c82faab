"""Regression cases 8, 10 (SDK side), 11, 14, 15 and 16 (docs/regressions.md: bugs reported in
neighbouring projects), with the real frameworks against the fake server or pbkv-server."""

from __future__ import annotations

import asyncio
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from pbkv_sdk import ending
from pbkv_sdk.recorder import flush_all
from pbkv_contract.trace import InvocationRecord, iter_trace

from . import fake_openai
from .fake_openai import FakeOpenAI

# --------------------------------------------------------------------------- case 14


def _selector_script(body: dict, n: int):
    """Selector replies by turn: turn 0 valid; turn 1 two invalid names then a valid one; turn 2
    invalid every time (AutoGen falls back); later turns valid. Agents get the default reply."""
    messages = body["messages"]
    first = str(messages[0].get("content"))
    if "select the next role" not in first.lower():
        return fake_openai._reply(messages, n)
    turn = first.count("Final Answer:")  # agent replies so far, in the prompt's history
    attempt = sum(m["role"] == "assistant" for m in messages)
    if turn == 2 or (turn == 1 and attempt < 2):
        return "nobody in particular"
    return fake_openai._reply(messages, n)


def _selector_team(base_url: str, fake: FakeOpenAI):
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.teams import SelectorGroupChat
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    from pbkv_sdk.integrations.autogen import instrument_team

    info = {"vision": False, "function_calling": False, "json_output": False, "structured_output": False, "family": "unknown"}
    client = OpenAIChatCompletionClient(model="m", base_url=base_url, api_key="x", max_retries=0, model_info=info)
    agents = [AssistantAgent(name, model_client=client, system_message=f"You are the {name}.") for name in ("planner", "coder", "tester")]
    team = SelectorGroupChat(agents, model_client=client, max_selector_attempts=3, max_turns=8)
    return instrument_team(team, app="swe", server_url=fake.url)


def test_case14_selector_attempts_are_stamped_internal_and_the_run_stops_at_max_turns(fake_llm, tmp_path, monkeypatch):
    from pbkv_train.data import workflows_from_records

    monkeypatch.setenv("PBKV_TRACE_PATH", str(tmp_path / "t.jsonl"))
    fake_llm.reply_fn = _selector_script

    async def main():
        teams = [_selector_team(fake_llm.base_url, fake_llm) for _ in range(4)]
        results = await asyncio.gather(*(t.run(task=f"fix bug {i}") for i, t in enumerate(teams)))
        reused = teams[0]
        await reused.reset()
        again = await reused.run(task="fix bug 9")
        return teams, results + [again]

    teams, results = asyncio.run(main())
    assert all(len(r.messages) == 1 + 8 for r in results)  # the task and 8 agent turns, then it stopped
    assert ending.flush(5.0) and flush_all(10.0)
    by_wf: dict[str, list] = {}
    for req in fake_llm.requests:
        wf, agent, step, app = fake_llm.hints_of(req)
        by_wf.setdefault(wf, []).append((step, agent))
    assert len(by_wf) == 5 and None not in by_wf  # the reused team's second run has its own id
    speakers = {wf: [a for _, a in sorted(steps)] for wf, steps in by_wf.items()}
    # turn 0: 1 selection; turn 1: 3 attempts; turn 2: 3 failed attempts then the fallback speaker
    expected_head = ["speaker_selector", "planner", "speaker_selector"] * 1 + ["speaker_selector"] * 2 + ["coder"]
    assert all(s[:6] == expected_head for s in speakers.values())
    assert all(s[6:9] == ["speaker_selector"] * 3 and len(s) == 6 + 4 + 5 * 2 for s in speakers.values())
    ends = [(w, st) for w, st, _ in fake_llm.ends]
    assert sorted(ends) == sorted((w, "completed") for w in by_wf)
    records = list(iter_trace(tmp_path / "t.jsonl", strict=True))
    invs = [r for r in records if isinstance(r, InvocationRecord)]
    assert all(r.internal is True for r in invs if r.agent == "speaker_selector")
    assert all(r.internal is None for r in invs if r.agent != "speaker_selector")
    for workflow in workflows_from_records(records):  # training sees the agent turns only, in order
        assert workflow.agents[:2] == ("planner", "coder") and len(workflow.agents) == 8
        assert "speaker_selector" not in workflow.agents


# --------------------------------------------------------------------------- case 8


@pytest.fixture
def pbkv_server():
    """pbkv-server (sim engine, LRU) on a free loopback port, for the cases that need its real usage figures."""
    from pbkv_server.http import ServerConfig, run_in_thread

    with run_in_thread(ServerConfig(port=0, policy="lru")) as server:
        yield server


def test_case8_a_stream_without_usage_is_recorded_with_the_servers_token_headers(pbkv_server, tmp_path):
    import openai

    import pbkv_sdk

    words = " ".join(f"w{i % 97}x" for i in range(3000))  # about 4,000 tokens for the server's counter
    messages = [{"role": "user", "content": f"Summarise: {words}"}]
    client = openai.OpenAI(base_url=pbkv_server.base_url, api_key="x", http_client=pbkv_sdk.http_client())
    trace = tmp_path / "t.jsonl"
    with pbkv_sdk.workflow(app="usage", server_url=pbkv_server.url, trace_path=trace):
        with pbkv_sdk.agent("reader"):
            chunks1 = list(client.chat.completions.create(model="m", messages=messages, max_tokens=8, stream=True,
                                                          stream_options={"include_usage": True}))
            list(client.chat.completions.create(model="m", messages=messages, max_tokens=8, stream=True,
                                                stream_options={"include_usage": True}))
            plain = client.chat.completions.with_raw_response.create(model="m", messages=messages, max_tokens=8)
            chunks4 = list(client.chat.completions.create(model="m", messages=messages, max_tokens=8, stream=True))
    assert flush_all(10.0)
    usage1 = chunks1[-1].usage
    assert usage1.prompt_tokens >= 3900 and usage1.prompt_tokens_details.cached_tokens == 0  # explicit 0, not null
    assert all(c.usage is None for c in chunks4)  # request 4 got no usage chunk
    header_prompt = int(plain.headers["x-pbkv-prompt-tokens"])
    header_cached = int(plain.headers["x-pbkv-cached-tokens"])
    records = [r for r in iter_trace(trace, strict=True) if isinstance(r, InvocationRecord)]
    assert [r.step for r in records] == [0, 1, 2, 3]
    assert records[0].cached_tokens == 0 and records[1].cached_tokens >= 3900
    assert (records[2].prompt_tokens, records[2].cached_tokens) == (header_prompt, header_cached)
    # request 4: no usage in the body, yet the same prompt and cache state as request 3 (server headers)
    assert (records[3].prompt_tokens, records[3].cached_tokens) == (header_prompt, header_cached)


# --------------------------------------------------------------------------- case 10


def test_case10_non_ascii_role_and_node_names_are_sent_percent_encoded_and_kept_in_the_trace(fake_llm, tmp_path):
    from langchain_openai import ChatOpenAI
    from langgraph.graph import END, START, MessagesState, StateGraph

    from pbkv_sdk.integrations import crewai as pbkv_crewai
    from pbkv_sdk.integrations.langchain import instrument, uninstrument

    trace = tmp_path / "t.jsonl"
    llm = ChatOpenAI(model="m", base_url=fake_llm.base_url, api_key="x", max_retries=0)
    graph = StateGraph(MessagesState)
    graph.add_node("审核员", lambda state: {"messages": [llm.invoke(state["messages"])]})
    graph.add_edge(START, "审核员")
    graph.add_edge("审核员", END)
    instrument(app="review", server_url=fake_llm.url, trace_path=trace)
    try:
        graph.compile().invoke({"messages": [("user", "check")]})
    finally:
        uninstrument()

    from crewai import LLM, Agent, Crew, Task

    pbkv_crewai.instrument(app="finance", server_url=fake_llm.url, trace_path=trace)
    try:
        analyst = Agent(role="Analyste financière", goal="Analyser", backstory="Lit les bilans.",
                        llm=LLM(model="openai/m", base_url=fake_llm.base_url, api_key="x", max_retries=0))
        task = Task(description="Question: marge ?", expected_output="Un chiffre.", agent=analyst)
        assert Crew(agents=[analyst], tasks=[task]).kickoff().raw.startswith("reply")
    finally:
        pbkv_crewai.uninstrument()
    assert flush_all(10.0)
    raw = [r.headers["x-pbkv-agent"] for r in fake_llm.requests]
    assert raw == ["%E5%AE%A1%E6%A0%B8%E5%91%98", "Analyste financi%C3%A8re"]  # UTF-8 bytes, by hand
    agents = [r.agent for r in iter_trace(trace, strict=True) if isinstance(r, InvocationRecord)]
    assert sorted(agents) == sorted(["审核员", "Analyste financière"])


# --------------------------------------------------------------------------- case 11

_CLAIM_RE = re.compile(r"Claim: (\S+)")


def _mixed_graph(base_url: str):
    """3 async nodes and 1 sync node (LangGraph runs it in an executor), each a streaming ChatOpenAI call."""
    from langchain_openai import ChatOpenAI
    from langgraph.graph import END, START, StateGraph

    from .apps import ClaimState

    llm = ChatOpenAI(model="m", base_url=base_url, api_key="x", streaming=True, max_retries=0)

    def prompt(role: str, state) -> str:
        return f"Claim: {state['claim']} as {role}"

    def make(role: str, sync: bool):
        if sync:
            return lambda state: {"notes": [llm.invoke(prompt(role, state)).content]}

        async def node(state):
            return {"notes": [(await llm.ainvoke(prompt(role, state))).content]}

        return node

    graph = StateGraph(ClaimState)
    order = [("a1", False), ("s1", True), ("a2", False), ("a3", False)]
    for role, sync in order:
        graph.add_node(role, make(role, sync))
    graph.add_edge(START, "a1")
    for (prev, _), (nxt, _) in zip(order, order[1:]):
        graph.add_edge(prev, nxt)
    graph.add_edge("a3", END)
    return graph.compile()


def test_case11_contexts_survive_async_callbacks_executors_and_threads(fake_llm):
    from pbkv_sdk.integrations.langchain import instrument, uninstrument

    fake_llm.chunk_delay_s = 0.002
    graph = _mixed_graph(fake_llm.base_url)
    instrument(app="ctx", server_url=fake_llm.url)
    try:
        async def async_runs():
            async def consume(claim):
                return [c async for c in graph.astream({"claim": claim})]

            await asyncio.gather(*(consume(f"as{i}") for i in range(8)), *(graph.ainvoke({"claim": f"ai{i}"}) for i in range(2)))

        with ThreadPoolExecutor(2) as pool:
            # async nodes cannot run under a sync invoke: each thread runs the graph in its own event loop
            threaded = [pool.submit(lambda c: asyncio.run(graph.ainvoke({"claim": c})), f"th{i}") for i in range(2)]
            asyncio.run(async_runs())
            [f.result() for f in threaded]
    finally:
        uninstrument()
    assert ending.flush(5.0)
    runs: dict[str, tuple[set, list]] = {}
    for req in fake_llm.requests:
        wf, agent, step, _ = fake_llm.hints_of(req)
        assert wf, "a request went out without its workflow id"
        claims, steps = runs.setdefault(wf, (set(), []))
        claims.add(_CLAIM_RE.search(req.body["messages"][-1]["content"]).group(1))
        steps.append((step, agent))
    assert len(runs) == 12 and all(len(claims) == 1 for claims, _ in runs.values())  # no foreign ids
    assert all(sorted(steps) == [(0, "a1"), (1, "s1"), (2, "a2"), (3, "a3")] for _, steps in runs.values())
    assert sorted(w for w, _, _ in fake_llm.ends) == sorted(runs)


def test_case11_crewai_async_tasks_from_threads_and_kickoff_async_keep_their_workflow(fake_llm):
    from crewai import LLM, Agent, Crew, Task

    from pbkv_sdk.integrations.crewai import instrument, uninstrument

    instrument(app="finance", server_url=fake_llm.url)

    def crew() -> Crew:
        llm = LLM(model="openai/m", base_url=fake_llm.base_url, api_key="x", max_retries=0)
        agents = [Agent(role=f"Role {k}", goal="g", backstory="b", llm=llm) for k in "ABC"]
        tasks = [Task(description=f"{{question}} part {k}", expected_output="x", agent=a, async_execution=k != "C")
                 for k, a in zip("ABC", agents)]
        return Crew(agents=agents, tasks=tasks)

    try:
        with ThreadPoolExecutor(3) as pool:
            list(pool.map(lambda i: crew().kickoff(inputs={"question": f"question-{i}"}), range(3)))
        asyncio.run(crew().kickoff_async(inputs={"question": "question-3"}))
        deadline = time.monotonic() + 30  # generous under load; a pass ends it early
        while len(fake_llm.ends) < 4 and time.monotonic() < deadline:  # the fallback listener is late
            ending.flush(1.0)
    finally:
        uninstrument()
    runs: dict[str, tuple[set, list]] = {}
    for req in fake_llm.requests:
        wf, agent, step, _ = fake_llm.hints_of(req)
        assert wf
        text = " ".join(str(m.get("content")) for m in req.body["messages"])
        questions, steps = runs.setdefault(wf, (set(), []))
        questions.update(re.findall(r"question-(\d)", text))
        steps.append((step, agent))
    assert sorted(q for qs, _ in runs.values() for q in qs) == ["0", "1", "2", "3"]
    assert all(len(qs) == 1 for qs, _ in runs.values())
    for _, steps in runs.values():
        assert sorted(s for s, _ in steps) == [0, 1, 2]  # no gap, no duplicate
        assert sorted(a for _, a in steps) == ["Role A", "Role B", "Role C"]
    assert sorted(w for w, _, _ in fake_llm.ends) == sorted(runs)


# --------------------------------------------------------------------------- case 15


def _add_tool_script(body: dict, n: int):
    """First an add(5, 3) tool call (native tools, or CrewAI's ReAct text without them), then the answer."""
    messages = body["messages"]
    done = any(m.get("role") == "tool" for m in messages) or any("Observation:" in str(m.get("content")) for m in messages[1:])
    if done:
        return "8" if body.get("tools") else "Thought: I know the sum\nFinal Answer: 8"
    if body.get("tools"):
        return {"content": None, "tool_calls": [fake_openai.tool_call("add", {"a": 5, "b": 3}, "call-add")]}
    return 'Thought: I should add\nAction: add\nAction Input: {"a": 5, "b": 3}'


def _adder_crew(base_url: str, calls: list):
    from crewai import LLM, Agent, Crew, Task
    from crewai.tools import tool

    @tool("add")
    def add(a: int, b: int) -> int:
        """Add two integers."""
        calls.append((a, b))
        return a + b

    llm = LLM(model="openai/m", base_url=base_url, api_key="x", max_retries=0)
    agent = Agent(role="Calculator", goal="Add numbers", backstory="Careful.", llm=llm, tools=[add])
    return Crew(agents=[agent], tasks=[Task(description="What is 5 + 3?", expected_output="The sum.", agent=agent)])


def test_case15_instrumenting_crewai_changes_no_message_no_response_and_no_tool_call(fake_llm, tmp_path):
    from pbkv_sdk.integrations.crewai import instrument, uninstrument

    fake_llm.reply_fn = _add_tool_script
    plain_calls: list = []
    plain = _adder_crew(fake_llm.base_url, plain_calls).kickoff()
    plain_bodies = [r.body for r in fake_llm.requests]
    fake_llm.requests.clear()
    trace = tmp_path / "t.jsonl"
    instrument(app="calc", server_url=fake_llm.url, trace_path=trace)
    try:
        pbkv_calls: list = []
        with_pbkv = _adder_crew(fake_llm.base_url, pbkv_calls).kickoff()
    finally:
        uninstrument()
    assert plain.raw == with_pbkv.raw == "8" and plain_calls == pbkv_calls == [(5, 3)]  # the tool ran once, gave 8
    assert [r.body for r in fake_llm.requests] == plain_bodies  # PBKV changed no message
    assert flush_all(10.0)
    invs = [r for r in iter_trace(trace, strict=True) if isinstance(r, InvocationRecord)]
    assert [(r.step, r.agent) for r in invs] == [(0, "Calculator"), (1, "Calculator")]


# --------------------------------------------------------------------------- case 16

TARGET = Path(__file__).with_name("record_target.py")


class _BlackHole:
    """A loopback listener that accepts connections and never answers (or, ``full``, never accepts)."""

    def __init__(self, full: bool = False):
        import socket
        import threading

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(0 if full else 64)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.held: list = []
        self.fillers: list = []
        if full:  # fill the accept queue so that further connects hang in the handshake
            for _ in range(4):
                filler = socket.socket()
                filler.setblocking(False)
                filler.connect_ex(self.sock.getsockname())
                self.fillers.append(filler)
        else:
            threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        try:
            while True:
                self.held.append(self.sock.accept()[0])
        except OSError:
            pass

    def close(self) -> None:
        for s in self.held + self.fillers + [self.sock]:
            s.close()


@pytest.mark.slow
def test_case16_a_silent_end_endpoint_costs_one_timeout_at_exit_and_one_warning(fake_llm):
    import subprocess
    import sys

    hole = _BlackHole()
    try:
        env = dict(os.environ, PBKV_SERVER_URL=hole.url, PBKV_END_TIMEOUT_S="1.0")
        proc = subprocess.Popen([sys.executable, str(TARGET), "mixed", fake_llm.base_url, "20"], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        done_line = proc.stdout.readline()
        t_done = time.time()
        _, stderr = proc.communicate(timeout=300)
        t_exit = time.time()
    finally:
        hole.close()
    assert proc.returncode == 0 and done_line.startswith("app done"), stderr
    # every workflow completed: claim i runs 1 + i % 2 rounds of 6 calls; each kickoff makes 2
    assert len(fake_llm.requests) == sum(6 * (1 + i % 2) for i in range(20)) + 5 * 2
    assert len(hole.held) >= 1  # the end signals did reach the silent peer
    # Exit waits one end timeout in total (1 s), not one per pending end (25 ends on 4 sender
    # threads would take about 7 s). Timed by the app itself, from its last line to the end of its
    # exit handlers: the interpreter teardown after them (1-2 s with CrewAI loaded, more on a
    # loaded machine) is not the SDK's.
    t_app_done = float(done_line.split()[-1])
    t_handlers = float(next(line for line in stderr.splitlines() if line.startswith("exit handlers done")).split()[-1])
    assert t_handlers - t_app_done < 1.0 + 1.5
    assert t_exit >= t_done
    warnings = [line for line in stderr.splitlines() if "PBKV end signal" in line]
    assert len(warnings) == 1, stderr


def test_case16_an_end_endpoint_with_a_full_backlog_never_delays_the_workflows(fake_llm, caplog):
    import logging

    from pbkv_sdk.integrations.langchain import instrument, uninstrument

    from .apps import build_langgraph_app

    hole = _BlackHole(full=True)
    graph = build_langgraph_app(fake_llm.base_url)
    instrument(app="claims", server_url=hole.url, end_timeout_s=0.3)
    try:
        with caplog.at_level(logging.WARNING, logger="pbkv_sdk"):
            for i in range(20):
                assert graph.invoke({"claim": f"f{i}", "max_rounds": 1})["round"] == 1
            ending.flush(10.0)
    finally:
        uninstrument()
        hole.close()
    assert len(fake_llm.requests) == 20 * 6
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("pbkv_sdk")]
    assert len(warnings) == 1 and "end signal" in warnings[0].getMessage()


@pytest.mark.slow
def test_case16_record_switches_crewai_telemetry_off_so_the_app_opens_no_outside_socket(fake_llm, tmp_path, monkeypatch):
    import sys

    from typer.testing import CliRunner

    from pbkv_sdk.cli import app

    for name in ("CREWAI_DISABLE_TELEMETRY", "CREWAI_DISABLE_TRACKING", "OTEL_SDK_DISABLED", "CREWAI_TRACING_ENABLED"):
        monkeypatch.delenv(name, raising=False)
    guard = tmp_path / "guard"
    guard.mkdir()
    log_path = tmp_path / "outside.log"
    # sitecustomize runs first in the app's interpreter: log (and refuse) every connect or DNS lookup off loopback
    (guard / "sitecustomize.py").write_text(
        "import socket\n"
        f"LOG = {str(log_path)!r}\n"
        "def _bad(host):\n"
        "    host = host.decode() if isinstance(host, bytes) else str(host)\n"
        "    return host not in ('127.0.0.1', 'localhost', '::1', '', 'None')\n"
        "_connect, _gai = socket.socket.connect, socket.getaddrinfo\n"
        "def connect(self, address):\n"
        "    if self.family in (socket.AF_INET, socket.AF_INET6) and _bad(address[0]):\n"
        "        open(LOG, 'a').write(f'connect {address!r}\\n'); raise OSError('no network')\n"
        "    return _connect(self, address)\n"
        "def getaddrinfo(host, *a, **k):\n"
        "    if _bad(host):\n"
        "        open(LOG, 'a').write(f'dns {host!r}\\n'); raise socket.gaierror('no network')\n"
        "    return _gai(host, *a, **k)\n"
        "socket.socket.connect, socket.getaddrinfo = connect, getaddrinfo\n"
    )
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(guard), os.environ.get("PYTHONPATH", "")]))
    out = tmp_path / "run.jsonl"
    result = CliRunner().invoke(app, ["record", "--out", str(out), "--server-url", fake_llm.url, "--",
                                      sys.executable, str(TARGET), "crewai", fake_llm.base_url, "2"])
    assert result.exit_code == 0, result.output
    assert len(fake_llm.requests) == 4
    assert not log_path.exists(), log_path.read_text()
