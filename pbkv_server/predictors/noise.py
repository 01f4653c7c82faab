"""Noise wrapper: blend any predictor with the uniform distribution, P~ = (1 - lambda) P + lambda U.

This is the robustness study of the PBKV paper (section 6, prediction-accuracy sensitivity):
lambda = 0 keeps the wrapped predictor, lambda = 1 is pure uniform guessing.
"""

from __future__ import annotations

from typing import Sequence

from pbkv_contract.prediction import Prediction, PredictionQuery, Predictor

from pbkv_server.predictors.uniform import UniformPredictor

__all__ = ["NoisePredictor", "mix"]


def mix(p: dict[str, float], u: dict[str, float], lam: float) -> dict[str, float]:
    """``(1 - lam) * p + lam * u`` over the union of both supports (both sum to 1, so does the result)."""
    keys = set(p) | set(u)
    return {k: (1.0 - lam) * p.get(k, 0.0) + lam * u.get(k, 0.0) for k in sorted(keys)}


class NoisePredictor(Predictor):
    """Wraps ``inner``: every distribution k of every prediction becomes ``(1 - lam) P^(k) + lam U``.

    Args:
        inner: the predictor to degrade.
        lam: lambda in [0, 1].
        uniform: the source of U (agents of the app + END); defaults to a fresh
            :class:`UniformPredictor` that learns the app's agents from the stream.

    Raises:
        ValueError: ``lam`` outside [0, 1].
    """

    learns_online = True  # observe() (or the queries themselves) change later predictions

    def __init__(self, inner: Predictor, lam: float, uniform: UniformPredictor | None = None):
        if not 0.0 <= lam <= 1.0:
            raise ValueError(f"noise lambda must be in [0, 1], got {lam}")
        self.inner = inner
        self.lam = lam
        self.horizon = inner.horizon
        self.uniform = uniform if uniform is not None else UniformPredictor(inner.horizon)

    def predict(self, queries: Sequence[PredictionQuery]) -> list[Prediction]:
        """The inner predictions, each distribution mixed with U of the query's app."""
        inner = self.inner.predict(queries)
        out = []
        for query, pred in zip(queries, inner):
            self.uniform.vocab.add_query(query)
            u = self.uniform.distribution(query.app)
            out.append(Prediction([mix(dist, u, self.lam) for dist in pred.dists]))
        return out

    def observe(self, query: PredictionQuery) -> None:
        """Forward to the inner predictor and the uniform vocabulary."""
        self.inner.observe(query)
        self.uniform.observe(query)

    def workflow_ended(self, app: str | None, workflow_id: str, status: str = "completed") -> None:
        """Forward to the inner predictor."""
        self.inner.workflow_ended(app, workflow_id, status)
