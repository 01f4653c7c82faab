"""Every run-control path of every integration, run with the real framework against pbkv-server.

Usage: ``python -m tests.sdk.framework_paths [--only FRAMEWORK ...]`` prints one table row per
path: what the README's lifecycle table promises and what happened. Each app is written without
PBKV (``tests/sdk/apps.py`` and the small apps below); the README's one line is added per
framework. Observations come from outside the SDK:

* stamped: pbkv-server's own verdict on each LLM request (response header ``X-PBKV-Hints``:
  ``ok`` or ``anonymous``), read by a wrapper on httpx's transport put on top of PBKV's;
* ends: the end-signal POSTs that left the process (workflow id and status), and the server's
  ``pbkv_workflow_ends_total{source="client"}`` counter;
* workflows: the distinct ``X-PBKV-Workflow-Id`` values of the LLM requests.

A row passes when every request reaching the server was stamped, each workflow got exactly the
ends listed as expected (none while paused), and the server counted the same ends.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import re
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

import httpx

os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")

from pbkv_sdk import ending  # noqa: E402

from .apps import build_crewai_crew, build_langgraph_app  # noqa: E402
from .settle import settle_ends  # noqa: E402

_END_RE = re.compile(r"/pbkv/v1/workflows/([^/]+)/end$")


@dataclass
class Observed:
    """What left the process during one path."""

    hints: list[tuple[str | None, str]] = field(default_factory=list)  # (workflow id sent, server verdict)
    ends: list[tuple[str, str]] = field(default_factory=list)  # (workflow id, status)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def summary(self) -> tuple[str, dict[str, int], bool]:
        """(one-line description, end statuses counted per workflow, every workflow ended at most once)."""
        stamped = sum(v == "ok" for _, v in self.hints)
        workflows = {w for w, _ in self.hints if w}
        per_wf = collections.Counter(w for w, _ in self.ends)
        statuses = collections.Counter(s for _, s in self.ends)
        ends = ", ".join(f"{n} {s}" for s, n in sorted(statuses.items())) or "no end"
        text = f"{stamped}/{len(self.hints)} stamped, {len(workflows)} workflow(s), {ends}"
        return text, dict(statuses), all(n == 1 for n in per_wf.values())


class _Watch:
    """Wraps httpx's transport (on top of PBKV's wrapper) to see requests and the server's verdicts."""

    def __init__(self) -> None:
        #: What the path now running sent; replaced before each path.
        self.current = Observed()
        self._original = httpx.HTTPTransport.handle_request
        watch = self
        original = self._original

        def handle_request(transport, request):
            response = original(transport, request)
            end = _END_RE.search(request.url.path)
            with watch.current.lock:
                if end:
                    watch.current.ends.append((end.group(1), json.loads(request.content)["status"]))
                elif request.url.path.endswith("/chat/completions"):
                    watch.current.hints.append((request.headers.get("x-pbkv-workflow-id"), response.headers.get("x-pbkv-hints", "?")))
            return response

        handle_request.__wrapped__ = original  # type: ignore[attr-defined]
        httpx.HTTPTransport.handle_request = handle_request
        self._async_original = httpx.AsyncHTTPTransport.handle_async_request
        async_original = self._async_original

        async def handle_async_request(transport, request):
            response = await async_original(transport, request)
            if request.url.path.endswith("/chat/completions"):
                with watch.current.lock:
                    watch.current.hints.append((request.headers.get("x-pbkv-workflow-id"), response.headers.get("x-pbkv-hints", "?")))
            return response

        handle_async_request.__wrapped__ = async_original  # type: ignore[attr-defined]
        httpx.AsyncHTTPTransport.handle_async_request = handle_async_request

    def close(self) -> None:
        """Put httpx's methods back (call after PBKV released its patch on top of ours)."""
        httpx.HTTPTransport.handle_request = self._original
        httpx.AsyncHTTPTransport.handle_async_request = self._async_original


# --------------------------------------------------------------------------- the paths


