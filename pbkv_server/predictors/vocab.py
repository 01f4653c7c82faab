"""Per-app agent vocabularies learned from the stream (shared by the uniform and Markov providers)."""

from __future__ import annotations

from typing import Iterable, Mapping

from pbkv_contract.prediction import END_AGENT, PredictionQuery

__all__ = ["AgentVocabulary", "app_key", "uniform_dist"]


def app_key(app: str | None) -> str:
    """Dictionary key of an app; anonymous/unknown apps share the key ``""``."""
    return app or ""


def uniform_dist(agents: Iterable[str]) -> dict[str, float]:
    """Uniform distribution over ``agents`` plus :data:`END_AGENT` (END is always a possible next step)."""
    support = set(agents)
    support.add(END_AGENT)
    p = 1.0 / len(support)
    return {a: p for a in sorted(support)}


class AgentVocabulary:
    """The agents seen so far for each app, in first-seen order.

    Args:
        known: optional agents per app known up front (e.g. every agent of a trace).
    """

    def __init__(self, known: Mapping[str | None, Iterable[str]] | None = None):
        self._agents: dict[str, dict[str, None]] = {}
        for app, agents in (known or {}).items():
            for agent in agents:
                self.add(app, agent)

    def add(self, app: str | None, agent: str) -> None:
        """Record that ``agent`` belongs to ``app`` (END is never stored as an agent)."""
        if agent != END_AGENT:
            self._agents.setdefault(app_key(app), {})[agent] = None

    def add_query(self, query: PredictionQuery) -> None:
        """Record the current agent and every history agent of ``query``."""
        # one C-level update per query (a coding agent's history is hundreds of calls, and every
        # query repeats it): new agents join in first-seen order, as add() one at a time would
        # record them; END, never stored, is taken out again
        agents = self._agents.get(app_key(query.app))
        if agents is None:
            agents = self._agents[app_key(query.app)] = {}
        agents.update(dict.fromkeys(query.history))
        agents[query.agent] = None
        agents.pop(END_AGENT, None)

    def size(self, app: str | None) -> int:
        """Number of agents of ``app`` seen so far; it grows whenever the agent set does (agents are
        never removed), so it versions :meth:`agents`."""
        return len(self._agents.get(app_key(app), ()))

    def agents(self, app: str | None) -> list[str]:
        """Agents of ``app`` seen so far, first-seen order (empty list if none)."""
        return list(self._agents.get(app_key(app), ()))
