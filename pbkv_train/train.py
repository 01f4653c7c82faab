"""Training and evaluation of the predictor and its baselines on one seeded split.

:func:`train_net` fits any of the neural models (logits [B, K, V] from the batch tensors) with
the masked cross-entropy and early stopping on the validation loss; :func:`run_experiment` does
one seed of the comparison: split by workflow, vocabulary and transition matrix from the training
split only, fit every requested model, report top-1 accuracy at k = 1..K on the test split.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch
from torch import nn

from pbkv_train.baselines import MarkovPredictor, MLPNet, TransformerNet
from pbkv_train.data import (
    DEFAULT_K,
    DEFAULT_MAX_PREFIX,
    SampleSet,
    Vocab,
    Workflow,
    build_samples,
    build_vocab,
    split_workflows,
)
from pbkv_train.model import GraphSagePredictorNet, ModelConfig, masked_loss, transition_matrix

#: Model names accepted by :func:`run_experiment` and the CLI, in table order.
MODEL_NAMES = ("graphsage", "graphsage-notxt", "markov1", "markov2", "markov3", "mlp", "transformer")


@dataclass
class TrainConfig:
    """Optimisation settings (AdamW, mini-batches, early stopping on validation loss).

    Attributes:
        epochs: maximum passes over the training samples.
        batch_size: samples per step.
        lr: AdamW learning rate.
        weight_decay: AdamW weight decay.
        patience: epochs without validation improvement before stopping.
    """

    epochs: int = 60
    batch_size: int = 256
    lr: float = 3e-3
    weight_decay: float = 1e-4
    patience: int = 8


def to_tensors(samples: SampleSet) -> dict[str, torch.Tensor]:
    """The batch tensors every neural model takes, plus ``targets`` and ``mask``."""
    return {
        "prefix": torch.from_numpy(samples.prefix),
        "prefix_len": torch.from_numpy(samples.prefix_len),
        "step": torch.from_numpy(samples.step),
        "current": torch.from_numpy(samples.current),
        "features": torch.from_numpy(samples.features),
        "targets": torch.from_numpy(samples.targets),
        "mask": torch.from_numpy(samples.mask),
    }


INPUTS = ("prefix", "prefix_len", "step", "current", "features")


def train_net(
    net: nn.Module,
    train: SampleSet,
    val: SampleSet | None,
    config: TrainConfig | None = None,
    seed: int = 0,
    on_epoch: Callable[[int, float], None] | None = None,
) -> nn.Module:
    """Fit ``net`` in place with the masked cross-entropy; returns it in eval mode.

    Keeps the weights of the epoch with the lowest validation loss (training loss when ``val``
    has no real target) and stops after ``config.patience`` epochs without improvement.

    Args:
        net: module mapping the batch tensors to logits [B, K, V].
        train: training samples.
        val: validation samples, or ``None``.
        config: optimisation settings.
        seed: seeds the batch order.
        on_epoch: called with (epoch, monitored loss) after each epoch (progress bars).
    """
    config = config or TrainConfig()
    gen = torch.Generator().manual_seed(seed)
    data = to_tensors(train)
    vdata = to_tensors(val) if val is not None and val.mask.any() else None
    opt = torch.optim.AdamW(net.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    best, best_state, stale = float("inf"), copy.deepcopy(net.state_dict()), 0
    n = len(train)
    for epoch in range(config.epochs):
        net.train()
        order = torch.randperm(n, generator=gen)
        total, weight = 0.0, 0
        for start in range(0, n, config.batch_size):
            idx = order[start : start + config.batch_size]
            logits = net(*(data[key][idx] for key in INPUTS))
            loss = masked_loss(logits, data["targets"][idx], data["mask"][idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
            weight += len(idx)
        monitored = total / max(weight, 1)
        if vdata is not None:
            net.eval()
            with torch.no_grad():
                monitored = float(masked_loss(net(*(vdata[key] for key in INPUTS)), vdata["targets"], vdata["mask"]))
        if on_epoch is not None:
            on_epoch(epoch, monitored)
        if monitored < best - 1e-4:
            best, best_state, stale = monitored, copy.deepcopy(net.state_dict()), 0
        else:
            stale += 1
            if stale >= config.patience:
                break
    net.load_state_dict(best_state)
    return net.eval()


def predict_proba(model: nn.Module | MarkovPredictor, samples: SampleSet, batch_size: int = 4096) -> np.ndarray:
    """Probabilities [N, K, V] of any trained model on ``samples``."""
    if isinstance(model, MarkovPredictor):
        return model.predict_proba(samples)
    data = to_tensors(samples)
    out = []
    model.eval()
    with torch.no_grad():
        for start in range(0, len(samples), batch_size):
            sl = slice(start, start + batch_size)
            out.append(torch.softmax(model(*(data[key][sl] for key in INPUTS)), dim=-1).numpy())
    return np.concatenate(out) if out else np.zeros((0, samples.targets.shape[1], 1))


def top1_accuracy(probs: np.ndarray, samples: SampleSet) -> np.ndarray:
    """Top-1 accuracy at each horizon k over the real targets: float64 [K] (NaN if none)."""
    hit = probs.argmax(axis=-1) == samples.targets
    valid = samples.mask
    counts = valid.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, (hit & valid).sum(axis=0) / np.maximum(counts, 1), np.nan)


def build_model(
    name: str,
    vocab: Vocab,
    train_wfs: Sequence[Workflow],
    k: int = DEFAULT_K,
    max_prefix: int = DEFAULT_MAX_PREFIX,
    feature_dim: int = 64,
) -> nn.Module | MarkovPredictor:
    """An untrained model by name (see :data:`MODEL_NAMES`).

    Raises:
        ValueError: unknown name.
    """
    v = len(vocab)
    if name in ("graphsage", "graphsage-notxt"):
        cfg = ModelConfig(vocab_size=v, k=k, max_prefix=max_prefix, feature_dim=feature_dim, use_text=name == "graphsage")
        return GraphSagePredictorNet(cfg, transition_matrix(list(train_wfs), vocab))
    if name.startswith("markov") and name[6:].isdigit():
        return MarkovPredictor(int(name[6:]), k, v)
    if name == "mlp":
        return MLPNet(v, k, max_prefix, feature_dim)
    if name == "transformer":
        return TransformerNet(v, k, max_prefix)
    raise ValueError(f"unknown model {name!r}; choose from {', '.join(MODEL_NAMES)}")


def fit(
    name: str,
    vocab: Vocab,
    train_wfs: Sequence[Workflow],
    train: SampleSet,
    val: SampleSet | None,
    seed: int,
    k: int = DEFAULT_K,
    max_prefix: int = DEFAULT_MAX_PREFIX,
    config: TrainConfig | None = None,
    on_epoch: Callable[[int, float], None] | None = None,
) -> nn.Module | MarkovPredictor:
    """Build and train model ``name`` on ``train`` (torch seeded with ``seed``)."""
    torch.manual_seed(seed)
    model = build_model(name, vocab, train_wfs, k=k, max_prefix=max_prefix, feature_dim=train.features.shape[1])
    if isinstance(model, MarkovPredictor):
        return model.fit(train)
    return train_net(model, train, val, config, seed=seed, on_epoch=on_epoch)


def run_experiment(
    workflows: Sequence[Workflow],
    models: Sequence[str],
    seed: int,
    k: int = DEFAULT_K,
    max_prefix: int = DEFAULT_MAX_PREFIX,
    train_size: int | None = None,
    config: TrainConfig | None = None,
    on_model: Callable[[str], None] | None = None,
) -> dict[str, np.ndarray]:
    """One seed of the comparison: returns model name -> test top-1 accuracy [K].

    Args:
        workflows: all workflows of one app.
        models: names from :data:`MODEL_NAMES`.
        seed: seeds the split and every model's initialisation.
        train_size: keep only the first ``train_size`` training workflows (learning curves);
            validation and test splits are unchanged.
        on_model: called after each model is done (progress bars).
    """
    split = split_workflows(workflows, seed)
    train_wfs = split.train[:train_size] if train_size else split.train
    vocab = build_vocab(workflows[0].app, train_wfs)
    train = build_samples(train_wfs, vocab, k, max_prefix)
    val = build_samples(split.val, vocab, k, max_prefix)
    test = build_samples(split.test, vocab, k, max_prefix)
    out = {}
    for name in models:
        model = fit(name, vocab, train_wfs, train, val, seed, k, max_prefix, config)
        out[name] = top1_accuracy(predict_proba(model, test), test)
        if on_model is not None:
            on_model(name)
    return out
