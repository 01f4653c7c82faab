"""Building large record sets out of the garbage collector's way (:func:`quiet_collector`).

Reading a trace, grouping it into replay units and replaying it each make millions of small
containers (a Claude Code prompt's ~1,300 block hashes, the tuples keying them, heap entries)
that reference counting frees on its own. At CPython's default young-generation threshold (700
allocations) the collector runs thousands of passes over them meanwhile, each walking the large
lists alive at that moment: a quarter of reading and loading the 120-conversation trace, and
~10% of a ``pbkv`` replay of it with a host tier. Nothing reads when the collector runs, so
these settings change no result; cycles are still collected.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator

__all__ = ["BULK_GC_YOUNG", "quiet_collector"]

#: The young-generation threshold inside :func:`quiet_collector`: most containers are dropped
#: (by reference counting) before a pass sees them, and the passes are ~100x fewer (a replay's
#: peak memory grew ~1%).
BULK_GC_YOUNG = 100_000

_depth = 0  # quiet_collector blocks open (an outer one's freeze covers the inner ones)


@contextmanager
def quiet_collector(young: int = BULK_GC_YOUNG) -> Iterator[None]:
    """Everything the collector tracks when the outermost block opens is left out of its
    collections until that block ends (``gc.freeze``), then back in its oldest generation
    (``gc.unfreeze``): nothing is kept alive longer. Objects made inside are collected as usual,
    with a young generation of at least ``young`` allocations. The caller's thresholds come back
    when each block ends, even on an exception; a threshold of 0 (collection turned off) is left
    alone. Blocks nest (a replay inside a load)."""
    global _depth
    thresholds = gc.get_threshold()
    if _depth == 0:
        gc.freeze()
    _depth += 1
    if thresholds[0]:
        gc.set_threshold(max(thresholds[0], young), *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        _depth -= 1
        if _depth == 0:
            gc.unfreeze()
