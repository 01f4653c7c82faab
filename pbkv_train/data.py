"""Training data for the workflow predictor, built from v1 trace files (``docs/architecture.md``, "Trace format").

One *sample* per agent invocation: the agents before it (the prefix), the invoking agent, its request
features, and the next K agents as targets. The workflow's END is a real target (the step after
the last invocation of a completed workflow); targets past END are padding and are masked out of
the loss and the accuracy. Workflows are split into train/val/test by workflow id, never by row,
so no workflow leaks across splits. Invocations flagged ``internal`` (calls a framework makes
for itself, such as AutoGen's speaker selection) are not agent steps and are left out here; cache
replay reads the trace directly and keeps them.

Index layout of a :class:`Vocab` (fixed, so models and files agree):
``0 = <PAD>`` (prefix padding only, never a target), ``1 = <UNK>`` (agents not seen in training),
``2 = <END>``, ``3..`` the app's agents in sorted order.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from pbkv_contract.hints import END_AGENT, UNKNOWN_AGENT
from pbkv_contract.trace import InvocationRecord, TraceRecord, WorkflowEndRecord, read_trace
from pbkv_contract.features import FEATURE_DIM

log = logging.getLogger(__name__)

PAD_AGENT = "<PAD>"
PAD, UNK, END = 0, 1, 2
#: Default horizon K (PBKV Section 4.1 uses K = 3).
DEFAULT_K = 3
#: Default number of prefix agents a sample keeps (oldest dropped first).
DEFAULT_MAX_PREFIX = 16


@dataclass(frozen=True)
class Workflow:
    """The agents of one workflow in step order.

    Attributes:
        app: application name.
        workflow_id: the workflow.
        agents: agent name of each invocation, step order.
        features: one feature vector per invocation (length ``FEATURE_DIM`` or empty).
        ended: ``True`` when the trace holds its ``workflow_end`` with status ``completed``, so
            the step after the last invocation is a known END; otherwise targets past the last
            invocation are unknown and masked.
    """

    app: str
    workflow_id: str
    agents: tuple[str, ...]
    features: tuple[tuple[float, ...], ...]
    ended: bool


class Vocab:
    """Per-app agent vocabulary with the fixed special tokens PAD, UNK, END (indices 0, 1, 2).

    Args:
        app: application name the vocabulary belongs to.
        agents: the app's agent names (duplicates and special names are ignored).
    """

    def __init__(self, app: str, agents: Iterable[str]):
        self.app = app
        specials = {PAD_AGENT, UNKNOWN_AGENT, END_AGENT}
        self.tokens: list[str] = [PAD_AGENT, UNKNOWN_AGENT, END_AGENT] + sorted(set(agents) - specials)
        self._index = {name: i for i, name in enumerate(self.tokens)}

    def __len__(self) -> int:
        return len(self.tokens)

    def encode(self, agent: str) -> int:
        """Index of ``agent``; unknown agents map to UNK (1)."""
        return self._index.get(agent, UNK)

    def to_json(self) -> dict:
        """Serialisable form (app and token list)."""
        return {"app": self.app, "tokens": list(self.tokens)}

    @classmethod
    def from_json(cls, data: dict) -> "Vocab":
        """Inverse of :meth:`to_json`. Raises ``ValueError`` if the special tokens are not in place."""
        tokens = list(data["tokens"])
        if tokens[:3] != [PAD_AGENT, UNKNOWN_AGENT, END_AGENT]:
            raise ValueError("vocabulary does not start with <PAD>, <UNK>, <END>")
        vocab = cls(data["app"], [])
        vocab.tokens = tokens
        vocab._index = {name: i for i, name in enumerate(tokens)}
        return vocab


@dataclass
class SampleSet:
    """Samples as aligned numpy arrays (N samples, prefix length L, horizon K, feature dim F).

    Attributes:
        prefix: int64 [N, L] agent indices of the prefix, right-aligned (newest last), PAD-filled.
        prefix_len: int64 [N] number of real agents in ``prefix`` (<= L).
        step: int64 [N] 0-based step of the current invocation (may exceed L).
        current: int64 [N] index of the invoking agent.
        features: float32 [N, F] request features (zeros when the trace has none).
        targets: int64 [N, K] index of the k-th next agent (END included), PAD where masked.
        mask: bool [N, K] ``True`` where the target is real (at or before END).
    """

    prefix: np.ndarray
    prefix_len: np.ndarray
    step: np.ndarray
    current: np.ndarray
    features: np.ndarray
    targets: np.ndarray
    mask: np.ndarray

    def __len__(self) -> int:
        return int(self.current.shape[0])


@dataclass(frozen=True)
class Split:
    """Workflows split by workflow id: ``train``, ``val``, ``test`` lists of :class:`Workflow`."""

    train: list[Workflow]
    val: list[Workflow]
    test: list[Workflow]


def workflows_from_records(records: Iterable[TraceRecord], app: str | None = None) -> list[Workflow]:
    """Group trace records into :class:`Workflow` objects, in first-seen order.

    Invocations with ``internal`` set are skipped: the agents are the workflow's agent steps.

    Args:
        records: records of one or more trace files.
        app: keep only this app's workflows (``None``: all; then all must share one app).

    Raises:
        ValueError: ``app`` is ``None`` and the records mix several apps, or no workflow is left.
    """
    invocations: dict[str, list[InvocationRecord]] = {}
    ended: dict[str, bool] = {}
    apps: dict[str, str] = {}
    for rec in records:
        if app is not None and rec.app != app:
            continue
        apps[rec.workflow_id] = rec.app
        if isinstance(rec, InvocationRecord):
            if rec.internal:
                continue
            invocations.setdefault(rec.workflow_id, []).append(rec)
        elif isinstance(rec, WorkflowEndRecord):
            ended[rec.workflow_id] = rec.status == "completed"
    seen_apps = set(apps.values())
    if app is None and len(seen_apps) > 1:
        raise ValueError(f"traces mix apps {sorted(seen_apps)}; choose one with app=")
    out = []
    for wid, invs in invocations.items():
        invs.sort(key=lambda r: (r.step, r.t_start))
        feats = tuple(tuple(float(x) for x in r.features) for r in invs)
        out.append(Workflow(apps[wid], wid, tuple(r.agent for r in invs), feats, ended.get(wid, False)))
    if not out:
        raise ValueError(f"no workflows found{' for app ' + repr(app) if app else ''}")
    return out


def load_workflows(paths: Sequence[str | os.PathLike[str]], app: str | None = None) -> list[Workflow]:
    """Read trace files and group them into workflows (see :func:`workflows_from_records`).

    Raises:
        pbkv_contract.trace.TraceFormatError: unknown trace version or no invocation at all.
        ValueError: mixed apps without ``app``, or no workflow of ``app``.
    """
    return workflows_from_records(read_trace(list(paths)), app=app)


def split_workflows(workflows: Sequence[Workflow], seed: int, fractions: tuple[float, float] = (0.7, 0.15)) -> Split:
    """Seeded split by workflow: ``fractions`` = (train, val); the rest is test.

    Each split gets at least one workflow when there are three or more.

    Raises:
        ValueError: fewer than 3 workflows.
    """
    n = len(workflows)
    if n < 3:
        raise ValueError(f"need at least 3 workflows to split, got {n}")
    order = np.random.default_rng(seed).permutation(n)
    n_train = max(1, min(n - 2, int(round(fractions[0] * n))))
    n_val = max(1, min(n - n_train - 1, int(round(fractions[1] * n))))
    pick = lambda idx: [workflows[i] for i in idx]  # noqa: E731
    return Split(pick(order[:n_train]), pick(order[n_train : n_train + n_val]), pick(order[n_train + n_val :]))


def holdout_split(workflows: Sequence[Workflow], seed: int, val_fraction: float = 0.1) -> tuple[list[Workflow], list[Workflow]]:
    """Seeded (train, validation) split by workflow for final training: ``round(val_fraction * n)``
    workflows (at least 1 when n >= 2) validate, the rest train. One workflow: it trains, none validates."""
    n = len(workflows)
    n_val = 0 if n < 2 else max(1, int(round(val_fraction * n)))
    order = np.random.default_rng(seed).permutation(n)
    return [workflows[i] for i in order[n_val:]], [workflows[i] for i in order[:n_val]]


def build_vocab(app: str, workflows: Iterable[Workflow]) -> Vocab:
    """Vocabulary of the agents seen in ``workflows`` (use the training split only)."""
    return Vocab(app, (a for wf in workflows for a in wf.agents))


def build_samples(
    workflows: Sequence[Workflow],
    vocab: Vocab,
    k: int = DEFAULT_K,
    max_prefix: int = DEFAULT_MAX_PREFIX,
    feature_dim: int = FEATURE_DIM,
) -> SampleSet:
    """One sample per invocation; targets ``a_{i+1..i+K}`` with END at ``i+k == n`` and mask after.

    For a workflow ``a_0..a_{n-1}`` the sample at step ``i`` has prefix ``a_0..a_{i-1}`` (last
    ``max_prefix`` kept), current ``a_i``, and target ``k`` (1-based) equal to ``a_{i+k}`` when
    ``i+k < n``, END when ``i+k == n`` and the workflow ended, masked otherwise.

    Raises:
        ValueError: ``k`` < 1 or ``max_prefix`` < 1.
    """
    if k < 1 or max_prefix < 1:
        raise ValueError("k and max_prefix must be >= 1")
    rows = sum(len(wf.agents) for wf in workflows)
    prefix = np.zeros((rows, max_prefix), dtype=np.int64)
    prefix_len = np.zeros(rows, dtype=np.int64)
    step = np.zeros(rows, dtype=np.int64)
    current = np.zeros(rows, dtype=np.int64)
    features = np.zeros((rows, feature_dim), dtype=np.float32)
    targets = np.full((rows, k), PAD, dtype=np.int64)
    mask = np.zeros((rows, k), dtype=bool)
    r = 0
    for wf in workflows:
        ids = [vocab.encode(a) for a in wf.agents]
        n = len(ids)
        for i in range(n):
            hist = ids[max(0, i - max_prefix) : i]
            if hist:
                prefix[r, max_prefix - len(hist) :] = hist
            prefix_len[r] = len(hist)
            step[r] = i
            current[r] = ids[i]
            feats = wf.features[i] if i < len(wf.features) else ()
            if len(feats) == feature_dim:
                features[r] = feats
            elif feats:
                log.warning("workflow %s step %d: %d features, expected %d; using zeros", wf.workflow_id, i, len(feats), feature_dim)
            for j in range(1, k + 1):
                if i + j < n:
                    targets[r, j - 1], mask[r, j - 1] = ids[i + j], True
                elif i + j == n and wf.ended:
                    targets[r, j - 1], mask[r, j - 1] = END, True
            r += 1
    return SampleSet(prefix, prefix_len, step, current, features, targets, mask)


def encode_query(
    vocab: Vocab,
    history: Sequence[str],
    agent: str,
    features: Sequence[float],
    max_prefix: int = DEFAULT_MAX_PREFIX,
    feature_dim: int = FEATURE_DIM,
) -> tuple[np.ndarray, int, int, int, np.ndarray]:
    """Encode one serving query like a sample: ``(prefix[L], prefix_len, step, current, features[F])``.

    Unknown agents map to UNK; features of the wrong length become zeros (never an error).
    """
    ids = [vocab.encode(a) for a in history][-max_prefix:]
    prefix = np.zeros(max_prefix, dtype=np.int64)
    if ids:
        prefix[max_prefix - len(ids) :] = ids
    feats = np.zeros(feature_dim, dtype=np.float32)
    if len(features) == feature_dim:
        feats[:] = features
    return prefix, len(ids), len(history), vocab.encode(agent), feats