async def _cancel_after_first_request(coro: Any, timeout_s: float = 10.0) -> None:
    """Run ``coro`` as a task and cancel it once the path's first LLM request was answered."""
    task = asyncio.create_task(coro)
    deadline = time.monotonic() + timeout_s
    while not _WATCH.current.hints and time.monotonic() < deadline:
        await asyncio.sleep(0.001)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def _langgraph_paths(base: str) -> list:
    from langchain_openai import ChatOpenAI
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.types import Command, interrupt

    from pbkv_sdk.integrations.langchain import instrument

    instrument(app="lg")
    v1 = base + "/v1"

    def hitl():
        llm = ChatOpenAI(model="m", base_url=v1, api_key="x", max_retries=0)
        g = StateGraph(MessagesState)
        g.add_node("writer", lambda s: {"messages": [llm.invoke(s["messages"])]})
        g.add_node("approve", lambda s: {"messages": [("user", interrupt("ok?"))]})
        g.add_node("finalize", lambda s: {"messages": [llm.invoke(s["messages"])]})
        g.add_edge(START, "writer")
        g.add_edge("writer", "approve")
        g.add_edge("approve", "finalize")
        g.add_edge("finalize", END)
        return g.compile(checkpointer=InMemorySaver())

    def raising():
        llm = ChatOpenAI(model="m", base_url=v1, api_key="x", max_retries=0)

        def checker(state):
            llm.invoke(state["messages"])
            raise ValueError("checker found a contradiction")

        g = StateGraph(MessagesState)
        g.add_node("checker", checker)
        g.add_edge(START, "checker")
        g.add_edge("checker", END)
        return g.compile()

    def invoke():
        build_langgraph_app(v1).invoke({"claim": "c", "max_rounds": 1})

    def astream():
        graph = build_langgraph_app(v1, async_nodes=True, streaming=True)

        async def run():
            return [c async for c in graph.astream({"claim": "c", "max_rounds": 1})]

        asyncio.run(run())

    def concurrent():
        graph = build_langgraph_app(v1, async_nodes=True)

        async def run():
            await asyncio.gather(*(graph.ainvoke({"claim": f"c{i}", "max_rounds": 1}) for i in range(4)))

        sync_graph = build_langgraph_app(v1)
        with ThreadPoolExecutor(2) as pool:
            futures = [pool.submit(sync_graph.invoke, {"claim": f"t{i}", "max_rounds": 1}) for i in range(2)]
            asyncio.run(run())
            [f.result() for f in futures]

    def pause():
        hitl().invoke({"messages": [("user", "draft")]}, {"configurable": {"thread_id": "p1"}})

    def pause_resume():
        graph, config = hitl(), {"configurable": {"thread_id": "p2"}}
        graph.invoke({"messages": [("user", "draft")]}, config)
        graph.invoke(Command(resume="approved"), config)

    def break_resume():
        # LangGraph's examples: leave the stream at the __interrupt__ event, then resume
        graph, config = hitl(), {"configurable": {"thread_id": "p4"}}
        for chunk in graph.stream({"messages": [("user", "draft")]}, config):
            if "__interrupt__" in chunk:
                break
        graph.invoke(Command(resume="approved"), config)

    def abreak_resume():
        graph, config = hitl(), {"configurable": {"thread_id": "p5"}}

        async def run():
            async for chunk in graph.astream({"messages": [("user", "draft")]}, config):
                if "__interrupt__" in chunk:
                    break
            await graph.ainvoke(Command(resume="approved"), config)

        asyncio.run(run())

    def restart():
        graph, config = hitl(), {"configurable": {"thread_id": "p3"}}
        graph.invoke({"messages": [("user", "draft")]}, config)
        graph.invoke({"messages": [("user", "another draft")]}, config)

    def cancel():
        # its own base URL: langchain-openai shares one default async httpx client per URL, and
        # the earlier paths' event loops are closed
        graph = build_langgraph_app(v1 + "/", async_nodes=True)

        async def run():
            await _cancel_after_first_request(graph.ainvoke({"claim": "c", "max_rounds": 3}))

        asyncio.run(run())

    def abandon():
        for _ in build_langgraph_app(v1).stream({"claim": "c", "max_rounds": 1}):
            break

    def fail():
        try:
            raising().invoke({"messages": [("user", "x")]})
        except ValueError:
            pass

    return [
        ("invoke", "1 workflow, 1 completed", invoke, {"completed": 1}),
        ("astream, async nodes, SSE", "1 workflow, 1 completed", astream, {"completed": 1}),
        ("4 ainvoke + 2 invoke threads", "6 workflows, 6 completed", concurrent, {"completed": 6}),
        ("interrupt (human in the loop)", "paused: no end", pause, {}),
        ("interrupt, then Command(resume)", "same id, 1 completed", pause_resume, {"completed": 1}),
        ("interrupt, then new input on the thread", "1 cancelled, new run paused", restart, {"cancelled": 1}),
        ("stream left at __interrupt__, then resume", "same id, 1 completed", break_resume, {"completed": 1}),
        ("astream left at __interrupt__, then resume", "same id, 1 completed", abreak_resume, {"completed": 1}),
        ("task cancelled mid-run", "1 cancelled", cancel, {"cancelled": 1}),
        ("stream abandoned after 1 chunk", "1 cancelled", abandon, {"cancelled": 1}),
        ("node raises", "1 failed", fail, {"failed": 1}),
    ]


