"""Online first-order Markov predictor learned from the live stream (no training, cold start uniform).

Transition counts ``n(a -> b)`` per app are updated on every observed invocation (previous agent of
the workflow -> current agent) and on workflow end (last agent -> END). The k-step distributions
follow the chain, each conditional on the workflow not having ended before step k, which is the
convention of PBKV Eq. 2 (the score multiplies ``P^(k)`` by the survival probability
``s^(k) = prod_{j<k} (1 - P^(j)(END))``) and of the trained model (its head k learns only from
workflows still running at step k):

    P^(1) = T[a] for the current agent a,
    P^(k+1) = sum_b L^(k)(b) T[b],   L^(k)(b) = P^(k)(b) / (1 - P^(k)(END)) for agents b,

so ``s^(k) P^(k)(c)`` is the chain's probability that the k-th next invocation is c. Here
``T[b](c) = (n(b -> c) + alpha) / (sum_c' n(b -> c') + alpha |V|)`` over the vocabulary
V = agents seen so far + END; a row with no counts (and alpha = 0) is uniform over V. After a
certain END the distributions are ``{END: 1}``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from pbkv_contract.prediction import END_AGENT, Prediction, PredictionQuery, Predictor

from pbkv_server.predictors.vocab import AgentVocabulary, app_key, uniform_dist

__all__ = ["MarkovPredictor"]


@dataclass(slots=True)
class _WorkflowState:
    app: str | None
    step: int
    agent: str


class MarkovPredictor(Predictor):
    """Online Markov chain over agents, one per app.

    Args:
        horizon: K (>= 1).
        alpha: additive smoothing of each row (>= 0); 0 uses raw frequencies.

    Raises:
        ValueError: ``horizon`` < 1 or ``alpha`` < 0.
    """

    learns_online = True  # observe() (or the queries themselves) change later predictions

    def __init__(self, horizon: int = 3, alpha: float = 0.0):
        if horizon < 1:
            raise ValueError("horizon must be >= 1")
        if alpha < 0:
            raise ValueError("alpha must be >= 0")
        self.horizon = horizon
        self.alpha = alpha
        self.vocab = AgentVocabulary()
        self._counts: dict[str, dict[str, dict[str, int]]] = {}
        self._workflows: dict[str, _WorkflowState] = {}

    # ------------------------------------------------------------------ learning

    def observe(self, query: PredictionQuery) -> None:
        """Count the transition (previous agent of the workflow -> ``query.agent``).

        The previous agent is the last one observed for the workflow, else ``history[-1]``. A query
        whose step is not after the workflow's last observed step is a duplicate and is ignored.
        """
        self.vocab.add_query(query)
        state = self._workflows.get(query.workflow_id)
        if state is not None and query.step <= state.step:
            return
        prev = state.agent if state is not None else (query.history[-1] if query.history else None)
        if prev is not None:
            self._count(query.app, prev, query.agent)
        self._workflows[query.workflow_id] = _WorkflowState(query.app, query.step, query.agent)

    def workflow_ended(self, app: str | None, workflow_id: str, status: str = "completed") -> None:
        """Count (last agent -> END) once; unknown or already-ended workflows are ignored."""
        state = self._workflows.pop(workflow_id, None)
        if state is not None:
            self._count(state.app if state.app is not None else app, state.agent, END_AGENT)

    def _count(self, app: str | None, src: str, dst: str) -> None:
        row = self._counts.setdefault(app_key(app), {}).setdefault(src, {})
        row[dst] = row.get(dst, 0) + 1

    # ------------------------------------------------------------------ prediction

    def transition_row(self, app: str | None, agent: str) -> dict[str, float]:
        """``T[agent]`` of ``app`` as a distribution over agents seen so far + END."""
        support = uniform_dist(self.vocab.agents(app))
        row = self._counts.get(app_key(app), {}).get(agent)
        if agent == END_AGENT:
            return {END_AGENT: 1.0}
        total = sum(row.values()) if row else 0
        denom = total + self.alpha * len(support)
        if denom <= 0:
            return support
        return {c: ((row or {}).get(c, 0) + self.alpha) / denom for c in support if (row or {}).get(c, 0) + self.alpha > 0}

    def predict(self, queries: Sequence[PredictionQuery]) -> list[Prediction]:
        """K chained distributions per query, starting from the query's current agent, each
        conditional on the workflow still running (see the module docstring)."""
        out = []
        for query in queries:
            self.vocab.add_query(query)
            rows: dict[str, dict[str, float]] = {}
            alive = {query.agent: 1.0}  # L^(k): where the workflow is, given it is still running
            dists = []
            for _ in range(self.horizon):
                if not alive:  # END was certain: later steps are END by convention
                    dists.append({END_AGENT: 1.0})
                    continue
                nxt: dict[str, float] = {}
                for src, p in alive.items():
                    if src not in rows:
                        rows[src] = self.transition_row(query.app, src)
                    for dst, q in rows[src].items():
                        nxt[dst] = nxt.get(dst, 0.0) + p * q
                dists.append(nxt)
                running = 1.0 - nxt.get(END_AGENT, 0.0)
                alive = ({a: p / running for a, p in nxt.items() if a != END_AGENT and p > 0.0}
                         if running > 1e-12 else {})
            out.append(Prediction(dists))
        return out
