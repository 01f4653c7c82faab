"""The OpenTelemetry integration: an app traced only with GenAI or OpenInference agent spans (no
PBKV framework integration, plain OpenAI clients) gets hints, steps and one end per run."""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest

from pbkv_sdk import ending

from .cancel import cancel_after
from .fake_openai import FakeOpenAI

AGENTS = ("planner", "coder", "tester")


@pytest.fixture
def provider(monkeypatch, fake_llm: FakeOpenAI):
    """An SDK tracer provider (the test session disables OpenTelemetry by default) with PBKV added."""
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
    from opentelemetry.sdk.trace import TracerProvider

    from pbkv_sdk.integrations.otel import instrument, uninstrument

    tracer_provider = TracerProvider()
    instrument(app="otelapp", server_url=fake_llm.url, tracer_provider=tracer_provider)
    yield tracer_provider
    uninstrument()


def genai_run(tracer, client: openai.OpenAI, task: str, *, fail: bool = False) -> None:
    """One run as GenAI-instrumented frameworks trace it: invoke_agent spans, a chat span per call."""
    with tracer.start_as_current_span("invoke_agent team", attributes={"gen_ai.operation.name": "invoke_agent",
                                                                      "gen_ai.conversation.id": task}):
        for name in AGENTS:
            with tracer.start_as_current_span(f"invoke_agent {name}", attributes={
                "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name}):
                with tracer.start_as_current_span("chat m", attributes={"gen_ai.operation.name": "chat"}):
                    client.chat.completions.create(model="m", messages=[{"role": "user", "content": f"{task} {name}"}])
            if fail and name == "coder":
                raise RuntimeError("tool crashed")


def _wire(fake: FakeOpenAI) -> dict[str, tuple[set, list]]:
    out: dict[str, tuple[set, list]] = {}
    for req in fake.requests:
        wf, agent, step, app = fake.hints_of(req)
        assert app == "otelapp" and wf is not None
        tasks, steps = out.setdefault(wf, (set(), []))
        tasks.add(req.body["messages"][0]["content"].split()[0])
        steps.append((step, agent))
    return {wf: (tasks, sorted(steps)) for wf, (tasks, steps) in out.items()}


def test_genai_agent_spans_from_threads_become_one_workflow_each(fake_llm, provider):
    tracer = provider.get_tracer("app")
    client = openai.OpenAI(base_url=fake_llm.base_url, api_key="x", max_retries=0)  # no PBKV client
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda i: genai_run(tracer, client, f"task{i}"), range(6)))
    assert ending.flush(5.0)
    runs = _wire(fake_llm)
    assert len(runs) == 6 and all(len(tasks) == 1 for tasks, _ in runs.values())
    assert all(steps == list(enumerate(AGENTS)) for _, steps in runs.values())
    assert sorted((w, s) for w, s, _ in fake_llm.ends) == sorted((w, "completed") for w in runs)


def test_openinference_attributes_name_agents_and_async_runs_stay_apart(fake_llm, provider):
    tracer = provider.get_tracer("app")

    async def run(i: int) -> None:
        client = openai.AsyncOpenAI(base_url=fake_llm.base_url, api_key="x", max_retries=0)
        with tracer.start_as_current_span("session", attributes={"openinference.span.kind": "CHAIN", "session.id": f"s{i}"}):
            for name in AGENTS[:2]:
                with tracer.start_as_current_span(name, attributes={"openinference.span.kind": "AGENT", "agent.name": name}):
                    await client.chat.completions.create(model="m", messages=[{"role": "user", "content": f"s{i} {name}"}])
                    await asyncio.sleep(0.01)  # interleave the runs

    async def main():
        await asyncio.gather(*(run(i) for i in range(4)))

    asyncio.run(main())
    assert ending.flush(5.0)
    runs = _wire(fake_llm)
    assert sorted(t.pop() for t, _ in runs.values()) == ["s0", "s1", "s2", "s3"]
    assert all(steps == [(0, "planner"), (1, "coder")] for _, steps in runs.values())
    assert sorted(s for _, s, _ in fake_llm.ends) == ["completed"] * 4


def test_a_run_that_raises_ends_failed_and_requests_outside_agent_spans_stay_anonymous(fake_llm, provider):
    tracer = provider.get_tracer("app")
    client = openai.OpenAI(base_url=fake_llm.base_url, api_key="x", max_retries=0)
    with pytest.raises(RuntimeError):
        genai_run(tracer, client, "boom", fail=True)
    with tracer.start_as_current_span("http request"):  # a span that is no agent run
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "plain"}])
    assert ending.flush(5.0)
    assert [s for _, s, _ in fake_llm.ends] == ["failed"]
    assert [fake_llm.hints_of(r)[1:3] for r in fake_llm.requests] == [("planner", 0), ("coder", 1), (None, None)]


def test_a_cancelled_run_ends_cancelled(fake_llm, provider):
    tracer = provider.get_tracer("app")
    fake_llm.reply_delay_s = 0.5

    async def run():
        client = openai.AsyncOpenAI(base_url=fake_llm.base_url, api_key="x", max_retries=0)
        with tracer.start_as_current_span("invoke_agent a", attributes={"gen_ai.agent.name": "a"}):
            await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "slow"}])

    asyncio.run(cancel_after(run(), 0.2))
    assert ending.flush(5.0)
    assert [s for _, s, _ in fake_llm.ends] == ["cancelled"]


def test_an_llm_span_whose_request_left_unstamped_gives_one_warning(fake_llm, provider, caplog):
    import httpx

    tracer = provider.get_tracer("app")

    class OtherLibraryTransport(httpx.BaseTransport):
        """Sends with a transport PBKV does not patch (as an aiohttp-based client would)."""

        def __init__(self):
            self.inner = httpx.HTTPTransport()

        def handle_request(self, request):
            return type(self.inner).handle_request.__wrapped__(self.inner, request)  # the unpatched method

    client = openai.OpenAI(base_url=fake_llm.base_url, api_key="x", http_client=httpx.Client(transport=OtherLibraryTransport()))
    with caplog.at_level(logging.WARNING, logger="pbkv_sdk"):
        for i in range(2):
            genai_run(tracer, client, f"u{i}")
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("pbkv_sdk")]
    assert len(warnings) == 1 and "3 of 3 LLM call(s)" in warnings[0] and "http_client=pbkv_sdk.http_client()" in warnings[0]
    assert all(fake_llm.hints_of(r) == (None, None, None, None) for r in fake_llm.requests)
