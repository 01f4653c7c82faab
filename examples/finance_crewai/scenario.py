"""The FinanceBench crew's scenario: the sim engine's stand-in for the model's answers.

Conditioned on the real question (found by its ``Question:`` line): reply lengths follow the
question type (:data:`MEDIAN_TOKENS`: metrics questions need long extraction and calculation,
domain questions longer prose), the analyst's answer is built around the real reference answer,
and the reviewer rejects with a probability that depends on the reasoning the question needs
(:data:`P_REVISE`). Replies use CrewAI's ``Thought: / Final Answer:`` format, which its agent
executor parses.
"""

from __future__ import annotations

import random
from functools import lru_cache

from examples.common.textgen import find_field, lognormal_tokens, non_system_text, prose, words_of
from examples.finance_crewai import prompts as P
from examples.finance_crewai import sizes as S
from examples.finance_crewai.data import FinanceQuestion, load_financebench
from pbkv_server.scenarios.base import Scenario, ScenarioRequest, register_scenario

__all__ = ["FinanceScenario", "MEDIAN_TOKENS", "P_REVISE", "agent_role"]

#: Median reply tokens per (question type, agent): values and sources in ``sizes``.
MEDIAN_TOKENS = S.MEDIAN_TOKENS
#: Reviewer rejection probability: numerical reasoning is where drafts go wrong most often.
P_REVISE = {"numerical": 0.3, "logical": 0.2, "extraction": 0.08, "": 0.12}


def agent_role(agent: str | None) -> str | None:
    """The crew role an agent hint names (exact role, or a role it contains), else ``None``."""
    if agent is None:
        return None
    for role in P.AGENTS:
        if role.lower() in agent.lower():
            return role
    return None


@lru_cache(maxsize=1)
def _questions() -> dict[str, FinanceQuestion]:
    return {q.question.strip(): q for q in load_financebench()}


def _reasoning_kind(q: FinanceQuestion) -> str:
    text = q.reasoning.lower()
    for kind in ("numerical", "logical", "extraction"):
        if kind in text:
            return kind
    return ""


@register_scenario(P.APP)
class FinanceScenario(Scenario):
    """Replies of researcher, analyst, writer and reviewer (see module docstring)."""

    def reply(self, request: ScenarioRequest, rng: random.Random) -> str:
        """Return the reply of the crew role named by ``request.agent`` for the question in the prompt."""
        text = find_field(request.messages, P.QUESTION_LABEL)
        q = _questions().get(text.strip()) if text else None
        role = agent_role(request.agent)
        if q is None or role is None:
            body = prose(rng, words_of(non_system_text(request.messages))[-200:], lognormal_tokens(rng, S.UNKNOWN_REQUEST_MEDIAN))
            return f"Thought: I now can give a great answer\nFinal Answer: {body}"
        vocab = words_of(q.question) + words_of(" ".join(p.quote for p in q.evidence))[:200]
        n = lognormal_tokens(rng, MEDIAN_TOKENS[q.question_type][role])
        if role == P.RESEARCHER:
            quotes = "\n".join(f"- {p.doc_name} p.{p.page}: {p.quote.strip()[:400]}" for p in q.evidence)
            body = f"Relevant facts:\n{quotes}\n{prose(rng, vocab, n)}"
        elif role == P.ANALYST:
            body = f"{prose(rng, vocab, n)}\nResult: {q.answer.strip()[:600]}"
        elif role == P.WRITER:
            body = f"{q.answer.strip()[:600]} {prose(rng, vocab, n)}"
        else:
            verdict = P.REVISE if rng.random() < P_REVISE[_reasoning_kind(q)] else P.APPROVED
            body = f"{verdict}. {prose(rng, vocab, n)}"
        return f"Thought: I now can give a great answer\nFinal Answer: {body}"
