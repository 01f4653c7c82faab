"""Any predictor backbone trained on traces, scored, and served in process (PBKV Figure 5b).

The paper compares the GraphSAGE predictor with other backbones (MLP, Markov-3, Transformer) by
their accuracy and by the hit rate the cache reaches with each. :func:`train_backbone` fits one
of :data:`pbkv_train.train.MODEL_NAMES` on trace records with the recipe of ``pbkv-predictor
train`` (a seeded 10% validation hold-out for early stopping, the vocabulary of the training
split), :meth:`Backbone.accuracy` scores it on other records, and :meth:`Backbone.predictor`
serves it behind the prediction interface, like a model file loaded by
:func:`pbkv_train.serving.load_predictor`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from pbkv_contract.prediction import PredictionQuery
from pbkv_contract.trace import TraceRecord
from pbkv_train.data import (DEFAULT_K, DEFAULT_MAX_PREFIX, PAD, SampleSet, Vocab, Workflow, build_samples, build_vocab,
                            encode_query, holdout_split, workflows_from_records)
from pbkv_train.serving import GraphSagePredictor
from pbkv_train.train import TrainConfig, fit, predict_proba, top1_accuracy

__all__ = ["Backbone", "BackbonePredictor", "train_backbone", "fit_workflows", "VALIDATION_SHARE"]

#: Share of the training workflows held out for early stopping (as ``pbkv-predictor train``).
VALIDATION_SHARE = 0.1


@dataclass
class Backbone:
    """A trained backbone with what serving it needs.

    Attributes:
        name: model name (:data:`pbkv_train.train.MODEL_NAMES`, or ``markov<n>``).
        model: the trained network or Markov counts.
        vocab: the training split's vocabulary.
        k: horizon K.
        max_prefix: prefix agents per sample.
        info: training summary (workflows, samples, seed).
    """

    name: str
    model: object
    vocab: Vocab
    k: int = DEFAULT_K
    max_prefix: int = DEFAULT_MAX_PREFIX
    info: dict = field(default_factory=dict)

    def accuracy(self, records: Sequence[TraceRecord]) -> np.ndarray:
        """Top-1 accuracy at k = 1..K (float64 [K], NaN where no target) on the workflows of
        ``records`` (internal invocations left out, as in training)."""
        samples = build_samples(workflows_from_records(records, app=self.vocab.app), self.vocab, self.k,
                                self.max_prefix)
        return top1_accuracy(predict_proba(self.model, samples), samples)

    def predictor(self) -> "BackbonePredictor":
        """A fresh :class:`BackbonePredictor` serving this backbone."""
        return BackbonePredictor(self)


class BackbonePredictor(GraphSagePredictor):
    """A :class:`Backbone` behind the prediction interface: the same distributions over END + the
    app's agents (PAD and UNK dropped, renormalised) and the same handling of other apps as a
    served GraphSAGE model file; one batched forward pass (or count lookup) per call."""

    def __init__(self, backbone: Backbone):  # noqa: D107 (class docstring)
        self._backbone = backbone
        self._model = backbone.model
        self._vocab = backbone.vocab
        self.app = backbone.vocab.app
        self.horizon = backbone.k
        self.info = dict(backbone.info)
        self._keep = np.arange(2, len(self._vocab))  # END and every real agent (UNK is 1, PAD 0)
        self._names = [self._vocab.tokens[i] for i in self._keep]
        self._warned_apps: set[str] = set()

    def predict_proba(self, queries: Sequence[PredictionQuery]) -> np.ndarray:
        """float64 [B, K, len(agents)+1] probabilities over END + agents."""
        b = self._backbone
        cols = [encode_query(self._vocab, q.history, q.agent, q.features, b.max_prefix) for q in queries]
        n = len(cols)
        samples = SampleSet(
            prefix=np.stack([c[0] for c in cols]), prefix_len=np.array([c[1] for c in cols], dtype=np.int64),
            step=np.array([c[2] for c in cols], dtype=np.int64), current=np.array([c[3] for c in cols], dtype=np.int64),
            features=np.stack([c[4] for c in cols]), targets=np.full((n, b.k), PAD, dtype=np.int64),
            mask=np.zeros((n, b.k), dtype=bool),
        )
        probs = np.asarray(predict_proba(self._model, samples), dtype=np.float64)
        kept = probs[:, :, self._keep]
        return kept / np.maximum(kept.sum(axis=-1, keepdims=True), 1e-12)


def train_backbone(name: str, records: Sequence[TraceRecord], *, app: str | None = None, seed: int = 0,
                   k: int = DEFAULT_K, epochs: int = 60, max_prefix: int = DEFAULT_MAX_PREFIX,
                   on_epoch: Callable[[int, float], None] | None = None) -> Backbone:
    """Fit backbone ``name`` on the workflows of ``records`` (``pbkv-predictor train``'s recipe,
    :func:`fit_workflows`).

    Raises:
        ValueError: no workflow of the app, mixed apps without ``app``, or an unknown model.
    """
    return fit_workflows(name, workflows_from_records(records, app=app), seed=seed, k=k, epochs=epochs,
                         max_prefix=max_prefix, on_epoch=on_epoch)[0]


def fit_workflows(name: str, workflows: Sequence[Workflow], *, seed: int = 0, k: int = DEFAULT_K, epochs: int = 60,
                  max_prefix: int = DEFAULT_MAX_PREFIX,
                  on_epoch: Callable[[int, float], None] | None = None) -> tuple[Backbone, SampleSet | None]:
    """Fit backbone ``name`` on ``workflows`` of one app: a seeded :data:`VALIDATION_SHARE`
    hold-out for early stopping, the vocabulary of the rest, at most ``epochs`` epochs.

    Args:
        name: a model of :data:`pbkv_train.train.MODEL_NAMES` (or ``markov<n>``).
        seed: seeds the hold-out, the initialisation and the batch order.
        k: horizon K.
        on_epoch: called with (epoch, monitored loss) after each epoch of a network.

    Returns:
        the backbone and the validation samples (``None`` for a single workflow).

    Raises:
        ValueError: an unknown model.
    """
    train_wfs, val_wfs = holdout_split(workflows, seed, VALIDATION_SHARE)
    vocab = build_vocab(workflows[0].app, train_wfs)
    train = build_samples(train_wfs, vocab, k, max_prefix)
    val = build_samples(val_wfs, vocab, k, max_prefix) if val_wfs else None
    model = fit(name, vocab, train_wfs, train, val, seed, k, max_prefix, TrainConfig(epochs=epochs), on_epoch)
    info = {"model": name, "seed": seed, "train_workflows": len(train_wfs), "train_samples": len(train)}
    return Backbone(name, model, vocab, k, max_prefix, info), val
