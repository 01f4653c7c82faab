"""Console-script entry point of ``pbkv-predictor`` (``pyproject.toml``).

Imports nothing but :mod:`pbkv_contract.extras` at the top: the CLI (which imports numpy and
torch) is imported inside :func:`pbkv_contract.extras.run`, so a missing extra becomes one line.
"""

from __future__ import annotations

from pbkv_contract.extras import run

__all__ = ["pbkv_predictor"]


def pbkv_predictor() -> int:
    """``pbkv-predictor``."""

    def load():
        from pbkv_train.cli import app

        return app

    return run("pbkv-predictor", load, "predictor")
