"""Prediction providers behind :class:`pbkv_contract.prediction.Predictor` (``docs/architecture.md``, "Prediction interface").

``oracle`` (true future from a trace), ``uniform``, ``noise`` (P~ = (1 - lambda) P + lambda U) and
``markov`` and ``context`` (online, learned from the stream). The trained model of the ``predictor`` package plugs
into the same interface; :func:`make_predictor` builds any of them from a spec string.
"""

from pbkv_server.predictors.context import ContextPredictor
from pbkv_server.predictors.factory import DEFAULT_ONLINE_PREDICTOR, PREDICTOR_SPECS, make_predictor
from pbkv_server.predictors.markov import MarkovPredictor
from pbkv_server.predictors.noise import NoisePredictor, mix
from pbkv_server.predictors.oracle import OraclePredictor
from pbkv_server.predictors.uniform import UniformPredictor

__all__ = [
    "make_predictor",
    "DEFAULT_ONLINE_PREDICTOR",
    "PREDICTOR_SPECS",
    "ContextPredictor",
    "MarkovPredictor",
    "NoisePredictor",
    "OraclePredictor",
    "UniformPredictor",
    "mix",
]
