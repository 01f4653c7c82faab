"""LangGraph + ChatOpenAI with the PBKV callback against the fake server: hints, steps, ends, traces."""

from __future__ import annotations

import asyncio
import logging
import re
from concurrent.futures import ThreadPoolExecutor

import pytest

from pbkv_sdk import ending
from pbkv_sdk.integrations.langchain import instrument, uninstrument
from pbkv_sdk.recorder import flush_all
from pbkv_contract.trace import InvocationRecord, WorkflowEndRecord, group_workflows, iter_trace

from .apps import LANGGRAPH_ROUND, build_langgraph_app
from .fake_openai import FakeOpenAI

_CLAIM_RE = re.compile(r"Claim: (\S+)")


@pytest.fixture
def instrumented(fake_llm: FakeOpenAI, tmp_path):
    trace = tmp_path / "trace.jsonl"
    handler = instrument(app="claims", server_url=fake_llm.url, trace_path=trace)
    yield handler, trace
    uninstrument()


def expected_agents(rounds: int) -> list:
    """Per step: an agent name, or a set for the two steps of the parallel fan-out."""
    return [a if isinstance(a, str) else set(a) for _ in range(rounds) for a in LANGGRAPH_ROUND]


def assert_sequence(agents_by_step: list[str], rounds: int) -> None:
    expected = expected_agents(rounds)
    flat = []
    for item in expected:
        flat.extend([item, item] if isinstance(item, set) else [item])
    assert len(agents_by_step) == len(flat)
    i = 0
    while i < len(flat):
        if isinstance(flat[i], set):
            assert set(agents_by_step[i : i + 2]) == flat[i]
            i += 2
        else:
            assert agents_by_step[i] == flat[i]
            i += 1


def wire_workflows(fake: FakeOpenAI) -> dict[str, tuple[str, list[str]]]:
    """workflow id -> (the one claim its requests are about, agents ordered by step) as sent on the wire."""
    out: dict[str, tuple[set, list]] = {}
    for req in fake.requests:
        wf, agent, step, app = fake.hints_of(req)
        assert app == "claims" and wf is not None
        claim = _CLAIM_RE.search(req.body["messages"][-1]["content"]).group(1)
        claims, steps = out.setdefault(wf, (set(), []))
        claims.add(claim)
        steps.append((step, agent))
    result = {}
    for wf, (claims, steps) in out.items():
        assert len(claims) == 1, f"workflow {wf} mixed requests of claims {claims}"
        steps.sort()
        assert [s for s, _ in steps] == list(range(len(steps))), "steps must be 0..n-1 without gaps"
        result[wf] = (claims.pop(), [a for _, a in steps])
    return result


def check_run(fake: FakeOpenAI, claims_rounds: dict[str, int]) -> dict[str, str]:
    """Every workflow: one claim, right agents per step, one 'completed' end. Returns claim -> wf id."""
    assert ending.flush(5.0)
    wires = wire_workflows(fake)
    by_claim = {claim: wf for wf, (claim, _) in wires.items()}
    assert sorted(by_claim) == sorted(claims_rounds)
    for wf, (claim, agents) in wires.items():
        assert_sequence(agents, claims_rounds[claim])
    assert sorted((w, s) for w, s, _ in fake.ends) == sorted((wf, "completed") for wf in wires)
    return by_claim


@pytest.mark.parametrize("streaming", [False, True], ids=["json", "sse"])
def test_invoke_stamps_node_names_and_steps_and_ends_once(fake_llm, instrumented, streaming):
    graph = build_langgraph_app(fake_llm.base_url, streaming=streaming)
    result = graph.invoke({"claim": "c1", "max_rounds": 2})
    assert result["round"] == 2
    check_run(fake_llm, {"c1": 2})


def test_stream_of_a_sync_graph_is_one_workflow(fake_llm, instrumented):
    graph = build_langgraph_app(fake_llm.base_url)
    chunks = list(graph.stream({"claim": "s1", "max_rounds": 1}))
    assert {next(iter(c)) for c in chunks} == {"planner", "retriever_a", "retriever_b", "summarizer", "verifier"}
    check_run(fake_llm, {"s1": 1})


@pytest.mark.parametrize("mode", ["ainvoke", "astream"])
@pytest.mark.parametrize("async_nodes", [True, False], ids=["async-nodes", "sync-nodes"])
def test_async_runs_stamp_like_sync_ones(fake_llm, instrumented, mode, async_nodes):
    graph = build_langgraph_app(fake_llm.base_url, async_nodes=async_nodes, streaming=True)

    async def main():
        if mode == "ainvoke":
            return await graph.ainvoke({"claim": "a1", "max_rounds": 2})
        return [c async for c in graph.astream({"claim": "a1", "max_rounds": 2})]

    asyncio.run(main())
    check_run(fake_llm, {"a1": 2})


def test_eight_concurrent_async_workflows_never_mix_hints(fake_llm, instrumented):
    fake_llm.chunk_delay_s = 0.002
    graph = build_langgraph_app(fake_llm.base_url, async_nodes=True, streaming=True)
    claims = {f"k{i}": 1 + i % 3 for i in range(8)}

    async def main():
        await asyncio.gather(*(graph.ainvoke({"claim": c, "max_rounds": r}) for c, r in claims.items()))

    asyncio.run(main())
    check_run(fake_llm, claims)