def _autogen_paths(base: str) -> list:
    from autogen_core import CancellationToken

    from .apps import AUTOGEN_AGENTS, build_autogen_team

    # The server's selector answers are drawn per workflow id: waiting for one given agent (say
    # the planner) would let about 1 run in 50 reach max_turns before it speaks, and complete.
    v1 = base + "/v1"

    def run():
        asyncio.run(build_autogen_team(v1, max_turns=2).run(task="fix bug 1"))

    def run_stream():
        async def go():
            return [m async for m in build_autogen_team(v1, max_turns=2, streaming=True).run_stream(task="fix bug 2")]

        asyncio.run(go())

    def reset_rerun():
        async def go():
            team = build_autogen_team(v1, max_turns=2)
            await team.run(task="fix bug 3")
            await team.reset()
            await team.run(task="fix bug 4")

        asyncio.run(go())

    def cancel():
        async def go():
            token = CancellationToken()
            stream = build_autogen_team(v1, max_turns=6).run_stream(task="fix bug 5", cancellation_token=token)
            try:
                async for message in stream:
                    if getattr(message, "source", "") in AUTOGEN_AGENTS:  # the first agent message
                        token.cancel()
            except asyncio.CancelledError:
                pass

        asyncio.run(go())

    def close_early():
        async def go():
            stream = build_autogen_team(v1, max_turns=6).run_stream(task="fix bug 6")
            async for message in stream:
                if getattr(message, "source", "") in AUTOGEN_AGENTS:  # the first agent message
                    break
            await stream.aclose()

        asyncio.run(go())

    def fail():
        from autogen_agentchat.agents import AssistantAgent, BaseChatAgent
        from autogen_agentchat.conditions import MaxMessageTermination
        from autogen_agentchat.teams import RoundRobinGroupChat
        from autogen_ext.models.openai import OpenAIChatCompletionClient

        from pbkv_sdk.integrations.autogen import instrument_team

        class Reviewer(BaseChatAgent):
            """A participant whose own code raises (after the first agent's LLM call was served)."""

            produced_message_types = ()

            async def on_messages(self, messages, cancellation_token):
                raise RuntimeError("review tool crashed")

            async def on_reset(self, cancellation_token):
                pass

        info = {"vision": False, "function_calling": False, "json_output": False, "structured_output": False, "family": "unknown"}
        client = OpenAIChatCompletionClient(model="m", base_url=v1, api_key="x", max_retries=0, model_info=info)
        team = RoundRobinGroupChat([AssistantAgent("coder", model_client=client), Reviewer("reviewer", "reviews")],
                                   termination_condition=MaxMessageTermination(4))

        async def go():
            try:
                await instrument_team(team, app="swe").run(task="fix bug 7")
            except RuntimeError as exc:  # the team re-raises the participant's error; anything else is a bug
                if "review tool crashed" not in str(exc):
                    raise

        asyncio.run(go())

    return [
        ("run (max turns reached)", "1 workflow, 1 completed", run, {"completed": 1}),
        ("run_stream, streaming model", "1 workflow, 1 completed", run_stream, {"completed": 1}),
        ("reset, then run again", "2 workflows, 2 completed", reset_rerun, {"completed": 2}),
        ("CancellationToken fired", "1 cancelled", cancel, {"cancelled": 1}),
        ("run_stream closed early", "1 cancelled", close_early, {"cancelled": 1}),
        ("a participant raises", "1 failed", fail, {"failed": 1}),
    ]


