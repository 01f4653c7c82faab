"""The prediction interface between the cache manager and any predictor.

Given a workflow's state (app, agents so far, current agent, request features), a predictor
returns K distributions over the app's agents plus END: ``P_w^(k)`` of PBKV Eq. 2 for
k = 1..K. Implementations: the trained GraphSAGE model (``predictor``), and in ``pbkv_server``
an online Markov model, an oracle that reads the future from a trace, a uniform predictor and a
noise wrapper. This module imports no torch so the engine core can load it anywhere. See
``docs/architecture.md``, "Prediction interface".
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from .hints import END_AGENT

__all__ = ["END_AGENT", "MAX_HORIZON", "PredictionQuery", "Prediction", "Predictor"]

#: Largest prediction horizon K any PBKV tool accepts. A score weighs step k by gamma^k: at the
#: default gamma 0.7 step 64 weighs 1e-10 of step 1, so steps beyond it change no order, while a
#: predictor's work and memory grow with K (``--horizon 1000000000`` ran for minutes without a
#: line; ``pbkv-predictor eval --k 100000000000`` died allocating its target array).
MAX_HORIZON = 64


@dataclass(frozen=True, slots=True)
class PredictionQuery:
    """The state of one workflow at one invocation.

    Attributes:
        app: application name (selects the model / vocabulary); ``None`` for unknown apps.
        workflow_id: the workflow.
        step: 0-based step of the current invocation.
        history: agents of the workflow's earlier invocations, oldest first (excludes ``agent``).
        agent: the agent making the current invocation.
        features: request feature vector (``pbkv_contract.features.request_features``), may be empty.
    """

    app: str | None
    workflow_id: str
    step: int
    history: tuple[str, ...]
    agent: str
    features: tuple[float, ...] = ()


@dataclass(slots=True)
class Prediction:
    """K distributions over next agents, ``dists[k-1]`` for the k-th next invocation.

    Each distribution maps agent name (or :data:`END_AGENT`) to probability; the values of one
    distribution sum to 1 (agents not listed have probability 0). Distributions after a certain
    END are conventionally ``{END_AGENT: 1.0}``.
    """

    dists: list[dict[str, float]] = field(default_factory=list)

    @property
    def horizon(self) -> int:
        """K, the number of distributions."""
        return len(self.dists)

    def survival(self) -> list[float]:
        """Survival probabilities s^(k) = prod_{j<k} (1 - p_END^(j)), k = 1..K (PBKV Eq. 2)."""
        out, s = [], 1.0
        for dist in self.dists:
            out.append(s)
            s *= 1.0 - dist.get(END_AGENT, 0.0)
        return out

    def mass(self, k: int, agents: Mapping[str, object] | Sequence[str] | set[str]) -> float:
        """A_w(c) . P^(k): probability that the k-th next agent (1-based) is one of ``agents``."""
        dist = self.dists[k - 1]
        return sum(dist.get(a, 0.0) for a in agents)


class Predictor(ABC):
    """Predicts each workflow's next K agents. Implementations must be cheap to call per request.

    Attributes:
        horizon: K, the number of future steps every :class:`Prediction` covers.
        learns_online: :meth:`observe` changes what :meth:`predict` returns (online learners):
            such a predictor is asked at each invocation, in order. Otherwise a caller may gather
            the queries of several invocations and ask once (one batched forward pass).
    """

    horizon: int = 3
    learns_online: bool = False

    @abstractmethod
    def predict(self, queries: Sequence[PredictionQuery]) -> list[Prediction]:
        """Return one :class:`Prediction` of ``horizon`` distributions per query, in order."""

    def observe(self, query: PredictionQuery) -> None:
        """Learn from one observed invocation (online predictors); default: nothing."""

    def workflow_ended(self, app: str | None, workflow_id: str, status: str = "completed") -> None:
        """Learn that a workflow ended (online predictors learn the END transition); default: nothing."""
