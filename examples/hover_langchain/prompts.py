"""Prompt texts and reply markers of the HoVer fact-checking app (shared by app and scenario).

Two message conventions (``--messages``), the default from ``sizes.DEFAULT_MESSAGES``:

* ``shared`` (default): the common-prefix convention the PBKV paper counts on (agents share "the
  system prompt, tool/agent descriptions, and the history accumulated by upstream agents"), and
  LangGraph's message-state pattern (``add_messages`` appends, every node sees the whole list):
  one system prompt describing the tool and every agent (with all worked examples), then the
  workflow's accumulated messages (each earlier call's input and reply), then the current agent's
  instruction, so every call of a workflow extends the previous one.
* ``per-agent``: every agent has a fixed system prompt (instructions plus worked
  examples built from real HoVer claims that are held out of the task split), so requests of one
  agent share a long cached prefix across workflows; the task block and the growing notes
  follow, so successive calls of one agent within a workflow share the workflow's prefix too.
"""

from __future__ import annotations

from typing import Sequence

from examples.hover_langchain.data import HoverClaim
from examples.hover_langchain.sizes import DEFAULT_MESSAGES, PASSAGES_PER_QUERY

APP = "hover"

DECOMPOSER = "decomposer"
QUERY_WRITER = "query_writer"
SUMMARIZER = "summarizer"
VERIFIER = "verifier"
AGENTS = (DECOMPOSER, QUERY_WRITER, SUMMARIZER, VERIFIER)

#: Line label of the claim in every task block (the scenario finds the task by it).
CLAIM_LABEL = "Claim"
QUERY_LABEL = "QUERY"
VERDICT_LABEL = "VERDICT"
VERDICT_MORE = "NEEDS MORE EVIDENCE"
VERDICT_DONE = "VERIFIED"

_ROLE = {
    DECOMPOSER: (
        "You are the claim decomposer of a multi-hop fact-checking team. Break the claim into the "
        "smallest sub-questions whose answers, taken together, decide whether the claim is true. "
        "Each sub-question names one entity (a person, work, place or organisation) that has its "
        "own encyclopedia article. Chain the sub-questions: a later one may depend on the answer of "
        "an earlier one. Write one sub-question per line as 'Q<n>: ...' and nothing else."
    ),
    QUERY_WRITER: (
        "You are the search-query writer of a multi-hop fact-checking team. Read the claim, the "
        "sub-questions and the notes gathered so far, find the sub-question that the notes do not "
        "answer yet, and write one or two short keyword queries for an encyclopedia search engine, "
        "each on its own line as 'QUERY: ...'. Prefer the exact article title of the entity you need."
    ),
    SUMMARIZER: (
        "You are the evidence summariser of a multi-hop fact-checking team. For each retrieved "
        "passage write one note 'NOTE [<article title>]: ...' that keeps only the facts relevant to "
        "the claim, with names, dates and numbers exactly as the passage gives them."
    ),
    VERIFIER: (
        "You are the verifier of a multi-hop fact-checking team. Decide from the notes alone whether "
        "every hop of the claim is covered. If a hop lacks evidence answer 'VERDICT: NEEDS MORE "
        "EVIDENCE' and say which entity is missing. Otherwise answer 'VERDICT: VERIFIED (SUPPORTED)' "
        "or 'VERDICT: VERIFIED (NOT_SUPPORTED)' and justify it hop by hop."
    ),
}


#: Message conventions of the app (``--messages``), default (``sizes.DEFAULT_MESSAGES``) first.
PER_AGENT = "per-agent"
SHARED = "shared"
CONVENTIONS = tuple(sorted((PER_AGENT, SHARED), key=lambda c: c != DEFAULT_MESSAGES))

#: The retrieval tool as the shared system prompt describes it to every agent.
TOOL_DESCRIPTION = ("search_passages(query, exclude): keyword search over encyclopedia passages; returns the "
                    f"{PASSAGES_PER_QUERY} best (title, text) pairs whose titles are not in exclude. It runs after the query "
                    "writer, once per QUERY line, and its passages go to the summariser.")

#: What the current agent is asked to do next (the last message under the shared convention).
_INSTRUCTION = {
    DECOMPOSER: "Decomposer, your turn: break the claim below into sub-questions, one 'Q<n>: ...' per line.",
    QUERY_WRITER: "Query writer, your turn: find the sub-question the notes above do not answer yet and write "
                  "one or two 'QUERY: ...' lines.",
    SUMMARIZER: "Summariser, your turn: write one 'NOTE [<article title>]: ...' per passage below.",
    VERIFIER: "Verifier, your turn: decide from the notes above whether every hop is covered and answer with "
              "a 'VERDICT: ...' line.",
}


def system_prompt(agent: str, examples: Sequence[HoverClaim]) -> str:
    """The fixed system prompt of ``agent`` (per-agent convention): role instructions plus worked examples.

    Args:
        agent: one of :data:`AGENTS`.
        examples: held-out real claims rendered as worked examples (same for every workflow).

    Raises:
        KeyError: unknown agent.
    """
    parts = [_ROLE[agent], "", "Worked examples:"]
    for n, ex in enumerate(examples, start=1):
        parts.append(f"\nExample {n}\n{CLAIM_LABEL} (example): {ex.claim}")
        parts += _example_lines(agent, ex)
    return "\n".join(parts)


def shared_system_prompt(examples: Sequence[HoverClaim]) -> str:
    """The one system prompt of the shared convention: the team, the tool, every agent's role and
    every agent's part of the worked examples (the same text for every call of every workflow)."""
    parts = ["You are a multi-hop fact-checking team of four agents that take turns on one claim. "
             "Each turn, one agent is told to act; the messages so far are the team's shared record.",
             "", "Tool:", TOOL_DESCRIPTION, "", "Agents:"]
    parts += [f"- {agent}: {_ROLE[agent]}" for agent in AGENTS]
    parts += ["", "Worked examples:"]
    for n, ex in enumerate(examples, start=1):
        parts.append(f"\nExample {n}\n{CLAIM_LABEL} (example): {ex.claim}")
        for agent in AGENTS:
            parts += [f"{agent}: {line}" for line in _example_lines(agent, ex)]
    return "\n".join(parts)


def instruction(agent: str) -> str:
    """The current agent's instruction, the last message of a call under the shared convention.

    Raises:
        KeyError: unknown agent.
    """
    return _INSTRUCTION[agent]


def _example_lines(agent: str, ex: HoverClaim) -> list[str]:
    """``agent``'s answer lines for the worked example ``ex``."""
    if agent == DECOMPOSER:
        return [f"Q{i}: What does the article '{t}' say that bears on the claim?" for i, t in enumerate(ex.titles, 1)]
    if agent == QUERY_WRITER:
        return [f"{QUERY_LABEL}: {t}" for t in ex.titles[:2]]
    if agent == SUMMARIZER:
        return [f"NOTE [{t}]: the passage states the facts about {t} that the claim relies on." for t in ex.titles]
    verdict = "SUPPORTED" if ex.label == "SUPPORTED" else "NOT_SUPPORTED"
    return [f"{VERDICT_LABEL}: {VERDICT_DONE} ({verdict}) - {len(ex.titles)} articles cover the {ex.num_hops} hops."]


def task_block(claim: HoverClaim) -> str:
    """The task part of every prompt: the claim line the scenario keys on."""
    return f"{CLAIM_LABEL}: {claim.claim}"
