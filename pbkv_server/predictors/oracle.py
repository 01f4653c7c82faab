"""Oracle predictor: reads each workflow's true future from the trace (simulator only).

It is the upper bound of prediction quality in the policy study (PBKV section 6: "oracle" rows).
"""

from __future__ import annotations

import bisect
from typing import Iterable, Sequence

from pbkv_contract.trace import InvocationRecord, TraceRecord, group_workflows
from pbkv_contract.prediction import END_AGENT, Prediction, PredictionQuery, Predictor

from pbkv_server.predictors.uniform import UniformPredictor

__all__ = ["OraclePredictor"]


class OraclePredictor(Predictor):
    """``P^(k)`` is one-hot on the agent of the workflow's k-th next invocation, or on END after its last.

    The position of a query in its workflow is found by its ``step`` among the workflow's recorded
    steps (falling back to ``len(history)`` when the step was not recorded). A workflow absent from
    the trace gets the uniform prediction and is counted in :attr:`unknown_queries`.

    Args:
        records: trace records (invocations are grouped by workflow and sorted by step).
        horizon: K (>= 1).

    Raises:
        ValueError: ``horizon`` < 1.
    """

    def __init__(self, records: Iterable[TraceRecord], horizon: int = 3):
        if horizon < 1:
            raise ValueError("horizon must be >= 1")
        self.horizon = horizon
        self._agents: dict[str, list[str]] = {}
        self._steps: dict[str, list[int]] = {}
        agents_by_app: dict[str | None, list[str]] = {}
        for wid, invs in group_workflows(records).items():
            self._agents[wid] = [r.agent for r in invs]
            self._steps[wid] = [r.step for r in invs]
            for r in invs:
                agents_by_app.setdefault(r.app, []).append(r.agent)
        self._fallback = UniformPredictor(horizon, agents_by_app)
        self.unknown_queries = 0

    def future(self, workflow_id: str, step: int, history_len: int | None = None) -> list[str]:
        """The true next ``horizon`` agents after ``step`` (END-padded); ``[]`` for an unknown workflow."""
        agents = self._agents.get(workflow_id)
        if agents is None:
            return []
        steps = self._steps[workflow_id]
        pos = bisect.bisect_left(steps, step)
        if pos >= len(steps) or steps[pos] != step:
            pos = history_len if history_len is not None else pos
        nxt = agents[pos + 1 : pos + 1 + self.horizon]
        return nxt + [END_AGENT] * (self.horizon - len(nxt))

    def predict(self, queries: Sequence[PredictionQuery]) -> list[Prediction]:
        """One-hot distributions of the true future for each query."""
        out = []
        for query in queries:
            future = self.future(query.workflow_id, query.step, len(query.history))
            if not future:
                self.unknown_queries += 1
                out.extend(self._fallback.predict([query]))
                continue
            out.append(Prediction([{agent: 1.0} for agent in future]))
        return out
