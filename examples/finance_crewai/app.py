"""The FinanceBench crew in CrewAI: a static sequential crew over the real evidence pages.

Four agents, four tasks, ``Process.sequential``: the researcher extracts facts from the evidence
pages, the analyst computes, the writer drafts the answer, the reviewer checks it against the
pages. Every question runs the same call graph (:data:`prompts.STATIC_GRAPH`), which is what
KVFlow assumes; the crew's result records whether the reviewer approved.
"""

from __future__ import annotations

from typing import Any, Sequence

from examples.finance_crewai import prompts as P
from examples.finance_crewai.data import FinanceQuestion

__all__ = ["build_crew", "reviewer_approved"]


def build_crew(llm: Any, question: FinanceQuestion, examples: Sequence[FinanceQuestion] = ()) -> Any:
    """Build the crew for one question.

    Args:
        llm: a ``crewai.LLM`` (pointed at pbkv-server) shared by the four agents.
        question: the FinanceBench question.
        examples: held-out questions rendered as worked examples in every agent's backstory.

    Returns:
        a ``crewai.Crew``; ``crew.kickoff()`` returns a ``CrewOutput`` whose ``raw`` is the
        reviewer's output.
    """
    from crewai import Agent, Crew, Process, Task

    agents = {
        role: Agent(role=role, goal=goal, backstory=P.backstory(role, examples), llm=llm, allow_delegation=False,
                    verbose=False, max_iter=2)
        for role, (goal, _) in P.PROFILES.items()
    }
    descriptions = P.task_descriptions(question)
    expected = {
        P.RESEARCHER: "A list of the relevant figures and statements with page references.",
        P.ANALYST: "The computed metric or reasoned judgement with the formula used.",
        P.WRITER: "A one or two sentence answer with period and unit.",
        P.REVIEWER: f"{P.APPROVED} or {P.REVISE}, with the reasons.",
    }
    tasks: list[Any] = []
    for role in P.AGENTS:
        # Each task sees the previous task's output: the sequential crew's data flow.
        tasks.append(Task(description=descriptions[role], expected_output=expected[role], agent=agents[role],
                          context=tasks[-1:] if tasks else None))
    return Crew(agents=list(agents.values()), tasks=tasks, process=Process.sequential, verbose=False)


def reviewer_approved(output: Any) -> bool:
    """Whether the crew's final (reviewer) output approves the drafted answer."""
    return str(getattr(output, "raw", output)).lstrip().startswith(P.APPROVED)