def _crewai_paths(base: str) -> list:
    from crewai import LLM, Agent, Crew, Task

    from pbkv_sdk.integrations.crewai import instrument

    instrument(app="crew")
    v1 = base + "/v1"

    def crew(async_tasks: bool = False) -> Crew:
        if not async_tasks:
            return build_crewai_crew(v1, app=None)
        llm = LLM(model="openai/m", base_url=v1, api_key="x", max_retries=0)
        agents = [Agent(role=f"Role {k}", goal="g", backstory="b", llm=llm) for k in "ABC"]
        tasks = [Task(description=f"question-1 part {k}", expected_output="x", agent=a, async_execution=k != "C")
                 for k, a in zip("ABC", agents)]
        return Crew(agents=agents, tasks=tasks)

    def kickoff():
        crew().kickoff(inputs={"question": "question-1"})

    def kickoff_async():
        asyncio.run(crew().kickoff_async(inputs={"question": "question-2"}))

    def akickoff():
        async def go():
            await asyncio.gather(*(crew().akickoff(inputs={"question": f"question-{i}"}) for i in range(3)))

        asyncio.run(go())

    def async_tasks():
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda _: crew(async_tasks=True).kickoff(), range(2)))

    def cancel():
        async def go():
            await _cancel_after_first_request(crew().akickoff(inputs={"question": "question-9"}))

        asyncio.run(go())

    def fail():
        def broken_callback(output):
            raise RuntimeError("the report store is down")

        failing = crew()
        failing.tasks[0].callback = broken_callback  # app code that raises after the first task
        try:
            failing.kickoff(inputs={"question": "question-8"})
        except RuntimeError:
            pass

    return [
        ("kickoff", "1 workflow, 1 completed", kickoff, {"completed": 1}),
        ("kickoff_async", "1 workflow, 1 completed", kickoff_async, {"completed": 1}),
        ("3 concurrent akickoff", "3 workflows, 3 completed", akickoff, {"completed": 3}),
        ("async_execution tasks, 2 threads", "2 workflows, 2 completed", async_tasks, {"completed": 2}),
        ("akickoff task cancelled", "1 cancelled", cancel, {"cancelled": 1}),
        ("a task callback raises", "1 failed", fail, {"failed": 1}),
    ]


