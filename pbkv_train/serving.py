"""Serving side of the trained predictor: :func:`load_predictor` -> :class:`pbkv_contract.prediction.Predictor`.

``pbkv-server --predictor PATH`` calls :func:`load_predictor` lazily. One call to
:meth:`GraphSagePredictor.predict` runs one batched forward pass for all queries.
"""

from __future__ import annotations

import logging
import os
from typing import Sequence

import numpy as np
import torch

from pbkv_contract.prediction import Prediction, PredictionQuery, Predictor
from pbkv_train.data import END, UNK, encode_query
from pbkv_train.store import LoadedModel, load_model

log = logging.getLogger(__name__)


def load_predictor(path: str | os.PathLike[str], app: str | None = None) -> "GraphSagePredictor":
    """Load a model file as a batched :class:`~pbkv_contract.prediction.Predictor`.

    Args:
        path: file written by ``pbkv-predictor train``.
        app: when given, the file must belong to this app.

    Raises:
        FileNotFoundError: no such file.
        pbkv_train.store.ModelFileError: wrong file type, format version or app.
    """
    return GraphSagePredictor(load_model(path, app=app))


class GraphSagePredictor(Predictor):
    """The trained GraphSAGE model behind the prediction interface (``docs/architecture.md``, "Prediction interface").

    Each returned distribution covers the app's agents plus END (UNK and PAD removed, the rest
    renormalised). Agents the model never saw map to UNK in the input. A query for another app
    gets uniform distributions (the model knows nothing about it) and a one-time warning.

    Attributes:
        app: the app the model was trained for.
        horizon: K.
    """

    def __init__(self, loaded: LoadedModel):
        self._net = loaded.net.eval()
        self._vocab = loaded.vocab
        self._cfg = loaded.net.config
        self.app = loaded.vocab.app
        self.horizon = self._cfg.k
        self.info = loaded.info
        # Output columns kept: END and every real agent (indices 2..V-1 minus UNK, which is 1).
        self._keep = np.arange(END, len(self._vocab))
        assert UNK < END and self._keep[0] == END  # layout fixed by pbkv_train.data
        self._names = [self._vocab.tokens[i] for i in self._keep]
        self._warned_apps: set[str] = set()

    def predict(self, queries: Sequence[PredictionQuery]) -> list[Prediction]:
        """One :class:`Prediction` with ``horizon`` distributions per query, in order."""
        if not queries:
            return []
        ours = [i for i, q in enumerate(queries) if q.app is None or q.app == self.app]
        out: list[Prediction | None] = [None] * len(queries)
        for i, q in enumerate(queries):
            if q.app is not None and q.app != self.app:
                if q.app not in self._warned_apps:
                    self._warned_apps.add(q.app)
                    log.warning("predictor for app %r got a query for app %r: answering uniform", self.app, q.app)
                uniform = {name: 1.0 / len(self._names) for name in self._names}
                out[i] = Prediction([dict(uniform) for _ in range(self.horizon)])
        if ours:
            probs = self.predict_proba([queries[i] for i in ours])
            for row, i in enumerate(ours):
                out[i] = Prediction([dict(zip(self._names, map(float, probs[row, k]))) for k in range(self.horizon)])
        return out  # type: ignore[return-value]

    def predict_proba(self, queries: Sequence[PredictionQuery]) -> np.ndarray:
        """float64 [B, K, len(agents)+1] probabilities over END + agents (UNK/PAD dropped, renormalised)."""
        cols = [encode_query(self._vocab, q.history, q.agent, q.features, self._cfg.max_prefix, self._cfg.feature_dim) for q in queries]
        batch = (
            torch.from_numpy(np.stack([c[0] for c in cols])),
            torch.tensor([c[1] for c in cols], dtype=torch.int64),
            torch.tensor([c[2] for c in cols], dtype=torch.int64),
            torch.tensor([c[3] for c in cols], dtype=torch.int64),
            torch.from_numpy(np.stack([c[4] for c in cols])),
        )
        with torch.no_grad():
            probs = torch.softmax(self._net(*batch).double(), dim=-1).numpy()
        kept = probs[:, :, self._keep]
        return kept / np.maximum(kept.sum(axis=-1, keepdims=True), 1e-12)
