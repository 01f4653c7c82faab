"""OpenAI Agents SDK with the PBKV tracing processor, against the scripted fake server: one
workflow per run, the calling agent's name across handoffs and tools, and one end per run, with
the Agents SDK's tracing on and with it disabled (``agents.set_tracing_disabled(True)``)."""

from __future__ import annotations

import asyncio

import pytest

from pbkv_sdk import ending
from pbkv_sdk.recorder import flush_all
from pbkv_contract.trace import InvocationRecord, WorkflowEndRecord, iter_trace

from .cancel import cancel_after
from .fake_openai import FakeOpenAI, tool_call

agents = pytest.importorskip("agents")


def _script(body: dict, n: int):
    """Triage hands off to Billing; Billing calls add(5, 3) once, then answers with the sum."""
    messages = body["messages"]
    system = messages[0]["content"] if messages and messages[0]["role"] == "system" else ""
    tool_results = [m for m in messages if m["role"] == "tool"]
    if "triage" in system:
        return {"content": None, "tool_calls": [tool_call("transfer_to_billing", {}, f"h{n}")]}
    if "billing" in system:
        if not any(m["content"] == "8" for m in tool_results):
            return {"content": None, "tool_calls": [tool_call("add", {"a": 5, "b": 3}, f"t{n}")]}
        return "The total is 8."
    if "failing" in system:
        return {"content": None, "tool_calls": [tool_call("no_such_tool", {}, f"x{n}")]}
    return "ok"


class _Exporter:
    """The app's own trace processor: what the Agents SDK exports (nothing while tracing is disabled)."""

    def __init__(self):
        self.events: list[str] = []

    def on_trace_start(self, trace):
        self.events.append("trace")

    def on_trace_end(self, trace):
        self.events.append("trace_end")

    def on_span_start(self, span):
        self.events.append("span")

    def on_span_end(self, span):
        self.events.append("span_end")

    def shutdown(self):
        pass

    def force_flush(self):
        pass


@pytest.fixture(params=["traced", "untraced"])
def tracing(request):
    """``"traced"``: the Agents SDK's default; ``"untraced"``: ``agents.set_tracing_disabled(True)``
    (common in production), so the SDK calls no trace processor."""
    agents.set_tracing_disabled(request.param == "untraced")
    yield request.param
    agents.set_tracing_disabled(False)


@pytest.fixture
def agent_app(fake_llm: FakeOpenAI, tmp_path, tracing):
    """The app as written without PBKV (triage -> billing with an add tool), plus the README line."""
    from agents import Agent, OpenAIChatCompletionsModel, function_tool, set_trace_processors
    from openai import AsyncOpenAI

    from pbkv_sdk.integrations.openai_agents import instrument, uninstrument

    exporter = _Exporter()
    set_trace_processors([exporter])  # replaces the default exporter, which would post to api.openai.com
    fake_llm.reply_fn = _script
    calls: list[tuple[int, int]] = []

    @function_tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        calls.append((a, b))
        return a + b

    def build(name: str = "Triage") -> "Agent":
        """The entry agent, with a fresh client (an AsyncOpenAI client is bound to one event loop)."""
        model = OpenAIChatCompletionsModel("m", AsyncOpenAI(base_url=fake_llm.base_url, api_key="x", max_retries=0))
        billing = Agent(name="Billing", instructions="You are the billing agent.", model=model, tools=[add])
        if name == "Broken":
            return Agent(name="Broken", instructions="You are the failing agent.", model=model)
        return Agent(name="Triage", instructions="You are the triage agent.", model=model,
                     handoffs=[agents.handoff(billing, tool_name_override="transfer_to_billing")])

    trace = tmp_path / "t.jsonl"
    instrument(app="support", server_url=fake_llm.url, trace_path=trace)
    yield build, calls, trace
    uninstrument()
    set_trace_processors([])
    if tracing == "untraced":  # the shadows PBKV sees untraced runs through export nothing
        assert exporter.events == []


def _wire(fake: FakeOpenAI) -> dict[str, list[tuple[int, str]]]:
    out: dict[str, list] = {}
    for req in fake.requests:
        wf, agent, step, app = fake.hints_of(req)
        assert app == "support" and wf is not None and wf.startswith("trace_")
        out.setdefault(wf, []).append((step, agent))
    return {wf: sorted(steps) for wf, steps in out.items()}


