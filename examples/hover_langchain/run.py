"""The HoVer example's part of the main job: task split, the app run with the PBKV callback, outcomes."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any, Callable

from examples.common.data import workflow_id_for
from examples.common.integration import EMBEDDED_END_TIMEOUT_S
from examples.common.pipeline import ExampleSpec, seeded_split
from examples.hover_langchain import prompts as P
from examples.hover_langchain import sizes as S
from examples.hover_langchain import scenario as _scenario  # noqa: F401  (registers the scenario)
from examples.hover_langchain.app import build_graph
from examples.hover_langchain.data import HoverClaim, load_hover
from examples.hover_langchain.retrieval import build_index
from pbkv_server.sim.nominal import SEARCH_TOOL_GAP_S

__all__ = ["spec", "run_claims", "summarise", "worked_examples", "N_EXAMPLES", "N_DISTRACTOR_CLAIMS"]

#: Held-out claims rendered as worked examples in the system prompts (value and source in ``sizes``).
N_EXAMPLES = S.N_EXAMPLES
#: Claims (outside the task split) whose titles join the index as distractors.
N_DISTRACTOR_CLAIMS = S.N_DISTRACTOR_CLAIMS

_SIZES = dict(S.TASKS)


def worked_examples(claims: list[HoverClaim]) -> list[HoverClaim]:
    """The worked-example claims: the last :data:`N_EXAMPLES` of the file, never used as tasks."""
    return claims[-N_EXAMPLES:]


def _split(claims: list[HoverClaim], n_train: int, n_test: int, seed: int) -> tuple[list[HoverClaim], list[HoverClaim]]:
    _, train, test = seeded_split(claims[:-N_EXAMPLES], n_train, n_test, seed,
                                  note=f"the last {N_EXAMPLES} rows are kept back as worked examples")
    return train, test


async def run_claims(claims: list[HoverClaim], server_url: str, trace_path: str, concurrency: int,
                     on_done: Callable[[], None] = lambda: None, messages: str = P.CONVENTIONS[0]) -> list[dict[str, Any]]:
    """Fact-check ``claims`` with the LangGraph app against pbkv-server, ``concurrency`` at a time.

    The PBKV callback is installed the README's way: ``instrument(app=..., server_url=...,
    trace_path=...)`` once, and the chat model sends through the SDK's stamping httpx clients.
    Each claim is one workflow (one root ``ainvoke``); ``messages`` is the prompt convention
    (:data:`prompts.CONVENTIONS`).

    Returns:
        per claim: ``{"uid", "num_hops", "label", "rounds", "verdict"}``.
    """
    import pbkv_sdk
    from langchain_openai import ChatOpenAI
    from pbkv_sdk.integrations.langchain import instrument, uninstrument

    everything = load_hover()
    examples = worked_examples(everything)
    task_ids = {c.uid for c in claims}
    distractors = [c for c in everything[:-N_EXAMPLES] if c.uid not in task_ids][-N_DISTRACTOR_CLAIMS:]
    index = build_index(claims, distractors)
    instrument(app=P.APP, server_url=server_url, trace_path=trace_path, end_timeout_s=EMBEDDED_END_TIMEOUT_S)
    try:
        llm = ChatOpenAI(model="pbkv-sim", base_url=server_url + "/v1", api_key="not-needed", max_tokens=512,
                         temperature=0.0, max_retries=0, timeout=120,
                         http_client=pbkv_sdk.http_client(), http_async_client=pbkv_sdk.async_http_client())
        graph = build_graph(llm, index, examples, messages=messages)
        gate = asyncio.Semaphore(concurrency)

        async def one(claim: HoverClaim) -> dict[str, Any]:
            async with gate:
                # A fixed workflow id per claim keeps the seeded scenario replies the same in every run.
                state = await graph.ainvoke({"claim": claim}, config={
                    "recursion_limit": 100, "metadata": {"pbkv_workflow_id": workflow_id_for(claim.uid)}})
            on_done()
            return {"uid": claim.uid, "num_hops": claim.num_hops, "label": claim.label,
                    "rounds": state.get("rounds", 0), "verdict": state.get("verdict", "")}

        return list(await asyncio.gather(*(one(c) for c in claims)))
    finally:
        uninstrument()


def summarise(outcomes: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean retrieval rounds per hop count and the share of claims verified within the budget."""
    rounds: dict[int, list[int]] = defaultdict(list)
    for o in outcomes:
        rounds[o["num_hops"]].append(o["rounds"])
    verified = sum(P.VERDICT_DONE in o["verdict"] and P.VERDICT_MORE not in o["verdict"] for o in outcomes)
    return {
        "mean_rounds_by_hops": {str(h): sum(v) / len(v) for h, v in sorted(rounds.items())},
        "verified_share": verified / len(outcomes) if outcomes else 0.0,
        "claims": len(outcomes),
    }


def spec() -> ExampleSpec:
    """The HoVer example: LangGraph app, replay at the paper's concurrency 72."""
    return ExampleSpec(
        name="hover_langchain", app=P.APP, title="HoVer + LangGraph", replay_concurrency=72,
        load_tasks=load_hover, split=_split, run_tasks=run_claims, sizes=_SIZES, summarise_outcomes=summarise,
        message_conventions=P.CONVENTIONS,
        # the retrieval tool runs between the query writer's call and the summarizer's
        tool_gaps={P.QUERY_WRITER: SEARCH_TOOL_GAP_S},
    )
