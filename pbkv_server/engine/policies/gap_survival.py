"""Online survival estimate of a conversation's next call, from the gaps its app has shown.

Issue 33: on a coding agent what decides whether a conversation's cache is worth keeping is
*when* the conversation calls again (a tool call's duration, a human's think time) and *whether*
it calls again at all (its end). A mean gap (:mod:`.host_order`) says neither: the gaps after a
call are a mixture of short tool gaps, long think times and ends, and the mean of that mixture
is no typical gap. This module keeps, per key (an app, or an app and an agent), the empirical
distribution of the latest :data:`WINDOW` outcomes of a call's gap, each either

- a gap: seconds from a call's finish to its workflow's next invocation (engine events
  ``on_finish`` then ``on_invocation``), or
- an end: the workflow ended (``on_workflow_end``) after a finished call without calling again,
  an infinite gap (the conversation never reuses its cache).

A gap still open is not counted (right-censored: it has not resolved), which leans the estimate
towards short gaps early in a run; the window forgets old outcomes so the estimate follows the
app's current traffic. From the window (``n`` outcomes, sorted gaps ``g_1 <= ... <= g_m``, ``n -
m`` ends):

- ``survival(t)`` = P(gap > t) = (number of outcomes > t) / n (ends count as > every t);
- ``reuse_within(waited, h)`` = P(gap <= waited + h | gap >= waited): the chance that a
  conversation idle for ``waited`` seconds calls again within ``h`` more (conditioned on ``gap >=
  waited``, not ``>``, so that at ``waited`` = 0 every outcome counts, a 0 s gap included);
- ``residual(waited, p)``: the smallest ``r >= 0`` with P(gap <= waited + r | gap >= waited) >=
  ``p`` (``inf`` when the chance of ever calling again is below ``p``): the time until the next
  call at confidence ``p``.

Units: seconds of the engine's clock. Costs: ``observe`` O(log W + W) (a sorted insert into a
list of at most W = :data:`WINDOW` entries), queries O(log W). Deterministic.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from typing import Hashable

#: Outcomes kept per key (the latest ones): enough for a stable median of a mixture, small
#: enough to follow a change of traffic within a few hundred calls.
WINDOW = 256


class GapSurvival:
    """Empirical survival of the gap after a call, per key, over a sliding window (see module
    docstring). A key with no outcome answers from the pooled window of every key (``None``),
    and with none at all: ``survival`` 1, ``reuse_within`` 0, ``residual`` ``inf``.

    Args:
        window: outcomes kept per key (>= 1).

    Raises:
        ValueError: ``window`` < 1.
    """

    def __init__(self, window: int = WINDOW) -> None:
        if window < 1:
            raise ValueError("window must be >= 1")
        self.window = window
        self._sorted: dict[Hashable, list[float]] = {}  # key -> finite gaps in the window, sorted
        self._order: dict[Hashable, deque] = {}  # key -> outcomes in arrival order (inf: an end)

    # ------------------------------------------------------------------ events
    def observe(self, key: Hashable, gap_s: float) -> None:
        """One outcome for ``key`` (and the pooled key ``None``): a gap in seconds, or ``math.inf``
        for an end. A negative gap (clock skew) counts as 0."""
        gap_s = 0.0 if gap_s < 0.0 else gap_s
        for k in (key, None) if key is not None else (None,):
            order = self._order.get(k)
            if order is None:
                order = self._order[k] = deque()
                self._sorted[k] = []
            gaps = self._sorted[k]
            order.append(gap_s)
            if gap_s != math.inf:
                bisect.insort(gaps, gap_s)
            if len(order) > self.window:
                old = order.popleft()
                if old != math.inf:
                    del gaps[bisect.bisect_left(gaps, old)]

    # ------------------------------------------------------------------ queries
    def outcomes(self, key: Hashable) -> int:
        """Outcomes in ``key``'s window (0 if none)."""
        order = self._order.get(key)
        return len(order) if order is not None else 0

    def survival(self, key: Hashable, t: float) -> float:
        """P(gap > ``t``) for ``key`` (seconds)."""
        gaps, n = self._window(key)
        if n == 0:
            return 1.0
        return (n - bisect.bisect_right(gaps, t)) / n

    def reuse_within(self, key: Hashable, waited: float, horizon: float) -> float:
        """P(the next call comes within ``horizon`` more seconds | none in the first ``waited``)."""
        gaps, n = self._window(key)
        done = bisect.bisect_left(gaps, waited)  # outcomes before ``waited``: excluded
        alive = n - done
        if alive == 0:
            return 0.0
        return (bisect.bisect_right(gaps, waited + horizon) - done) / alive

    def residual(self, key: Hashable, waited: float = 0.0, p: float = 0.5) -> float:
        """Seconds from now (``waited`` seconds into the gap) until the next call at confidence
        ``p`` (see module docstring); ``inf`` if P(it ever comes | waited) < ``p``."""
        gaps, n = self._window(key)
        done = bisect.bisect_left(gaps, waited)  # outcomes before ``waited``: excluded
        alive = n - done
        if alive == 0:
            return math.inf
        need = math.ceil(p * alive - 1e-12)  # outcomes past ``waited`` that must have resolved
        if need < 1:
            return 0.0
        if done + need > len(gaps):
            return math.inf
        return gaps[done + need - 1] - waited

    def _window(self, key: Hashable) -> tuple[list[float], int]:
        order = self._order.get(key)
        if order is None or not order:
            order = self._order.get(None)
            if order is None:
                return [], 0
            return self._sorted[None], len(order)
        return self._sorted[key], len(order)
