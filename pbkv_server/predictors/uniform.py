"""Uniform predictor: every next step is equally likely to be any agent of the app seen so far, or END."""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

from pbkv_contract.prediction import Prediction, PredictionQuery, Predictor

from pbkv_server.predictors.vocab import AgentVocabulary, uniform_dist

__all__ = ["UniformPredictor"]


class UniformPredictor(Predictor):
    """``P^(k) = U`` for every k, U uniform over the app's agents seen so far plus END.

    The vocabulary grows from every query and observed invocation, so it is a no-knowledge baseline
    that needs no training (the lambda = 1 end of the noise wrapper, PBKV section 6).

    Args:
        horizon: K, distributions per prediction (>= 1).
        known_agents: agents per app to start with (optional; otherwise learned from the stream).

    Raises:
        ValueError: ``horizon`` < 1.
    """

    learns_online = True  # observe() (or the queries themselves) change later predictions

    def __init__(self, horizon: int = 3, known_agents: Mapping[str | None, Iterable[str]] | None = None):
        if horizon < 1:
            raise ValueError("horizon must be >= 1")
        self.horizon = horizon
        self.vocab = AgentVocabulary(known_agents)

    def predict(self, queries: Sequence[PredictionQuery]) -> list[Prediction]:
        """One prediction of ``horizon`` identical uniform distributions per query."""
        out = []
        for query in queries:
            self.vocab.add_query(query)
            dist = self.distribution(query.app)
            out.append(Prediction([dict(dist) for _ in range(self.horizon)]))
        return out

    def distribution(self, app: str | None) -> dict[str, float]:
        """The current uniform distribution U of ``app`` (agents seen so far + END)."""
        return uniform_dist(self.vocab.agents(app))

    def observe(self, query: PredictionQuery) -> None:
        """Add the query's agents to the vocabulary."""
        self.vocab.add_query(query)
