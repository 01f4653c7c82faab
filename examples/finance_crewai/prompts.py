"""Roles, task texts and reply markers of the FinanceBench crew (shared by app and scenario).

The crew is static and sequential: researcher -> analyst -> writer -> reviewer. The researcher
and the reviewer read the real evidence pages of the filing; the analyst and the writer work on
the previous tasks' outputs (CrewAI passes them as task context).
"""

from __future__ import annotations

from typing import Sequence

from examples.finance_crewai.data import FinanceQuestion

APP = "finance"

RESEARCHER = "Filing Researcher"
ANALYST = "Financial Analyst"
WRITER = "Answer Writer"
REVIEWER = "Answer Reviewer"
AGENTS = (RESEARCHER, ANALYST, WRITER, REVIEWER)
#: The static call graph the crew runs (KVFlow's input): each agent's successor.
STATIC_GRAPH = {RESEARCHER: [ANALYST], ANALYST: [WRITER], WRITER: [REVIEWER], REVIEWER: []}

QUESTION_LABEL = "Question"
APPROVED = "APPROVED"
REVISE = "REVISION NEEDED"

PROFILES = {
    RESEARCHER: (
        "Locate the facts in SEC filings that a financial question depends on",
        "You have read thousands of 10-K, 10-Q and 8-K filings and earnings releases. You quote line "
        "items exactly as filed, with their units, fiscal periods and page references, and you never "
        "estimate a figure that the filing states.",
    ),
    ANALYST: (
        "Turn extracted filing facts into the metric or judgement the question asks for",
        "You are a chartered financial analyst. You compute ratios, growth rates and margins step by "
        "step, state every formula you use, keep units consistent, and round only at the end.",
    ),
    WRITER: (
        "Write the final answer to a financial question in one or two precise sentences",
        "You write answers for analysts: the number or judgement first, the period and unit always, "
        "and a one-line justification that cites the filing.",
    ),
    REVIEWER: (
        "Check a drafted answer against the filing evidence before it is released",
        "You are a meticulous reviewer. You recompute every figure from the evidence pages, check "
        "periods and units, and approve only answers that the evidence supports.",
    ),
}


def backstory(role: str, examples: Sequence[FinanceQuestion]) -> str:
    """The role's fixed backstory: its profile plus worked examples from held-out real questions.

    The examples (question, the quoted evidence, the reference answer) are the same for every
    workflow, so each agent's prompt starts with a long prefix that all workflows share, as in
    few-shot agent prompts.
    """
    parts = [PROFILES[role][1], "", "Worked examples from earlier filings:"]
    for n, ex in enumerate(examples, start=1):
        quotes = " ".join(p.quote.strip() for p in ex.evidence)
        parts.append(f"Example {n} ({ex.company}, {ex.doc_name}): {ex.question}\nEvidence: {quotes}\nAnswer: {ex.answer}")
    return "\n".join(parts)


def evidence_text(q: FinanceQuestion) -> str:
    """The real evidence pages of a question, each headed by filing name and page number."""
    return "\n\n".join(f"[{p.doc_name}, page {p.page}]\n{p.page_text.strip()}" for p in q.evidence)


def task_descriptions(q: FinanceQuestion) -> dict[str, str]:
    """The four task descriptions for question ``q`` (each names the question on a ``Question:`` line).

    Used verbatim: the crew is kicked off without ``inputs``, so CrewAI does not interpolate
    ``{placeholders}`` (filing pages may contain braces).
    """
    # The header line keeps "Question:" at the start of a line after CrewAI's "Current Task: ".
    head = f"FinanceBench question about {q.company}.\n{QUESTION_LABEL}: {q.question}\nFiling: {q.doc_name}"
    out = {
        RESEARCHER: f"{head}\n\nExtract every figure and statement from the evidence pages below that the question needs.\n\nEvidence pages:\n{evidence_text(q)}",
        ANALYST: f"{head}\n\nUsing the researcher's extracted facts, compute or reason out what the question asks for.",
        WRITER: f"{head}\n\nWrite the final answer from the analysis.",
        REVIEWER: f"{head}\n\nReview the drafted answer against the evidence pages below; answer {APPROVED} or {REVISE} with reasons.\n\nEvidence pages:\n{evidence_text(q)}",
    }
    return out