def _agents_sdk_paths(base: str) -> list:
    from agents import (Agent, GuardrailFunctionOutput, OpenAIChatCompletionsModel, OutputGuardrailTripwireTriggered,
                        Runner, output_guardrail, set_trace_processors)
    from openai import AsyncOpenAI

    from pbkv_sdk.integrations.openai_agents import instrument

    set_trace_processors([])  # no export to api.openai.com from this offline measurement
    instrument(app="agents")

    @output_guardrail
    async def reject(ctx, agent, output):
        return GuardrailFunctionOutput(output_info="rejected", tripwire_triggered=True)

    @output_guardrail
    async def slow_review(ctx, agent, output):
        # A slow check of the answer (a moderation call, say): the run is still going when the
        # cancel comes; without it a one-call run may finish before the cancelling task runs.
        await asyncio.sleep(5)
        return GuardrailFunctionOutput(output_info="fine", tripwire_triggered=False)

    def agent(*guardrails: Any) -> Agent:
        model = OpenAIChatCompletionsModel("m", AsyncOpenAI(base_url=base + "/v1", api_key="x", max_retries=0))
        return Agent(name="Assistant", instructions="You are helpful.", model=model, output_guardrails=list(guardrails))

    def run_sync():
        Runner.run_sync(agent(), "hello")

    def concurrent():
        async def go():
            await asyncio.gather(*(Runner.run(agent(), f"q{i}") for i in range(3)))

        asyncio.run(go())

    def streamed():
        async def go():
            result = Runner.run_streamed(agent(), "hello")
            async for _ in result.stream_events():
                pass

        asyncio.run(go())

    def untraced():
        from agents import set_tracing_disabled

        set_tracing_disabled(True)  # common in production: the SDK then calls no trace processor
        try:
            Runner.run_sync(agent(), "hello")
        finally:
            set_tracing_disabled(False)

    def cancel():
        async def go():
            await _cancel_after_first_request(Runner.run(agent(slow_review), "hello"))

        asyncio.run(go())

    def fail():
        try:
            Runner.run_sync(agent(reject), "hello")
        except OutputGuardrailTripwireTriggered:  # the expected failure; anything else is a bug
            pass

    return [
        ("Runner.run_sync", "1 workflow, 1 completed", run_sync, {"completed": 1}),
        ("3 concurrent Runner.run", "3 workflows, 3 completed", concurrent, {"completed": 3}),
        ("Runner.run_streamed", "1 workflow, 1 completed", streamed, {"completed": 1}),
        ("Runner.run_sync, tracing disabled", "1 workflow, 1 completed", untraced, {"completed": 1}),
        ("run task cancelled", "1 cancelled", cancel, {"cancelled": 1}),
        ("output guardrail trips", "1 failed", fail, {"failed": 1}),
    ]


def _otel_paths(base: str) -> list:
    import openai
    from opentelemetry.sdk.trace import TracerProvider

    from pbkv_sdk.integrations.otel import instrument

    os.environ.pop("OTEL_SDK_DISABLED", None)
    provider = TracerProvider()
    instrument(app="otel", tracer_provider=provider)
    tracer = provider.get_tracer("app")

    def team(client, task: str, fail: bool = False):
        with tracer.start_as_current_span("invoke_agent team", attributes={"gen_ai.operation.name": "invoke_agent",
                                                                          "gen_ai.conversation.id": task}):
            for name in ("planner", "coder"):
                with tracer.start_as_current_span(f"invoke_agent {name}", attributes={"gen_ai.agent.name": name}):
                    client.chat.completions.create(model="m", messages=[{"role": "user", "content": f"{task} {name}"}])
                if fail:
                    raise RuntimeError("tool crashed")

    def threads():
        client = openai.OpenAI(base_url=base + "/v1", api_key="x", max_retries=0)
        with ThreadPoolExecutor(3) as pool:
            list(pool.map(lambda i: team(client, f"t{i}"), range(3)))

    def fail():
        try:
            team(openai.OpenAI(base_url=base + "/v1", api_key="x", max_retries=0), "f", fail=True)
        except RuntimeError:
            pass

    def cancel():
        async def run():
            client = openai.AsyncOpenAI(base_url=base + "/v1", api_key="x", max_retries=0)
            with tracer.start_as_current_span("invoke_agent a", attributes={"gen_ai.agent.name": "a"}):
                await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
                await asyncio.sleep(5)

        async def go():
            await _cancel_after_first_request(run())

        asyncio.run(go())

    return [
        ("GenAI agent spans, 3 threads", "3 workflows, 3 completed", threads, {"completed": 3}),
        ("run raises inside the agent span", "1 failed", fail, {"failed": 1}),
        ("run task cancelled", "1 cancelled", cancel, {"cancelled": 1}),
    ]


