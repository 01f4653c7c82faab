"""The HoVer app's scenario: the sim engine's stand-in for the model's answers.

Conditioned on the real claim (found by its ``Claim:`` line in the dev split): the decomposer
writes one sub-question per hop (``num_hops``); the query writer targets an article still missing
from the notes with probability :data:`P_TARGETED` (else it writes a vague keyword query from the
claim); the verifier says ``VERIFIED`` only when the notes cover every supporting-fact title
(premature verdicts with :data:`P_PREMATURE`), and hesitates more on NOT_SUPPORTED claims
(:data:`P_HESITATE`). More hops therefore mean more titles to find and, on average, more
retrieve/summarise/verify rounds; the search itself is real (``retrieval.py``).
"""

from __future__ import annotations

import random
import re
from functools import lru_cache

from examples.common.textgen import find_field, lognormal_tokens, non_system_text, prose, words_of
from examples.hover_langchain import prompts as P
from examples.hover_langchain.data import HoverClaim, load_hover
from examples.hover_langchain.sizes import REPLY_MEDIAN, REPLY_SIGMA
from pbkv_server.scenarios.base import Scenario, ScenarioRequest, register_scenario

__all__ = ["HoverScenario", "P_TARGETED", "P_PREMATURE", "P_HESITATE", "P_CORRECT"]

#: Probability that a query targets a title the notes still miss (a competent query writer).
P_TARGETED = 0.6
#: Probability that the verifier declares VERIFIED although a supporting title is missing.
P_PREMATURE = 0.08
#: Probability that the verifier asks for more evidence on a fully covered NOT_SUPPORTED claim
#: (refutations are harder to be sure of); SUPPORTED claims hesitate with a quarter of it.
P_HESITATE = 0.3
#: Probability that a VERIFIED verdict carries the gold label.
P_CORRECT = 0.85

_NOTE_RE = re.compile(r"^NOTE \[(.+?)\]:", re.MULTILINE)
_PASSAGE_RE = re.compile(r"^\[(.+?)\] ", re.MULTILINE)


def _draw(rng: random.Random, part: str, scale: int = 1) -> int:
    """Tokens of the free-text reply part ``part``: log-normal around ``scale`` x its median (``sizes``)."""
    return lognormal_tokens(rng, REPLY_MEDIAN[part] * scale, REPLY_SIGMA)


@lru_cache(maxsize=1)
def _claims_by_text() -> dict[str, HoverClaim]:
    return {c.claim.strip(): c for c in load_hover()}


@register_scenario(P.APP)
class HoverScenario(Scenario):
    """Replies of the HoVer agents (see module docstring); unknown requests get a short generic answer."""

    def reply(self, request: ScenarioRequest, rng: random.Random) -> str:
        """Return the reply of ``request.agent`` for the claim named in the request's ``Claim:`` line."""
        text = find_field(request.messages, P.CLAIM_LABEL)
        claim = _claims_by_text().get(text.strip()) if text else None
        if claim is None or request.agent not in P.AGENTS:
            return prose(rng, words_of(non_system_text(request.messages))[-200:], _draw(rng, "unknown_request"))
        vocab = words_of(claim.claim)
        if request.agent == P.DECOMPOSER:
            return self._decompose(claim, rng, vocab)
        covered = set(_NOTE_RE.findall(non_system_text(request.messages)))
        missing = [t for t in claim.titles if t not in covered]
        if request.agent == P.QUERY_WRITER:
            return self._queries(claim, missing, rng, vocab)
        if request.agent == P.SUMMARIZER:
            return self._summaries(request, rng, vocab)
        return self._verdict(claim, missing, rng, vocab)

    @staticmethod
    def _decompose(claim: HoverClaim, rng: random.Random, vocab: list[str]) -> str:
        lines = []
        for i in range(claim.num_hops):
            # Hops beyond the listed titles re-ask about a bridge entity, as real decompositions do.
            title = claim.titles[i % len(claim.titles)]
            lines.append(f"Q{i + 1}: What does the article '{title}' say about {' '.join(rng.sample(vocab, k=min(4, len(vocab))))}?")
        return "\n".join(lines) + "\n" + prose(rng, vocab, _draw(rng, "decomposer_per_hop", claim.num_hops))

    @staticmethod
    def _queries(claim: HoverClaim, missing: list[str], rng: random.Random, vocab: list[str]) -> str:
        n = 2 if len(missing) >= 3 else 1
        queries = []
        for _ in range(n):
            if missing and rng.random() < P_TARGETED:
                queries.append(rng.choice(missing))
            else:
                queries.append(" ".join(rng.sample(vocab, k=min(len(vocab), rng.randint(3, 6)))))
        reasoning = prose(rng, vocab, _draw(rng, "query_reasoning"))
        return reasoning + "\n" + "\n".join(f"{P.QUERY_LABEL}: {q}" for q in queries)

    @staticmethod
    def _summaries(request: ScenarioRequest, rng: random.Random, vocab: list[str]) -> str:
        last = request.messages[-1].get("content") if request.messages else ""
        titles = _PASSAGE_RE.findall(last if isinstance(last, str) else "")
        if not titles:
            return "No passages were retrieved for this query."
        return "\n".join(
            f"NOTE [{t}]: {prose(rng, vocab + words_of(t), _draw(rng, 'summary_note'))}" for t in titles
        )

    @staticmethod
    def _verdict(claim: HoverClaim, missing: list[str], rng: random.Random, vocab: list[str]) -> str:
        hesitate = P_HESITATE if claim.label == "NOT_SUPPORTED" else P_HESITATE / 4
        done = rng.random() < P_PREMATURE if missing else rng.random() >= hesitate
        if not done:
            gap = missing[0] if missing else rng.choice(claim.titles)
            return (f"{P.VERDICT_LABEL}: {P.VERDICT_MORE}\nThe notes do not settle the hop about '{gap}'. "
                    + prose(rng, vocab, _draw(rng, "verifier_more")))
        label = claim.label if rng.random() < P_CORRECT else ("SUPPORTED" if claim.label != "SUPPORTED" else "NOT_SUPPORTED")
        return (f"{P.VERDICT_LABEL}: {P.VERDICT_DONE} ({label})\n"
                + prose(rng, vocab, _draw(rng, "verifier_done_per_hop", claim.num_hops)))
