"""Model files: one ``torch.save`` file holding the weights and the metadata needed to serve them.

Content (a dict, loadable with ``torch.load(weights_only=True)``): ``format`` =
:data:`FORMAT_NAME`, ``version`` = :data:`FORMAT_VERSION`, ``app``, ``vocab`` (token list, PAD/UNK/END
first), ``config`` (:class:`pbkv_train.model.ModelConfig` fields: K, dims, ...), ``state_dict``
(weights and the transition matrix buffer) and ``info`` (training summary).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from pbkv_contract.files import replace_file
from pbkv_train.data import Vocab
from pbkv_train.model import GraphSagePredictorNet, ModelConfig

FORMAT_NAME = "pbkv-predictor"
#: Bump when the file layout or the network changes incompatibly.
FORMAT_VERSION = 2


class ModelFileError(ValueError):
    """A model file cannot be used: not a predictor file, another format version, or another app."""


@dataclass
class LoadedModel:
    """A loaded model file: the network (eval mode), its vocabulary, and the stored metadata."""

    net: GraphSagePredictorNet
    vocab: Vocab
    info: dict


def save_model(path: str | os.PathLike[str], net: GraphSagePredictorNet, vocab: Vocab, info: dict | None = None) -> None:
    """Write ``net`` + metadata to ``path`` (one file; parent directories are created), whole or
    not at all (:func:`pbkv_contract.files.replace_file`: written aside, then renamed over ``path``,
    so a stopped or failed save keeps the previous model file)."""
    payload = {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "app": vocab.app,
        "vocab": list(vocab.tokens),
        "config": net.config.to_json(),
        "state_dict": {k: v.detach().clone() for k, v in net.state_dict().items()},
        "info": dict(info or {}),
    }
    replace_file(path, lambda tmp: torch.save(payload, os.fspath(tmp)))


def load_model(path: str | os.PathLike[str], app: str | None = None) -> LoadedModel:
    """Load a model file written by :func:`save_model`.

    Args:
        path: the file.
        app: when given, the file must have been trained for this app.

    Raises:
        FileNotFoundError: no such file.
        ModelFileError: not a PBKV predictor file, a format version other than
            :data:`FORMAT_VERSION`, an app other than ``app``, or damaged contents (a
            configuration or weights that do not fit together).
    """
    try:
        payload = torch.load(os.fspath(path), map_location="cpu", weights_only=True)
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        raise
    except Exception as exc:  # torch/pickle raise many types (UnpicklingError, KeyError, ...)
        raise ModelFileError(f"{path}: not a PBKV predictor model file ({exc.__class__.__name__})") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT_NAME:
        raise ModelFileError(f"{path}: not a PBKV predictor model file")
    version = payload.get("version")
    if version != FORMAT_VERSION:
        if isinstance(version, int) and not isinstance(version, bool) and version > FORMAT_VERSION:
            advice = "it was written by a newer PBKV: upgrade this installation"
        else:
            advice = "retrain with `pbkv-predictor train`"
        shown = version if isinstance(version, int) else repr(version)
        raise ModelFileError(
            f"{path}: model file format version {shown}, this code reads version {FORMAT_VERSION}; {advice}"
        )
    if app is not None and payload.get("app") != app:
        raise ModelFileError(f"{path}: model was trained for app {payload.get('app')!r}, not {app!r}")
    try:
        vocab = Vocab.from_json({"app": payload["app"], "tokens": payload["vocab"]})
        config = ModelConfig(**payload["config"])
        state = payload["state_dict"]
        v = config.vocab_size
        if len(vocab) != v:
            raise ValueError(f"vocabulary of {len(vocab)} tokens for a network over {v}")
        if tuple(state["adj"].shape) != (v, v):
            raise ValueError(f"transition matrix of shape {tuple(state['adj'].shape)}, expected {(v, v)}")
        net = GraphSagePredictorNet(config, state["adj"])
        net.load_state_dict(state)
        info = dict(payload.get("info", {}))
    except (AttributeError, KeyError, TypeError, ValueError, RuntimeError) as exc:
        # A file with the right header but damaged contents (edited config, missing or
        # mis-shaped weights): one clear error instead of a torch traceback.
        raise ModelFileError(f"{path}: damaged PBKV predictor model file ({exc.__class__.__name__}: {exc})"[:300]) from None
    return LoadedModel(net.eval(), vocab, info)
