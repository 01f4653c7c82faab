"""Console-script entry points of ``pbkv-server`` and ``pbkv-bench`` (``pyproject.toml``).

Imports nothing but the standard library and :mod:`pbkv_contract.extras` at the top: the CLI
module is imported inside :func:`pbkv_contract.extras.run`, so a missing extra becomes one line.
"""

from __future__ import annotations

from pbkv_contract.extras import run

__all__ = ["pbkv_server", "pbkv_bench"]


def pbkv_server() -> int:
    """``pbkv-server``."""

    def load():
        from pbkv_server.cli.server import app

        return app

    return run("pbkv-server", load, "server")


def pbkv_bench() -> int:
    """``pbkv-bench``."""

    def load():
        from pbkv_server.cli.bench import app

        return app

    return run("pbkv-bench", load, "server")
