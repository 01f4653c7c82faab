"""Environment switches the SDK reads, checked: a bad value is one warning and a safe default.

The SDK fails open: a setting it cannot use never raises into the app. It says so once per
variable and value (WARNING, naming the variable and what it accepts), then runs with the
default, the behaviour the app had without the variable.
"""

from __future__ import annotations

import logging
import math
import os

from pbkv_sdk.once import WarnOnce

__all__ = ["env_flag", "end_timeout", "MAX_END_TIMEOUT_S", "DEFAULT_END_TIMEOUT_S"]

log = logging.getLogger("pbkv_sdk")

#: Default time budget of one end signal, seconds.
DEFAULT_END_TIMEOUT_S = 0.5
#: Largest end-signal budget, seconds. An end signal is one small POST that a server answers in
#: milliseconds, sent by a background thread, and the process's exit waits at most
#: ``delivery.EXIT_FLUSH_S`` for it; a minute already covers any server that answers at all.
#: Far beyond it the socket layer overflows (``1e308``: "timestamp out of range", every end lost).
MAX_END_TIMEOUT_S = 60.0

_WARNED = WarnOnce(log)


def env_flag(name: str) -> bool:
    """``$name`` as an on/off switch: ``1`` on, ``0`` or unset (or empty) off; any other value
    warns once, naming the variable and the accepted values, and reads as off (the default)."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() in ("", "0"):
        return False
    if raw.strip() == "1":
        return True
    _WARNED(f"{name}={raw}", "PBKV: %s=%r is not 1 (on) or 0 (off); using 0 (off)", name, raw)
    return False


def end_timeout(value: float | None, env: str) -> float:
    """The end-signal budget, seconds: ``value`` if given, else ``$env``, else the default. A value
    that is not a number in (0, :data:`MAX_END_TIMEOUT_S`] warns once and gives the default."""
    source = "end_timeout_s" if value is not None else env
    raw = value if value is not None else os.environ.get(env)
    if raw is None:
        return DEFAULT_END_TIMEOUT_S
    try:
        seconds = float(raw)
    except (TypeError, ValueError):
        seconds = math.nan
    if 0 < seconds <= MAX_END_TIMEOUT_S:
        return seconds
    _WARNED(f"{source}={raw}", "PBKV: %s=%r is not a number of seconds in (0, %g]; using %s", source, raw,
            MAX_END_TIMEOUT_S, DEFAULT_END_TIMEOUT_S)
    return DEFAULT_END_TIMEOUT_S
