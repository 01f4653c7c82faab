"""Warn once: the SDK's rule for telling a user about trouble without flooding the app's log.

An app repeats whatever it does (every request, every run), so each kind of trouble is logged at
WARNING the first time and at DEBUG after that. Keys that are made up per request or per run
(names, ids) are capped: past ``max_keys`` distinct keys everything goes to DEBUG, so the set of
keys a process remembers stays bounded.
"""

from __future__ import annotations

import logging

__all__ = ["WarnOnce"]


class WarnOnce:
    """``warn(key, msg, *args)`` logs ``msg % args`` at WARNING for a new key, else at DEBUG.

    Args:
        log: the logger to write to.
        max_keys: distinct keys remembered at most (beyond it, DEBUG only).
        suffix: appended to the WARNING text (e.g. "(further occurrences at debug level)").
    """

    def __init__(self, log: logging.Logger, max_keys: int = 256, suffix: str = "") -> None:
        self.log, self.max_keys, self.suffix = log, max_keys, suffix
        self._seen: set[str] = set()

    def __call__(self, key: str, msg: str, *args: object) -> bool:
        """Log once for ``key``; returns True if this call logged the WARNING."""
        if key in self._seen or len(self._seen) >= self.max_keys:
            self.log.debug(msg, *args)
            return False
        self._seen.add(key)
        self.log.warning(msg + self.suffix, *args)
        return True

    def __contains__(self, key: str) -> bool:
        return key in self._seen

    def clear(self) -> None:
        """Forget every key (tests; a process that wants to be told again)."""
        self._seen.clear()
