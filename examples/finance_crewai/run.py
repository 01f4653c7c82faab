"""The FinanceBench example's part of the main job: task split, the CrewAI crew run with PBKV, outcomes."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any, Callable

from examples.common.data import workflow_id_for
from examples.common.integration import EMBEDDED_END_TIMEOUT_S
from examples.common.pipeline import ExampleSpec, seeded_split
from examples.finance_crewai import prompts as P
from examples.finance_crewai import sizes as S
from examples.finance_crewai import scenario as _scenario  # noqa: F401  (registers the scenario)
from examples.finance_crewai.app import build_crew, reviewer_approved
from examples.finance_crewai.data import FinanceQuestion, load_financebench

__all__ = ["spec", "run_questions", "summarise", "worked_examples", "N_EXAMPLES"]

_SIZES = dict(S.TASKS)
#: Held-out questions rendered as worked examples in the agents' backstories.
N_EXAMPLES = S.N_EXAMPLES


def worked_examples(qs: list[FinanceQuestion]) -> list[FinanceQuestion]:
    """The worked-example questions: the last :data:`N_EXAMPLES` of the file, never used as tasks."""
    return qs[-N_EXAMPLES:]


def _split(qs: list[FinanceQuestion], n_train: int, n_test: int, seed: int) -> tuple[list[FinanceQuestion], list[FinanceQuestion]]:
    _, train, test = seeded_split(qs[:-N_EXAMPLES], n_train, n_test, seed,
                                  note=f"the last {N_EXAMPLES} rows are kept back as worked examples")
    return train, test


async def run_questions(questions: list[FinanceQuestion], server_url: str, trace_path: str, concurrency: int,
                        on_done: Callable[[], None] = lambda: None) -> list[dict[str, Any]]:
    """Answer ``questions`` with the CrewAI crew against pbkv-server, ``concurrency`` crews at a time.

    PBKV is installed the README's way: ``instrument(app=..., server_url=..., trace_path=...)``
    once, and its interceptor passed to the ``crewai.LLM``. Each kickoff is one workflow.

    Returns:
        per question: ``{"qid", "question_type", "approved"}``.
    """
    from crewai import LLM

    from pbkv_sdk.integrations.crewai import instrument

    examples = worked_examples(load_financebench())
    pbkv = instrument(app=P.APP, server_url=server_url, trace_path=trace_path,
                      end_timeout_s=EMBEDDED_END_TIMEOUT_S)
    try:
        llm = LLM(model="openai/pbkv-sim", base_url=server_url + "/v1", api_key="not-needed", max_tokens=1024,
                  temperature=0.0, interceptor=pbkv.interceptor)
        gate = asyncio.Semaphore(concurrency)

        async def one(q: FinanceQuestion) -> dict[str, Any]:
            async with gate:
                # A fixed workflow id per question keeps the seeded scenario replies the same in every run.
                output = await build_crew(llm, q, examples).kickoff_async(
                    inputs={"pbkv_workflow_id": workflow_id_for(q.qid)})
            on_done()
            return {"qid": q.qid, "question_type": q.question_type, "approved": reviewer_approved(output)}

        return list(await asyncio.gather(*(one(q) for q in questions)))
    finally:
        pbkv.uninstrument()


def summarise(outcomes: list[dict[str, Any]]) -> dict[str, Any]:
    """Reviewer approval share per question type."""
    approved: dict[str, list[bool]] = defaultdict(list)
    for o in outcomes:
        approved[o["question_type"]].append(o["approved"])
    return {"approved_share_by_type": {t: sum(v) / len(v) for t, v in sorted(approved.items())}, "questions": len(outcomes)}


def spec() -> ExampleSpec:
    """The FinanceBench example: static CrewAI crew, replay at the paper's concurrency 48, plus kvflow."""
    return ExampleSpec(
        name="finance_crewai", app=P.APP, title="FinanceBench + CrewAI", replay_concurrency=48,
        load_tasks=load_financebench, split=_split, run_tasks=run_questions, sizes=_SIZES,
        static_graph=P.STATIC_GRAPH, summarise_outcomes=summarise,
    )
