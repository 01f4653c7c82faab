"""The HoVer fact-checking app in LangGraph: decompose, query, retrieve, summarise, verify, loop.

Graph (node names are the agent names the PBKV callback stamps)::

    START -> decomposer -> query_writer -> retrieve (tool) -> summarizer -> verifier
                               ^                                              |
                               +------ "NEEDS MORE EVIDENCE" and rounds left -+--> END

The verifier's answer decides the loop (a conditional edge), within a budget of ``max_rounds``
retrieval rounds. ``retrieve`` calls a LangChain tool over :class:`PassageIndex` and makes no LLM
call. How each call's messages are built is the message convention (:mod:`prompts`): one shared
system prompt, the workflow's accumulated messages and the current agent's instruction (the
default, LangGraph's message-state pattern), or per-agent system prompts with the agent's own
slice of the state.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, Sequence, TypedDict

from examples.hover_langchain import prompts as P
from examples.hover_langchain import sizes as S
from examples.hover_langchain.data import HoverClaim
from examples.hover_langchain.retrieval import PassageIndex

__all__ = ["ClaimState", "build_graph", "DEFAULT_MAX_ROUNDS", "PASSAGES_PER_QUERY"]

#: Retrieval rounds before the app stops looping (the hop budget; value and source in ``sizes``).
DEFAULT_MAX_ROUNDS = S.MAX_ROUNDS
#: Passages the retrieval tool returns per query (value and source in ``sizes``).
PASSAGES_PER_QUERY = S.PASSAGES_PER_QUERY


class ClaimState(TypedDict, total=False):
    """LangGraph state of one claim: the task, gathered evidence and the verifier's decision."""

    claim: HoverClaim
    subquestions: str
    queries: list[str]
    passages: list[tuple[str, str]]  # (title, text) retrieved in the latest round
    evidence: Annotated[list[str], operator.add]  # every retrieved passage, "[title] text", in order
    seen_titles: Annotated[list[str], operator.add]
    notes: Annotated[list[str], operator.add]
    history: Annotated[list[Any], operator.add]  # shared convention: every call's input and reply
    rounds: int
    verdict: str


