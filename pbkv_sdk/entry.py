"""Console-script entry point of ``pbkv-sdk`` (``pyproject.toml``).

The CLI (typer, rich) is imported inside :func:`pbkv_contract.extras.run`, so a missing module
becomes one line naming the install.
"""

from __future__ import annotations

from pbkv_contract.extras import run

__all__ = ["pbkv_sdk"]


def pbkv_sdk() -> int:
    """``pbkv-sdk``."""

    def load():
        from pbkv_sdk.cli import app

        return app

    return run("pbkv-sdk", load, "")