def test_a_run_with_a_handoff_and_a_tool_is_one_workflow_named_by_the_calling_agent(fake_llm, agent_app):
    from agents import Runner

    build, calls, trace = agent_app
    result = Runner.run_sync(build(), "What is 5 + 3?")
    assert result.final_output == "The total is 8." and calls == [(5, 3)]
    assert ending.flush(5.0) and flush_all(10.0)
    [(wf, steps)] = _wire(fake_llm).items()
    assert steps == [(0, "Triage"), (1, "Billing"), (2, "Billing")]
    assert [(w, s) for w, s, _ in fake_llm.ends] == [(wf, "completed")]
    records = list(iter_trace(trace, strict=True))
    assert [(r.step, r.agent) for r in records if isinstance(r, InvocationRecord)] == steps
    assert isinstance(records[-1], WorkflowEndRecord) and records[-1].workflow_id == wf


def test_concurrent_and_streamed_runs_are_separate_workflows_each_ended_once(fake_llm, agent_app):
    from agents import Runner

    build, _, _ = agent_app

    async def streamed():
        triage = build()
        result = Runner.run_streamed(triage, "What is 5 + 3?")
        async for _ in result.stream_events():
            pass
        return result.final_output

    async def main():
        return await asyncio.gather(*(Runner.run(build(), f"sum {i}") for i in range(3)), streamed())

    outputs = asyncio.run(main())
    assert [o if isinstance(o, str) else o.final_output for o in outputs] == ["The total is 8."] * 4
    assert ending.flush(5.0)
    runs = _wire(fake_llm)
    assert len(runs) == 4
    assert all(steps == [(0, "Triage"), (1, "Billing"), (2, "Billing")] for steps in runs.values())
    assert sorted((w, s) for w, s, _ in fake_llm.ends) == sorted((w, "completed") for w in runs)


def test_a_failing_run_ends_failed_and_a_cancelled_one_cancelled(fake_llm, agent_app):
    from agents import Runner

    build, _, _ = agent_app
    with pytest.raises(Exception):
        Runner.run_sync(build("Broken"), "go")  # the model calls a tool that does not exist

    fake_llm.reply_delay_s = 0.5
    asyncio.run(cancel_after(Runner.run(build(), "slow"), 0.3))
    assert ending.flush(5.0)
    assert sorted(s for _, s, _ in fake_llm.ends) == ["cancelled", "failed"]


def test_a_run_with_tracing_disabled_in_its_run_config_is_stamped_like_a_traced_one(fake_llm, agent_app):
    from agents import RunConfig, Runner

    build, calls, _ = agent_app
    result = Runner.run_sync(build(), "What is 5 + 3?", run_config=RunConfig(tracing_disabled=True))
    assert result.final_output == "The total is 8."
    assert ending.flush(5.0)
    [(wf, steps)] = _wire(fake_llm).items()
    assert steps == [(0, "Triage"), (1, "Billing"), (2, "Billing")]
    assert [(w, s) for w, s, _ in fake_llm.ends] == [(wf, "completed")]


def test_a_trace_provider_replaced_after_instrument_leaves_untraced_runs_unstamped_with_one_warning(
        fake_llm, agent_app, tracing, caplog):
    from agents import Runner
    from agents.tracing import get_trace_provider, set_trace_provider

    build, _, _ = agent_app
    wrapper = get_trace_provider()
    set_trace_provider(wrapper.inner)  # the app installs a provider of its own after instrument()
    try:
        with caplog.at_level("WARNING", logger="pbkv_sdk.integrations.openai_agents"):
            Runner.run_sync(build(), "What is 5 + 3?")
            Runner.run_sync(build(), "What is 5 + 3?")
    finally:
        set_trace_provider(wrapper)
    assert ending.flush(5.0)
    warned = [r for r in caplog.records if "tracing disabled" in r.getMessage()]
    if tracing == "traced":  # the processor still sees traced runs
        assert len(_wire(fake_llm)) == 2 and not warned
    else:
        assert [fake_llm.hints_of(r)[0] for r in fake_llm.requests] == [None] * 6 and fake_llm.ends == []
        assert len(warned) == 1 and "after agents.set_trace_provider" in warned[0].getMessage()