def build_graph(llm: Any, index: PassageIndex, examples: Sequence[HoverClaim], max_rounds: int = DEFAULT_MAX_ROUNDS,
                messages: str = P.CONVENTIONS[0]) -> Any:
    """Compile the fact-checking graph.

    Args:
        llm: a LangChain chat model (e.g. ``ChatOpenAI`` pointed at pbkv-server, with the PBKV
            callback attached); called with ``ainvoke``.
        index: the passage index the retrieval tool searches.
        examples: held-out claims for the agents' worked examples (fixed for all workflows).
        max_rounds: retrieval-round budget (>= 1).
        messages: message convention, ``"shared"`` (the default) or ``"per-agent"`` (:data:`prompts.CONVENTIONS`).

    Returns:
        a compiled LangGraph graph; ``await graph.ainvoke({"claim": claim})`` returns the final
        :class:`ClaimState` with ``verdict`` set.

    Raises:
        ValueError: ``max_rounds`` < 1 or an unknown convention.
    """
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
    from langchain_core.tools import tool
    from langgraph.graph import END, START, StateGraph

    if max_rounds < 1:
        raise ValueError("max_rounds must be >= 1")
    if messages not in P.CONVENTIONS:
        raise ValueError(f"unknown message convention {messages!r}; choose from {', '.join(P.CONVENTIONS)}")
    shared = messages == P.SHARED
    systems = {agent: SystemMessage(P.system_prompt(agent, examples)) for agent in P.AGENTS}
    shared_system = SystemMessage(P.shared_system_prompt(examples))

    async def ask(agent: str, state: ClaimState, own: list[Any], shared_input: str) -> tuple[str, dict]:
        """Call the model as ``agent``: its own messages (per-agent convention), or the shared
        system prompt, the workflow's messages so far and the agent's instruction with
        ``shared_input``; returns the reply text and the state update of the shared record."""
        if not shared:
            reply = await llm.ainvoke([systems[agent], *own])
            return str(reply.content), {}
        turn = HumanMessage(f"{P.instruction(agent)}\n{shared_input}" if shared_input else P.instruction(agent))
        reply = await llm.ainvoke([shared_system, *state.get("history", []), turn])
        return str(reply.content), {"history": [turn, AIMessage(str(reply.content))]}

    @tool
    def search_passages(query: str, exclude: list[str]) -> list[tuple[str, str]]:
        """Keyword search over encyclopedia passages; returns (title, text) pairs not in exclude."""
        return [(p.title, p.text) for p in index.search(query, k=PASSAGES_PER_QUERY, exclude=exclude)]

    def evidence_block(state: ClaimState) -> str:
        notes = "\n".join(state.get("notes", [])) or "(no notes yet)"
        return f"{P.task_block(state['claim'])}\nSub-questions:\n{state.get('subquestions', '')}\nNotes so far:\n{notes}"

    async def decomposer(state: ClaimState) -> dict:
        task = P.task_block(state["claim"])
        content, update = await ask(P.DECOMPOSER, state, [HumanMessage(task)], task)
        lines = [ln for ln in content.splitlines() if ln.startswith("Q")]
        return {"subquestions": "\n".join(lines) or content, "rounds": 0, **update}

    async def query_writer(state: ClaimState) -> dict:
        content, update = await ask(P.QUERY_WRITER, state, [HumanMessage(evidence_block(state))], "")
        prefix = f"{P.QUERY_LABEL}:"
        queries = [ln[len(prefix):].strip() for ln in content.splitlines() if ln.startswith(prefix)]
        # A reply without a QUERY line still searches: fall back to the claim itself.
        return {"queries": queries or [state["claim"].claim], **update}

    def retrieve(state: ClaimState) -> dict:
        seen = list(state.get("seen_titles", []))
        found: list[tuple[str, str]] = []
        for query in state["queries"]:
            hits = search_passages.invoke({"query": query, "exclude": seen})
            found += [tuple(h) for h in hits]
            seen += [h[0] for h in hits]
        return {"passages": found, "seen_titles": [t for t, _ in found], "rounds": state.get("rounds", 0) + 1,
                "evidence": [f"[{t}] {x}" for t, x in found]}

    async def summarizer(state: ClaimState) -> dict:
        passages = "\n".join(f"[{t}] {x}" for t, x in state["passages"]) or "(the search returned nothing)"
        own = [HumanMessage(f"{P.task_block(state['claim'])}\nPassages:\n{passages}")]
        content, update = await ask(P.SUMMARIZER, state, own, f"Passages:\n{passages}")
        notes = [ln for ln in content.splitlines() if ln.startswith("NOTE [")]
        return {"notes": notes, **update}

    async def verifier(state: ClaimState) -> dict:
        # The verifier checks the notes against the passages themselves: its context accumulates
        # every retrieved passage, round after round (the prefix of its previous call).
        passages = "\n".join(state.get("evidence", []))
        block = f"{P.task_block(state['claim'])}\nSub-questions:\n{state.get('subquestions', '')}\nPassages:\n{passages}"
        notes = "\n".join(state.get("notes", []))
        content, update = await ask(P.VERIFIER, state, [HumanMessage(block), HumanMessage(f"Notes:\n{notes}")], "")
        return {"verdict": content.splitlines()[0] if content else "", **update}

    def after_verifier(state: ClaimState) -> str:
        needs_more = P.VERDICT_MORE in state.get("verdict", "") or P.VERDICT_DONE not in state.get("verdict", "")
        return P.QUERY_WRITER if needs_more and state.get("rounds", 0) < max_rounds else END

    graph = StateGraph(ClaimState)
    graph.add_node(P.DECOMPOSER, decomposer)
    graph.add_node(P.QUERY_WRITER, query_writer)
    graph.add_node("retrieve", retrieve)
    graph.add_node(P.SUMMARIZER, summarizer)
    graph.add_node(P.VERIFIER, verifier)
    graph.add_edge(START, P.DECOMPOSER)
    graph.add_edge(P.DECOMPOSER, P.QUERY_WRITER)
    graph.add_edge(P.QUERY_WRITER, "retrieve")
    graph.add_edge("retrieve", P.SUMMARIZER)
    graph.add_edge(P.SUMMARIZER, P.VERIFIER)
    graph.add_conditional_edges(P.VERIFIER, after_verifier, [P.QUERY_WRITER, END])
    return graph.compile()
