"""Cancelling a run midway, as an app (or its user pressing stop) would."""

from __future__ import annotations

import asyncio
from typing import Any, Coroutine

import pytest


async def cancel_after(coro: Coroutine[Any, Any, Any], delay_s: float) -> None:
    """Run ``coro`` as a task, cancel it after ``delay_s`` seconds, and check the cancellation reached the caller."""
    task = asyncio.create_task(coro)
    await asyncio.sleep(delay_s)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
