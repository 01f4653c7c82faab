"""Workflow predictor: which agents will each active workflow call in its next K steps.

The serving interface it implements is :mod:`pbkv_contract.prediction` (no torch import); the
modules here import torch:

- ``data``: samples from v1 traces (prefix, current agent, features, next K agents, END mask),
  per-app vocabulary, seeded split by workflow.
- ``model``: the GraphSAGE + attention + h_txt network of PBKV Appendix B.
- ``baselines``: Markov order n with back-off, MLP, 1-layer Transformer.
- ``train``: training loop, accuracy, one-seed experiments.
- ``store``: model files (weights + metadata, versioned).
- ``serving``: ``load_predictor(path)`` -> batched ``pbkv_contract.prediction.Predictor``.
- ``cli``: ``pbkv-predictor train | eval | curve``.
"""