def test_eight_concurrent_threaded_workflows_never_mix_hints_and_trace_validates(fake_llm, instrumented):
    handler, trace = instrumented
    graph = build_langgraph_app(fake_llm.base_url)
    claims = {f"t{i}": 1 + i % 2 for i in range(8)}
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda c: graph.invoke({"claim": c, "max_rounds": claims[c]}), claims))
    by_claim = check_run(fake_llm, claims)
    assert flush_all(10.0)
    records = list(iter_trace(trace, strict=True))
    assert len([r for r in records if isinstance(r, WorkflowEndRecord)]) == 8
    assert sum(isinstance(r, InvocationRecord) for r in records) == sum(6 * r for r in claims.values())
    assert sorted(group_workflows(records)) == sorted(by_claim.values())
    assert handler.active_workflows == 0


def test_conditional_loop_is_recorded_in_the_trace_in_order(fake_llm, instrumented):
    _, trace = instrumented
    fake_llm.chunk_delay_s = 0.001
    graph = build_langgraph_app(fake_llm.base_url, streaming=True)
    graph.invoke({"claim": "loop", "max_rounds": 3})
    assert flush_all(10.0)
    records = list(iter_trace(trace, strict=True))
    invs = [r for r in records if isinstance(r, InvocationRecord)]
    assert isinstance(records[-1], WorkflowEndRecord) and records[-1].status == "completed"
    assert len({r.workflow_id for r in records}) == 1
    invs.sort(key=lambda r: r.step)
    assert [r.step for r in invs] == list(range(18))
    assert_sequence([r.agent for r in invs], 3)
    # the loop really went back: planner at steps 0, 6, 12, each after the previous round's judge ended
    planners = [r for r in invs if r.agent == "planner"]
    judges = [r for r in invs if r.agent == "judge"]
    assert [r.step for r in planners] == [0, 6, 12]
    assert all(j.t_end <= p.t_start for j, p in zip(judges, planners[1:]))
    assert all(r.ttft_s > 0 and r.prompt_tokens > 0 for r in invs)


def test_a_failing_llm_ends_the_workflow_failed_exactly_once(fake_llm, instrumented, free_port):
    graph = build_langgraph_app(f"http://127.0.0.1:{free_port}/v1")  # nothing listens there
    with pytest.raises(Exception):
        graph.invoke({"claim": "x", "max_rounds": 1})
    assert ending.flush(5.0)
    assert [s for _, s, _ in fake_llm.ends] == ["failed"]


def test_app_completes_with_one_warning_when_pbkv_server_is_down(fake_llm, free_port, caplog):
    instrument(app="claims", server_url=f"http://127.0.0.1:{free_port}")
    try:
        graph = build_langgraph_app(fake_llm.base_url)
        with caplog.at_level(logging.WARNING, logger="pbkv_sdk"):
            for claim in ("d1", "d2"):
                assert graph.invoke({"claim": claim, "max_rounds": 1})["round"] == 1
            assert ending.flush(10.0)
    finally:
        uninstrument()
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "end signal" in warnings[0].getMessage()
    assert len(fake_llm.requests) == 12


def test_body_hints_repeat_the_headers_for_sglang(fake_llm):
    instrument(app="claims", server_url=fake_llm.url, body_hints=True)
    graph = build_langgraph_app(fake_llm.base_url, streaming=True)
    try:
        graph.invoke({"claim": "b1", "max_rounds": 1})
    finally:
        uninstrument()
    assert len(fake_llm.requests) == 6
    for req in fake_llm.requests:
        wf, agent, step, app = fake_llm.hints_of(req)
        assert req.body["custom_params"]["pbkv"] == {"workflow_id": wf, "agent": agent, "step": step, "app": app}


def test_uninstrument_without_langchains_private_hook_list_switches_the_handler_off_with_one_warning(
    fake_llm, monkeypatch, caplog
):
    from langchain_core.tracers import context as lc_context

    hooks = lc_context._configure_hooks
    handler = instrument(app="claims", server_url=fake_llm.url)
    try:
        monkeypatch.delattr(lc_context, "_configure_hooks")  # a langchain-core that renamed it
        with caplog.at_level(logging.WARNING, logger="pbkv_sdk"):
            uninstrument()
        monkeypatch.undo()  # LangChain itself needs the list to run
        assert not handler.enabled
        warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(warnings) == 1 and "switched off" in warnings[0]
        graph = build_langgraph_app(fake_llm.base_url)
        assert graph.invoke({"claim": "off", "max_rounds": 1})["round"] == 1  # the app runs normally
        assert ending.flush(5.0)
        assert len(fake_llm.requests) == 6
        assert all(fake_llm.hints_of(r) == (None, None, None, None) for r in fake_llm.requests)
        assert fake_llm.ends == [] and handler.active_workflows == 0
    finally:
        hooks[:] = [h for h in hooks if h[0].get() is not handler]  # detach it for the tests that follow


def test_instrument_then_uninstrument_leaves_runs_unstamped(fake_llm):
    instrument(app="claims", server_url=fake_llm.url)
    uninstrument()
    graph = build_langgraph_app(fake_llm.base_url)
    graph.invoke({"claim": "plain", "max_rounds": 1})
    assert ending.flush(5.0)
    assert len(fake_llm.requests) == 6 and fake_llm.ends == []
    assert all(fake_llm.hints_of(r) == (None, None, None, None) for r in fake_llm.requests)
