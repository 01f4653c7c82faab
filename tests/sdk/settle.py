"""Wait until no end signal can still appear, instead of sleeping and hoping a duplicate is on time.

An end signal comes from the SDK's end-signal threads; CrewAI's fallback end comes from a handler on
CrewAI's event bus, which runs handlers on its own thread pool. Once that bus has run every pending
handler and the SDK's queue is drained, every end the run will ever send has arrived, so counting
ends afterwards catches a late duplicate as surely as a prompt one.
"""
from __future__ import annotations

import sys

from pbkv_sdk import ending


def settle_ends(timeout_s: float = 10.0) -> None:
    """Block until CrewAI's event bus (if CrewAI is loaded) and the SDK's end-signal queue are idle.

    Raises:
        AssertionError: either did not finish within ``timeout_s`` seconds.
    """
    bus_module = sys.modules.get("crewai.events.event_bus")
    if bus_module is not None:
        assert bus_module.crewai_event_bus.flush(timeout_s), "CrewAI's event handlers did not finish"
    assert ending.flush(timeout_s), "end signals still queued"
    if bus_module is not None:  # a handler that ran during the flush may have queued one more end
        assert bus_module.crewai_event_bus.flush(timeout_s) and ending.flush(timeout_s)
