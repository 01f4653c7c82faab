"""Build a predictor from a command-line spec: ``oracle | uniform | markov | noise:LAMBDA | PATH``."""

from __future__ import annotations

import logging
import os
from typing import Sequence

from pbkv_sdk.trace import InvocationRecord, TraceRecord
from predictor.api import Predictor

from pbkv_server.predictors.markov import MarkovPredictor
from pbkv_server.predictors.noise import NoisePredictor
from pbkv_server.predictors.oracle import OraclePredictor
from pbkv_server.predictors.uniform import UniformPredictor

__all__ = ["make_predictor", "PREDICTOR_SPECS"]

log = logging.getLogger(__name__)

#: The spec forms :func:`make_predictor` accepts (for help texts).
PREDICTOR_SPECS = "oracle | uniform | markov | noise:LAMBDA | PATH (trained model file)"


def make_predictor(spec: str, horizon: int = 3, trace_records: Sequence[TraceRecord] | None = None) -> Predictor:
    """Build the predictor named by ``spec``.

    * ``oracle``: the true future from ``trace_records`` (simulator only).
    * ``uniform``: uniform over the app's agents seen so far + END.
    * ``markov``: online Markov chain learned from the stream.
    * ``noise:LAMBDA``: the oracle blended with uniform, ``(1 - LAMBDA) P + LAMBDA U``, where U is
      over every agent the trace holds for the app + END.
    * anything else is a path to a trained model, loaded with ``predictor.serving.load_predictor``.

    Raises:
        ValueError: ``oracle``/``noise`` without trace records, a bad lambda, or a spec that is
            neither a known name nor an existing file.
        ImportError: the trained-model loader is not installed.
    """
    spec = spec.strip()
    if spec == "uniform":
        return UniformPredictor(horizon)
    if spec == "markov":
        return MarkovPredictor(horizon)
    if spec == "oracle" or spec.startswith("noise:"):
        if trace_records is None:
            raise ValueError(f"predictor {spec!r} reads the future from a trace; it needs trace records")
        oracle = OraclePredictor(trace_records, horizon)
        if spec == "oracle":
            return oracle
        text = spec.partition(":")[2]
        try:
            lam = float(text)
        except ValueError:
            raise ValueError(f"noise lambda must be a number in [0, 1], got {text!r}") from None
        known: dict[str | None, list[str]] = {}
        for rec in trace_records:
            if isinstance(rec, InvocationRecord):
                known.setdefault(rec.app, []).append(rec.agent)
        return NoisePredictor(oracle, lam, UniformPredictor(horizon, known))
    if not os.path.exists(spec):
        raise ValueError(f"unknown predictor {spec!r}: expected {PREDICTOR_SPECS}")
    from predictor.serving import load_predictor  # lazy: pulls in torch

    model = load_predictor(spec)
    if getattr(model, "horizon", horizon) != horizon:
        log.warning("model %s predicts %s steps ahead, not the requested %d", spec, model.horizon, horizon)
    return model
