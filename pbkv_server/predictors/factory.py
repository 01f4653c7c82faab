"""Build a predictor from a command-line spec: ``oracle | uniform | markov | context | noise:LAMBDA | PATH``."""

from __future__ import annotations

import logging
import os
from typing import Sequence

from pbkv_contract.trace import InvocationRecord, TraceRecord
from pbkv_contract.prediction import Predictor

from pbkv_server.predictors.context import ContextPredictor
from pbkv_server.predictors.markov import MarkovPredictor
from pbkv_server.predictors.noise import NoisePredictor
from pbkv_server.predictors.oracle import OraclePredictor
from pbkv_server.predictors.uniform import UniformPredictor

__all__ = ["make_predictor", "check_predictor_spec", "PREDICTOR_SPECS", "LIVE_PREDICTOR_SPECS", "DEFAULT_ONLINE_PREDICTOR"]

log = logging.getLogger(__name__)

#: The predictor of a predictive policy when none is named (server, plugins, replays, studies):
#: online, no training. ``context`` rather than ``markov``: on real orchestrator-led traces (ChatDev)
#: it predicts the next agent far better, and it is no worse on our other traces
#: (docs/predictor.md, "Online predictors").
DEFAULT_ONLINE_PREDICTOR = "context"
#: The spec forms :func:`make_predictor` accepts (for help texts).
PREDICTOR_SPECS = "oracle | uniform | markov | context | noise:LAMBDA | PATH (trained model file)"
#: The forms a live server or plugin accepts (``oracle`` and ``noise`` read a trace's future).
LIVE_PREDICTOR_SPECS = "context | markov | uniform | PATH (trained model file)"


def make_predictor(
    spec: str,
    horizon: int = 3,
    trace_records: Sequence[TraceRecord] | None = None,
    *,
    app: str | None = None,
    live: bool = False,
) -> Predictor:
    """Build the predictor named by ``spec``.

    * ``oracle``: the true future from ``trace_records`` (simulator only).
    * ``uniform``: uniform over the app's agents seen so far + END.
    * ``markov``: online Markov chain learned from the stream.
    * ``context``: online variable-order context model learned from the stream (the next agent
      given the last agents, the agents visited and the call count; :mod:`.context`).
    * ``noise:LAMBDA``: the oracle blended with uniform, ``(1 - LAMBDA) P + LAMBDA U``, where U is
      over every agent the trace holds for the app + END.
    * anything else is a path to a trained model (``~`` expanded), loaded with
      ``pbkv_train.serving.load_predictor(path, app=app)``.

    Args:
        spec: one of the forms above (:data:`PREDICTOR_SPECS`).
        horizon: K, distributions per prediction.
        trace_records: the replayed trace (``oracle`` and ``noise`` read its future).
        app: the app the predictor will serve; a model file trained for another app is then an
            error. ``None`` accepts a model of any app. Ignored by the built-in predictors.
        live: for a server or plugin: ``oracle`` and ``noise`` are refused as replay-only, and
            the messages list :data:`LIVE_PREDICTOR_SPECS`.

    Raises:
        ValueError: ``oracle``/``noise`` without trace records, a bad lambda; a spec that looks
            like a path (holds a path separator or a file extension, or starts with ``~``) naming
            no file ("predictor model file not found: PATH"); any other spec that is neither a
            known name nor an existing file (the message says both).
        pbkv_train.store.ModelFileError: (a ``ValueError``) the file is not a model file, has
            another format version, or was trained for an app other than ``app``.
        ImportError: the trained-model loader is not installed.
    """
    spec = spec.strip()
    kind, lam = _parse_spec(spec, live)
    if kind == "uniform":
        return UniformPredictor(horizon)
    if kind == "markov":
        return MarkovPredictor(horizon)
    if kind == "context":
        return ContextPredictor(horizon)
    if kind in ("oracle", "noise"):
        if trace_records is None:
            raise ValueError(f"predictor {spec!r} reads the future from a trace; it needs trace records")
        oracle = OraclePredictor(trace_records, horizon)
        if kind == "oracle":
            return oracle
        known: dict[str | None, list[str]] = {}
        for rec in trace_records:
            if isinstance(rec, InvocationRecord):
                known.setdefault(rec.app, []).append(rec.agent)
        return NoisePredictor(oracle, lam, UniformPredictor(horizon, known))
    path = os.path.expanduser(spec)
    from pbkv_train.serving import load_predictor  # lazy: pulls in torch

    model = load_predictor(path, app=app)
    if getattr(model, "horizon", horizon) != horizon:
        log.warning("model %s predicts %s steps ahead, not the requested %d", spec, model.horizon, horizon)
    return model


def check_predictor_spec(spec: str, *, live: bool = False) -> None:
    """Refuse, before any trace is read, a spec that :func:`make_predictor` would refuse whatever
    the trace: an empty spec, a ``noise`` lambda that is not a number in [0, 1], ``oracle`` or
    ``noise`` with ``live``, a path naming no file or a directory, a name that is neither known
    nor a file. Same messages as :func:`make_predictor`; a model file's contents (format, app)
    are checked when it is loaded.

    Raises:
        ValueError: one line naming what is wrong.
    """
    _parse_spec(spec.strip(), live)


def _parse_spec(spec: str, live: bool) -> tuple[str, float]:
    """``(kind, lambda)`` of a stripped spec: kind ``uniform``, ``markov``, ``context``, ``oracle``,
    ``noise`` (with its lambda; 0.0 otherwise) or ``path`` (an existing file, not yet loaded).

    Raises:
        ValueError: as :func:`check_predictor_spec`.
    """
    expected = LIVE_PREDICTOR_SPECS if live else PREDICTOR_SPECS
    if not spec:
        raise ValueError(f"empty predictor spec (expected {expected})")
    if spec in ("uniform", "markov", "context"):
        return spec, 0.0
    if spec == "oracle" or spec.startswith("noise:"):
        if live:
            raise ValueError(f"predictor {spec!r} reads a trace's future: replays only (live: {expected})")
        if spec == "oracle":
            return "oracle", 0.0
        text = spec.partition(":")[2]
        try:
            lam = float(text)
        except ValueError:
            raise ValueError(f"noise lambda must be a number in [0, 1], got {text!r}") from None
        if not 0.0 <= lam <= 1.0:  # NoisePredictor's bound (nan fails it too), before any trace is read
            raise ValueError(f"noise lambda must be in [0, 1], got {lam}")
        return "noise", lam
    path = os.path.expanduser(spec)
    if not os.path.exists(path):
        missing = f"predictor model file not found: {spec}"
        if _looks_like_path(spec):
            raise ValueError(missing)
        raise ValueError(f"unknown predictor {spec!r} (expected {expected}), and {missing}")
    if os.path.isdir(path):
        raise ValueError(f"predictor model path is a directory, not a model file: {spec}")
    return "path", 0.0


def _looks_like_path(spec: str) -> bool:
    # A name typo ("markof") gets both readings; "models/m.pt" or "m.pt" can only be a file.
    seps = [os.sep] + ([os.altsep] if os.altsep else [])
    return spec.startswith("~") or any(sep in spec for sep in seps) or bool(os.path.splitext(spec)[1])
