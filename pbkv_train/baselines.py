"""Baselines for the predictor comparison (PBKV Table 3): Markov order 1-3, an MLP, a Transformer.

All use the samples of :mod:`pbkv_train.data` (same splits, same K, same vocabulary):

- :class:`MarkovPredictor`: for each horizon k, counts of the k-th next agent given the last
  ``order`` agents (current agent included; positions before the workflow start read as PAD, so
  the start of a workflow is part of the context). Unseen contexts back off to order-1, ..., 0
  (the marginal of the k-th next agent), then to uniform.
- :class:`MLPNet`: the model's inputs (one-hot prefix window, current agent, step, features)
  through a two-layer MLP with K heads; no graph, no attention.
- :class:`TransformerNet`: one Transformer encoder layer over the agent sequence (prefix +
  current) with position embeddings, read out at the current agent; agents only, no features.
"""

from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from pbkv_train.data import PAD, SampleSet
from pbkv_train.model import MAX_STEP_EMBED


class MarkovPredictor:
    """Order-n Markov predictor of the next K agents, with back-off (counts, no smoothing).

    Args:
        order: n >= 1, number of most recent agents (the current one included) in the context.
        k: horizon K.
        vocab_size: V; outputs are distributions over all V indices (PAD gets 0).

    Raises:
        ValueError: ``order`` < 1.
    """

    def __init__(self, order: int, k: int, vocab_size: int):
        if order < 1:
            raise ValueError("Markov order must be >= 1")
        self.order, self.k, self.vocab_size = order, k, vocab_size
        # counts[j][n][context tuple of length n] -> Counter of the (j+1)-th next agent.
        self.counts: list[list[dict[tuple[int, ...], Counter]]] = [
            [defaultdict(Counter) for _ in range(order + 1)] for _ in range(k)
        ]

    def fit(self, samples: SampleSet) -> "MarkovPredictor":
        """Count every real (unmasked) target under each context length 0..order."""
        for row in range(len(samples)):
            ctx = self._context(samples, row)
            for j in range(self.k):
                if samples.mask[row, j]:
                    target = int(samples.targets[row, j])
                    for n in range(self.order + 1):
                        self.counts[j][n][ctx[len(ctx) - n :] if n else ()][target] += 1
        return self

    def predict_proba(self, samples: SampleSet) -> np.ndarray:
        """float64 [N, K, V]: for each sample and horizon, the backed-off count distribution."""
        out = np.zeros((len(samples), self.k, self.vocab_size))
        for row in range(len(samples)):
            ctx = self._context(samples, row)
            for j in range(self.k):
                out[row, j] = self._dist(j, ctx)
        return out

    def _context(self, samples: SampleSet, row: int) -> tuple[int, ...]:
        hist = [int(x) for x in samples.prefix[row, samples.prefix.shape[1] - (self.order - 1) :]] if self.order > 1 else []
        return tuple(hist) + (int(samples.current[row]),)

    def _dist(self, j: int, ctx: tuple[int, ...]) -> np.ndarray:
        dist = np.zeros(self.vocab_size)
        for n in range(self.order, -1, -1):
            counter = self.counts[j][n].get(ctx[len(ctx) - n :] if n else ())
            if counter:
                total = sum(counter.values())
                for idx, c in counter.items():
                    dist[idx] = c / total
                return dist
        dist[1:] = 1.0 / (self.vocab_size - 1)  # nothing seen at all: uniform over non-PAD
        return dist


class MLPNet(nn.Module):
    """MLP baseline on the model's inputs; output logits [B, K, V] (PAD column forced low).

    Inputs: one-hot of each prefix position (L x V), one-hot current agent (V), step embedding
    (d) and the request features (F), concatenated -> Linear(hidden) -> ReLU -> Dropout ->
    Linear(hidden) -> ReLU -> Dropout -> Linear(K*V).
    """

    def __init__(self, vocab_size: int, k: int, max_prefix: int, feature_dim: int, hidden: int = 256, dropout: float = 0.1):
        super().__init__()
        self.vocab_size, self.k = vocab_size, k
        self.step_embed = nn.Embedding(MAX_STEP_EMBED + 1, 32)
        width = (max_prefix + 1) * vocab_size + 32 + feature_dim
        self.mlp = nn.Sequential(
            nn.Linear(width, hidden), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(hidden, hidden), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(hidden, k * vocab_size),
        )

    def forward(self, prefix, prefix_len, step, current, features):  # noqa: D102 (class docstring)
        seq = torch.cat([prefix, current[:, None]], dim=1)
        onehot = F.one_hot(seq, self.vocab_size).float().flatten(1)
        x = torch.cat([onehot, self.step_embed(step.clamp(max=MAX_STEP_EMBED)), features], dim=1)
        logits = self.mlp(x).view(-1, self.k, self.vocab_size)
        return logits.index_fill(2, torch.tensor([PAD], device=logits.device), -1e9)


class TransformerNet(nn.Module):
    """1-layer Transformer encoder over the agent sequence; output logits [B, K, V].

    Tokens: prefix agents (PAD positions masked out of attention) then the current agent, each
    with a learned absolute position embedding; the encoder output at the current agent feeds a
    linear layer with K heads. Uses agents only (no request features).
    """

    def __init__(self, vocab_size: int, k: int, max_prefix: int, dim: int = 64, heads: int = 4, dropout: float = 0.1):
        super().__init__()
        self.vocab_size, self.k = vocab_size, k
        self.embed = nn.Embedding(vocab_size, dim)
        self.pos = nn.Embedding(max_prefix + 1, dim)
        self.encoder = nn.TransformerEncoderLayer(dim, heads, dim_feedforward=2 * dim, dropout=dropout, batch_first=True)
        self.head = nn.Linear(dim, k * vocab_size)

    def forward(self, prefix, prefix_len, step, current, features):  # noqa: D102 (class docstring)
        seq = torch.cat([prefix, current[:, None]], dim=1)
        length = seq.shape[1]
        rec = torch.arange(length - 1, -1, -1, device=seq.device)
        pad = rec[None, :] > prefix_len[:, None]
        h = self.encoder(self.embed(seq) + self.pos(torch.arange(length, device=seq.device))[None], src_key_padding_mask=pad)
        logits = self.head(h[:, -1]).view(-1, self.k, self.vocab_size)
        return logits.index_fill(2, torch.tensor([PAD], device=logits.device), -1e9)
