"""The one instrumentor shape of the five integrations (``pbkv_sdk.integrations.base``).

For each integration, against the real framework and the fake OpenAI server: ``instrument()``
twice installs once (the same handle; one workflow, gap-free steps and one end per run);
after ``uninstrument()`` the app's requests carry no PBKV header and no end is sent; and
``instrument()`` again works. A missing framework is one warning line and nothing installed.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap

import openai
import pytest

from pbkv_sdk import autopatch, ending

from .apps import build_autogen_team, build_crewai_crew, build_langgraph_app
from .fake_openai import FakeOpenAI
from .settle import settle_ends


def _pbkv_headers(request) -> list[str]:
    """Headers the SDK adds (hints, and the router affinity key it stamps with the workflow id)."""
    return [k for k in request.headers if k.startswith("x-pbkv-") or k == "x-smg-routing-key"]


def _check_stamped_once(fake: FakeOpenAI, start: int, runs: int, app: str) -> None:
    """Requests ``fake.requests[start:]`` form ``runs`` workflows, each with steps 0..n-1 (no step
    reserved twice, none skipped), all of ``app``; each workflow ended exactly once, ``completed``."""
    assert ending.flush(10.0)
    steps: dict[str, list[int]] = {}
    for request in fake.requests[start:]:
        wf, agent, step, got_app = fake.hints_of(request)
        assert wf is not None and agent and got_app == app, request.headers
        steps.setdefault(wf, []).append(step)
    assert len(steps) == runs
    for wf, seen in steps.items():
        assert sorted(seen) == list(range(len(seen))), (wf, seen)
    settle_ends(5.0)
    ended = [(w, s) for w, s, _ in fake.ends if w in steps]
    assert sorted(ended) == sorted((wf, "completed") for wf in steps)


def _check_unstamped(fake: FakeOpenAI, start: int, ends_before: int) -> None:
    assert ending.flush(10.0)
    assert len(fake.requests) > start
    assert [_pbkv_headers(r) for r in fake.requests[start:]] == [[]] * (len(fake.requests) - start)
    assert all("custom_params" not in r.body for r in fake.requests[start:])
    settle_ends(2.0)
    assert len(fake.ends) == ends_before and not autopatch.active()


# --------------------------------------------------------------------------- per integration


def test_langchain_instrument_twice_once_uninstrument_then_again(fake_llm):
    from pbkv_sdk.integrations.langchain import INSTRUMENTOR, instrument, uninstrument

    try:
        handler = instrument(app="claims", server_url=fake_llm.url)
        assert instrument(app="claims", server_url=fake_llm.url) is handler and INSTRUMENTOR.handle is handler
        graph = build_langgraph_app(fake_llm.base_url)
        graph.invoke({"claim": "c1", "max_rounds": 1})
        _check_stamped_once(fake_llm, 0, 1, "claims")

        uninstrument()
        assert not INSTRUMENTOR.is_instrumented
        start, ends = len(fake_llm.requests), len(fake_llm.ends)
        graph.invoke({"claim": "c2", "max_rounds": 1})
        _check_unstamped(fake_llm, start, ends)

        assert instrument(app="claims", server_url=fake_llm.url) is not handler
        start = len(fake_llm.requests)
        graph.invoke({"claim": "c3", "max_rounds": 1})
        _check_stamped_once(fake_llm, start, 1, "claims")
    finally:
        uninstrument()


def test_autogen_instrument_twice_once_uninstrument_then_again(fake_llm):
    from pbkv_sdk.integrations.autogen import INSTRUMENTOR, instrument, instrument_team, uninstrument

    async def main() -> None:  # one event loop: the team's OpenAI client is bound to it
        options = instrument(app="swe", server_url=fake_llm.url)
        assert instrument(app="swe", server_url=fake_llm.url) is options
        team = build_autogen_team(fake_llm.base_url, app=None, max_turns=2)  # options from instrument()
        team = instrument_team(team)  # wrapping a wrapped team re-wraps it: still one workflow per run
        await team.run(task="fix bug 1")
        _check_stamped_once(fake_llm, 0, 1, "swe")

        uninstrument()  # the wrapped team now runs as the team's own, unstamped
        assert not INSTRUMENTOR.is_instrumented
        start, ends = len(fake_llm.requests), len(fake_llm.ends)
        await team.reset()
        await team.run(task="fix bug 2")
        _check_unstamped(fake_llm, start, ends)

        instrument(app="swe", server_url=fake_llm.url)
        start = len(fake_llm.requests)
        await team.reset()
        await team.run(task="fix bug 3")
        _check_stamped_once(fake_llm, start, 1, "swe")

    try:
        asyncio.run(main())
    finally:
        uninstrument()


def test_crewai_instrument_twice_once_uninstrument_then_again(fake_llm):
    from pbkv_sdk.integrations.crewai import INSTRUMENTOR, instrument, uninstrument

    try:
        crew = build_crewai_crew(fake_llm.base_url, server_url=fake_llm.url)  # instrument(...), the one line
        handle = INSTRUMENTOR.handle
        assert instrument(app="finance", server_url=fake_llm.url) is handle
        crew.kickoff(inputs={"question": "q1"})
        _check_stamped_once(fake_llm, 0, 1, "finance")

        uninstrument()
        start, ends = len(fake_llm.requests), len(fake_llm.ends)
        crew.kickoff(inputs={"question": "q2"})
        _check_unstamped(fake_llm, start, ends)

        assert instrument(app="finance", server_url=fake_llm.url) is not handle
        start = len(fake_llm.requests)
        crew.kickoff(inputs={"question": "q3"})
        _check_stamped_once(fake_llm, start, 1, "finance")
    finally:
        uninstrument()


def test_openai_agents_instrument_twice_once_uninstrument_then_again(fake_llm):
    agents = pytest.importorskip("agents")
    from openai import AsyncOpenAI

    from pbkv_sdk.integrations.openai_agents import instrument, uninstrument

    agents.set_trace_processors([])  # no exporter: the default one would post to api.openai.com

    def run() -> None:  # a fresh client per run: an AsyncOpenAI client is bound to one event loop
        model = agents.OpenAIChatCompletionsModel("m", AsyncOpenAI(base_url=fake_llm.base_url, api_key="x",
                                                                   max_retries=0))
        agents.Runner.run_sync(agents.Agent(name="Solo", instructions="Answer.", model=model), "hi")

    try:
        processor = instrument(app="support", server_url=fake_llm.url)
        assert instrument(app="support", server_url=fake_llm.url) is processor
        run()
        _check_stamped_once(fake_llm, 0, 1, "support")

        uninstrument()
        assert not processor.enabled
        start, ends = len(fake_llm.requests), len(fake_llm.ends)
        run()
        _check_unstamped(fake_llm, start, ends)

        assert instrument(app="support", server_url=fake_llm.url) is not processor
        start = len(fake_llm.requests)
        run()
        _check_stamped_once(fake_llm, start, 1, "support")
    finally:
        uninstrument()


def test_otel_instrument_twice_once_uninstrument_then_again(fake_llm, monkeypatch):
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
    from opentelemetry.sdk.trace import TracerProvider

    from pbkv_sdk.integrations.otel import instrument, uninstrument

    provider = TracerProvider()
    tracer = provider.get_tracer("app")
    client = openai.OpenAI(base_url=fake_llm.base_url, api_key="x", max_retries=0)

    def run(task: str) -> None:
        with tracer.start_as_current_span("invoke_agent solo", attributes={"gen_ai.operation.name": "invoke_agent",
                                                                           "gen_ai.agent.name": "solo"}):
            for _ in range(2):
                client.chat.completions.create(model="m", messages=[{"role": "user", "content": task}])

    try:
        processor = instrument(app="otelapp", server_url=fake_llm.url, tracer_provider=provider)
        assert instrument(app="otelapp", server_url=fake_llm.url, tracer_provider=provider) is processor
        run("t1")
        _check_stamped_once(fake_llm, 0, 1, "otelapp")

        uninstrument()
        start, ends = len(fake_llm.requests), len(fake_llm.ends)
        run("t2")
        _check_unstamped(fake_llm, start, ends)

        assert instrument(app="otelapp", server_url=fake_llm.url, tracer_provider=provider) is not processor
        start = len(fake_llm.requests)
        run("t3")
        _check_stamped_once(fake_llm, start, 1, "otelapp")
    finally:
        uninstrument()


def test_instrument_rejects_unknown_options_and_options_with_fields():
    from pbkv_sdk.integrations.base import Options
    from pbkv_sdk.integrations.crewai import instrument

    with pytest.raises(TypeError, match="tracer_provider"):
        instrument(app="x", tracer_provider=object())  # OpenTelemetry's own option, not CrewAI's
    with pytest.raises(TypeError, match="not both"):
        instrument(app="x", options=Options(app="y"))
    assert not autopatch.active()


# --------------------------------------------------------------------------- missing framework

_MISSING = {  # integration -> (module hidden from it, module the line names, extra the line names)
    "langchain": ("langchain_core", "langchain_core", "langgraph"),
    "autogen": ("autogen_agentchat", "autogen_agentchat", "autogen"),
    "crewai": ("crewai", "crewai", "crewai"),
    "openai_agents": ("agents", "agents", "openai-agents"),
    # OpenTelemetry itself present, the conventions package not
    "otel": ("openinference", "openinference.semconv", "otel"),
}


@pytest.mark.parametrize("name", sorted(_MISSING))
def test_a_missing_framework_is_one_clear_line_and_the_app_runs(name):
    hidden, named, extra = _MISSING[name]
    script = textwrap.dedent(f"""
        import logging, sys
        sys.modules[{hidden!r}] = None  # as if not installed: import fails, find_spec says None
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
        from pbkv_sdk import autopatch
        from pbkv_sdk.integrations import {name} as integration
        team = object()
        if {name!r} == "autogen":
            assert integration.instrument_team(team, app="a") is team  # unwrapped: the app runs
        assert integration.instrument(app="a") is None and integration.instrument(app="a") is None
        assert not integration.INSTRUMENTOR.is_instrumented and not autopatch.active()
        integration.uninstrument()
        print("ran")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and done.stdout == "ran\n", done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, lines  # once, however often it is called; no traceback
    assert lines[0].startswith("WARNING PBKV: the ") and f"module {named!r} is not installed" in lines[0], lines[0]
    assert f'pip install -e ".[{extra}]"' in lines[0]


def test_the_framework_classes_without_their_framework_are_one_clear_import_error():
    script = textwrap.dedent("""
        import sys
        sys.modules["crewai"] = None
        try:
            from pbkv_sdk.integrations.crewai import PBKVInterceptor
        except ImportError as exc:
            print(type(exc).__name__, exc)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout.startswith("MissingDependency PBKV: the crewai integration needs crewai>=0.100")
    assert done.stdout.count("\n") == 1
