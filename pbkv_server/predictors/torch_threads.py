"""One torch CPU thread by default in the CLIs that may run a trained predictor (``pbkv-bench``, ``pbkv-server``).

A trained predictor (``pbkv_train/``) is a small model run at batch size 1 per prediction: more
intra-op threads buy nothing, and on a shared machine their OpenMP workers spin on cores that other
processes need (``pbkv-predictor`` makes the same choice for training). The limit is applied before
the model loads, and torch is imported only when a model file will be loaded (the built-in
predictors never need it), so a replay with ``markov`` starts as fast as before.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Iterable

__all__ = ["DEFAULT_TORCH_THREADS", "limit_torch_threads"]

#: torch intra-op threads of ``pbkv-bench replay`` and ``pbkv-server`` unless ``--threads`` says otherwise.
DEFAULT_TORCH_THREADS = 1


def limit_torch_threads(threads: int, predictor_specs: Iterable[str] = ()) -> int | None:
    """Set torch's intra-op CPU threads to ``threads`` if torch is or will be in use.

    Args:
        threads: threads to use (>= 1).
        predictor_specs: the predictor specs the command will build; one that names an existing
            file is a model to load (the rule of ``pbkv_server.predictors.make_predictor``), so
            torch is imported to set the limit first. Without one, the limit is set only if
            torch is already imported.

    Returns:
        The thread count torch had before (to restore it), or ``None`` if torch was left alone.

    Raises:
        ValueError: ``threads`` < 1.
    """
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    loads_model = any(os.path.isfile(os.path.expanduser(spec.strip())) for spec in predictor_specs)
    if "torch" not in sys.modules and not (loads_model and importlib.util.find_spec("torch") is not None):
        return None
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    return before
