"""The multi-step workflow predictor of PBKV Appendix B (GraphSAGE + attention + h_txt).

Forward pass, for a batch of B samples over a vocabulary of V tokens (agents + PAD/UNK/END):

1. Agent embeddings ``E`` [V, d] are refined by two GraphSAGE layers over the row-normalised
   transition matrix ``T`` estimated from the training traces (Eq. 3): ``G = E + SAGE2(SAGE1(E))``.
   The skip term keeps agents with the same successors apart: mean aggregation alone maps two
   alternative tools that both hand back to the coder to nearly the same vector, and the model
   then failed, on some seeds, to tell which of them a workflow used (synthetic ``supervisor``).
2. Scaled dot-product attention over the prefix with the current agent as query (Eq. 4), in H
   heads of width d/H: ``c_h = softmax(q_h K_h^T / sqrt(d/H)) V_h`` with ``q = W_q g_cur`` and
   keys/values from the prefix agents' refined embeddings plus a recency position embedding.
   With one head, training locked onto a recency pattern on some seeds and missed the agent that
   decides the route (validation loss 0.27 instead of 0.23); four heads learned it on all 10
   seeds tried.
3. ``h_txt = ReLU(W_txt x)`` from the request features ``x`` (the stand-in of the prefill hidden
   state).
4. ``[g_cur, c, h_txt, e_step]`` -> two-layer MLP with dropout -> K heads of logits over the V
   tokens, all K in one forward pass. Loss: cross-entropy masked after END (:func:`masked_loss`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from pbkv_train.data import END, PAD, Workflow, Vocab

#: Steps beyond this share one step embedding.
MAX_STEP_EMBED = 63


@dataclass
class ModelConfig:
    """Dimensions of :class:`GraphSagePredictorNet` (defaults give about 350K parameters at V~20).

    Attributes:
        vocab_size: V, tokens including PAD/UNK/END.
        k: horizon K (number of heads).
        max_prefix: L, prefix agents attended over.
        feature_dim: F, request feature length.
        dim: d, embedding width.
        hidden: width of the two MLP layers.
        dropout: dropout probability in the MLP.
        heads: attention heads H (``dim`` must be a multiple of H).
        use_text: ``False`` drops h_txt (the ablation without the semantic stream).
    """

    vocab_size: int
    k: int = 3
    max_prefix: int = 16
    feature_dim: int = 64
    dim: int = 128
    hidden: int = 288
    dropout: float = 0.1
    heads: int = 4
    use_text: bool = True

    def __post_init__(self):
        if self.heads < 1 or self.dim % self.heads:
            raise ValueError(f"dim {self.dim} is not a multiple of heads {self.heads}")

    def to_json(self) -> dict:
        """Plain dict (stored in model files)."""
        return asdict(self)


class GraphSAGELayer(nn.Module):
    """One GraphSAGE layer with a weighted mean aggregator over a dense row-normalised adjacency.

    ``h_i' = ReLU(W_self h_i + W_neigh sum_j A_ij h_j + b)``, Hamilton et al., "Inductive
    Representation Learning on Large Graphs" (NeurIPS 2017), Eq. 1 with the mean aggregator; PBKV
    Appendix B uses it over the agent transition graph, with ``A`` the row-normalised transition
    matrix (Eq. 3), so ``sum_j A_ij h_j`` is the expected embedding of agent i's successor.

    Args:
        in_dim: input width.
        out_dim: output width.
        activation: apply ReLU (the last layer of a stack may skip it).

    Shapes: ``h`` [N, in_dim], ``adj`` [N, N] (rows sum to 1 or 0) -> [N, out_dim].
    """

    def __init__(self, in_dim: int, out_dim: int, activation: bool = True):
        super().__init__()
        self.lin_self = nn.Linear(in_dim, out_dim)
        self.lin_neigh = nn.Linear(in_dim, out_dim, bias=False)
        self.activation = activation

    def forward(self, h: torch.Tensor, adj: torch.Tensor) -> torch.Tensor:
        out = self.lin_self(h) + self.lin_neigh(adj @ h)
        return F.relu(out) if self.activation else out


def transition_matrix(workflows: list[Workflow], vocab: Vocab) -> np.ndarray:
    """Row-normalised agent transition matrix of PBKV Eq. 3: ``T_ij = n(i -> j) / sum_j n(i -> j)``.

    Counts consecutive invocations ``a_s -> a_{s+1}`` and, for completed workflows, the last
    agent ``-> END``. Rows without outgoing transitions stay zero.

    Returns:
        float32 [V, V].
    """
    v = len(vocab)
    counts = np.zeros((v, v), dtype=np.float64)
    for wf in workflows:
        ids = [vocab.encode(a) for a in wf.agents] + ([END] if wf.ended else [])
        for a, b in zip(ids, ids[1:]):
            counts[a, b] += 1
    rows = counts.sum(axis=1, keepdims=True)
    return np.divide(counts, rows, out=np.zeros_like(counts), where=rows > 0).astype(np.float32)


class GraphSagePredictorNet(nn.Module):
    """PBKV Appendix B predictor; see the module docstring for the forward pass.

    Args:
        config: dimensions.
        transition: [V, V] row-normalised transition matrix (:func:`transition_matrix`); stored as
            a buffer so it travels with the weights.

    Inputs of :meth:`forward` (a batch of B): ``prefix`` int64 [B, L], ``prefix_len`` int64 [B],
    ``step`` int64 [B], ``current`` int64 [B], ``features`` float32 [B, F].
    Output: logits [B, K, V]; the PAD column is forced to a large negative value.
    """

    def __init__(self, config: ModelConfig, transition: np.ndarray | torch.Tensor):
        super().__init__()
        c = self.config = config
        d = c.dim
        self.embed = nn.Embedding(c.vocab_size, d)
        self.sage1 = GraphSAGELayer(d, d, activation=True)
        self.sage2 = GraphSAGELayer(d, d, activation=False)
        self.register_buffer("adj", torch.as_tensor(transition, dtype=torch.float32))
        # Recency position: 0 = the current agent, 1 = the previous one, ... L.
        self.pos = nn.Embedding(c.max_prefix + 1, d)
        self.step_embed = nn.Embedding(MAX_STEP_EMBED + 1, d)
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d)
        self.v = nn.Linear(d, d)
        self.txt = nn.Linear(c.feature_dim, d) if c.use_text else None
        in_width = d * (4 if c.use_text else 3)
        self.mlp = nn.Sequential(
            nn.Linear(in_width, c.hidden), nn.ReLU(), nn.Dropout(c.dropout),
            nn.Linear(c.hidden, c.hidden), nn.ReLU(), nn.Dropout(c.dropout),
        )
        self.heads = nn.Linear(c.hidden, c.k * c.vocab_size)
        # Inference: the agent embeddings and their key/value projections depend on the weights
        # only, not on the query, so serving computes them once (cleared by train()).
        self._frozen: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None

    def train(self, mode: bool = True) -> "GraphSagePredictorNet":
        """As ``nn.Module.train``; also drops the inference cache (the weights may change)."""
        self._frozen = None
        return super().train(mode)

    def load_state_dict(self, *args, **kwargs):
        """As ``nn.Module.load_state_dict``; also drops the inference cache (new weights)."""
        self._frozen = None
        return super().load_state_dict(*args, **kwargs)

    def _agents(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(g, k(g), v(g))``: refined agent embeddings (PBKV Eq. 3 with the skip term) [V, d] and
        their key and value projections, cached between calls in inference (eval, no grad)."""
        frozen = self._frozen
        if frozen is not None:
            return frozen
        e = self.embed.weight
        g = e + self.sage2(self.sage1(e, self.adj), self.adj)  # [V, d]
        out = (g, self.k(g), self.v(g))
        if not self.training and not torch.is_grad_enabled():
            self._frozen = out
        return out

    def forward(self, prefix, prefix_len, step, current, features):  # noqa: D102 (class docstring)
        c = self.config
        g, kg, vg = self._agents()
        # F.embedding gathers rows like g[idx] but its backward is a fast dense scatter-add.
        g_cur = F.embedding(current, g)  # [B, d]
        # Keys/values: prefix agents (right-aligned) followed by the current agent.
        seq = torch.cat([prefix, current[:, None]], dim=1)  # [B, L+1]
        length = seq.shape[1]
        rec = torch.arange(length - 1, -1, -1, device=seq.device)  # recency of each column
        # Keys/values of token (agent a, recency r) are W (g_a + p_r) + b = (W g)_a + (W p)_r + b:
        # projecting the V agents and L+1 positions once and gathering is exact and ~B*L/V cheaper.
        pos = self.pos(rec)  # [L+1, d]
        keys = F.embedding(seq, kg) + (pos @ self.k.weight.T)[None]  # [B, L+1, d]
        values = F.embedding(seq, vg) + (pos @ self.v.weight.T)[None]
        valid = rec[None, :] <= prefix_len[:, None]  # current (rec 0) always valid
        # H heads of width d/H: scores [B, H, L+1], context [B, H, d/H] -> [B, d].
        b, h = seq.shape[0], c.heads
        q = self.q(g_cur).view(b, h, 1, -1)
        keys = keys.view(b, length, h, -1).transpose(1, 2)  # [B, H, L+1, d/H]
        values = values.view(b, length, h, -1).transpose(1, 2)
        scores = (q * keys).sum(-1) / math.sqrt(c.dim // h)  # [B, H, L+1]
        scores = scores.masked_fill(~valid[:, None, :], float("-inf"))
        ctx = (torch.softmax(scores, dim=-1)[..., None] * values).sum(2).reshape(b, -1)  # [B, d]
        parts = [g_cur, ctx, self.step_embed(step.clamp(max=MAX_STEP_EMBED))]
        if self.txt is not None:
            parts.append(F.relu(self.txt(features)))
        logits = self.heads(self.mlp(torch.cat(parts, dim=1))).view(-1, c.k, c.vocab_size)
        return logits.index_fill(2, torch.tensor([PAD], device=logits.device), -1e9)


def masked_loss(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the real targets only (padding after END excluded).

    Shapes: ``logits`` [B, K, V], ``targets`` int64 [B, K], ``mask`` bool [B, K] -> scalar.
    Returns 0 (with grad) when the mask is empty.
    """
    if not bool(mask.any()):
        return logits.sum() * 0.0
    return F.cross_entropy(logits[mask], targets[mask])


def count_parameters(model: nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