FRAMEWORKS: dict[str, Callable[[str], list]] = {
    "LangGraph": _langgraph_paths,
    "AutoGen": _autogen_paths,
    "CrewAI": _crewai_paths,
    "OpenAI Agents SDK": _agents_sdk_paths,
    "OpenTelemetry app": _otel_paths,
}
_WATCH: _Watch


def run_paths(only: list[str] | None = None, report: Callable[[tuple], None] = lambda row: None) -> list[tuple[str, str, str, str, bool]]:
    """Run the paths against a fresh pbkv-server; returns ``(framework, path, expected, observed, ok)`` rows.

    ``report`` is called with each row as soon as its path has run.
    """
    global _WATCH
    from pbkv_server.http import ServerConfig, run_in_thread

    rows = []
    with run_in_thread(ServerConfig(port=0, policy="lru")) as server:
        _WATCH = _Watch()
        try:
            _run(server, only, rows, report)
        finally:
            _uninstrument_all()
            _WATCH.close()
    return rows


def _uninstrument_all() -> None:
    """Undo every integration this module instrumented, then PBKV's transport patch."""
    from pbkv_sdk import autopatch

    for name in ("langchain", "crewai", "openai_agents", "otel", "autogen"):
        module = sys.modules.get(f"pbkv_sdk.integrations.{name}")
        if module is not None:
            module.uninstrument()
    for holder in autopatch.holders():
        autopatch.release(holder)


def _run(server: Any, only: list[str] | None, rows: list, report: Callable[[tuple], None]) -> None:
    """Run each selected path in turn, appending its row."""
    for framework, paths in FRAMEWORKS.items():
        if only and framework not in only:
            continue
        for name, expected, fn, want in paths(server.url):
            before = _server_ends(server)
            _WATCH.current = Observed()
            fn()
            ending.flush(10.0)
            # CrewAI's fallback listener may end a kickoff late, and so may any path on a loaded
            # machine (CI beside two CPU-bound jobs once saw the sixth end of "4 ainvoke + 2
            # invoke threads" reach the server after a 5 s wait); a path whose ends all came
            # leaves the loop at once
            deadline = time.monotonic() + 20
            while sum(want.values()) > len(_WATCH.current.ends) and time.monotonic() < deadline:
                time.sleep(0.05)
                ending.flush(1.0)
            settle_ends(5.0)  # every end the path will ever send has arrived (duplicates included)
            text, statuses, once = _WATCH.current.summary()
            server_ends = {k: v - before.get(k, 0) for k, v in _server_ends(server).items() if v - before.get(k, 0)}
            stamped_all = all(v == "ok" for _, v in _WATCH.current.hints)
            ok = stamped_all and once and statuses == want and server_ends == want
            rows.append((framework, name, expected, text + ("" if server_ends == statuses else f" (server: {server_ends})"), ok))
            report(rows[-1])


def _server_ends(server: Any) -> dict[str, int]:
    text = httpx.get(server.url + "/metrics", timeout=30).text
    out: dict[str, int] = {}
    for match in re.finditer(r'pbkv_workflow_ends_total\{([^}]*)\} (\S+)', text):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1)))
        if labels.get("source") == "client":
            out[labels["status"]] = int(float(match.group(2)))
    return out


def main() -> None:
    """Print the table (markdown) and exit 1 if any row failed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", choices=sorted(FRAMEWORKS), help="frameworks to run (default: all)")
    args = parser.parse_args()
    t0 = time.time()
    print("| framework | path | expected | observed | ok |")
    print("|---|---|---|---|---|", flush=True)

    def report(row: tuple) -> None:
        framework, name, expected, observed, ok = row
        print(f"| {framework} | {name} | {expected} | {observed} | {'yes' if ok else 'NO'} |", flush=True)

    rows = run_paths(args.only, report)
    print(f"\n{sum(r[4] for r in rows)}/{len(rows)} paths as expected, {time.time() - t0:.0f} s")
    sys.exit(0 if all(r[4] for r in rows) else 1)


if __name__ == "__main__":
    main()
