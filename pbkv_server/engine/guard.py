"""Robustness guard of the predictive policies: fall back to LRU order while LRU would do better.

A predictive eviction order is only as good as its predictions. Learning-augmented caching makes
a predictor-following algorithm robust by running it next to a robust one and following whichever
has done better on the requests seen so far (Lykouris & Vassilvitskii, "Competitive caching with
machine learned advice", ICML 2018; the switching combination with growing phases is the classic
one of Fiat et al. 1991, used for predicted caching by Antoniadis et al., "Online metric
algorithms with untrusted predictions", ICML 2020). The robust algorithm here is LRU, the order
every comparison in this project is made against (``policies.BASELINE_POLICY``); it is simulated
by a ghost directory as ARC simulates the lists it does not hold (Megiddo & Modha, "ARC: a
self-tuning, low overhead replacement cache", FAST 2003): keys and token counts only, no KV.

Modelling choices (each a module constant, see ``docs/architecture.md``, "Robustness guard"):

- The ghost (:class:`ShadowLRU`) replays every admitted prompt with LRU eviction at the real
  device capacity minus the tokens reserved for running outputs (engine model ``sglang``: held by
  them, growing a token a step, when the ghost shrinks as the real cache evicts for the growth,
  :meth:`ShadowLRU.shrink`), keyed by the real cache's unit
  keys, and with the real host tier's capacity behind it: what LRU evicts from the device moves to
  the ghost host (LRU there too), as SGLang HiCache writes evicted KV back; no timing. Like the
  real cache, it never evicts a unit of a running request's prompt (pinned from
  :meth:`LRUGuard.observe` to :meth:`LRUGuard.release`), and the host units an admission loads
  back keep their host room until that admission's evictions are done (the real cache evicts
  before it loads). Without these two the ghost finds more hits than ``lru`` itself where running
  prompts fill much of the device, and holds a policy that is ahead of ``lru`` in fallback
  (``docs/design/memory-short-policy.md``, "The guard's ghost").
  Unit keys are chained (a key names its whole prefix, :mod:`pbkv_contract.blocks`,
  :mod:`~pbkv_server.engine.pages`), so flat ordered dicts of keys are a prefix cache: a prompt
  hits its longest run of keys present on either tier. (The ghost keeps those orders as runs of
  consecutive keys, which is what prompts move as; :class:`ShadowLRU`.)
- What is compared is the prefill work a policy saves, in prompt-token equivalents: a device hit
  saves a token's prefill, a host hit saves it less the host-to-device load
  (``host_value = 1 - load_time / prefill_time`` per token, from the hardware profile). Comparing
  device hits alone would call a policy that keeps a workflow's history on the host tier, where
  LRU drops it, "behind" exactly where it is fastest (PBKV's gain past the admission limit).
- The comparison is over a sliding window of the newest :data:`WINDOW_CAPACITIES` x device
  capacity prompt tokens, per traffic class (the workflow's app; anonymous requests form one
  class): "never slower than LRU" must hold for each class served, not only on average, since a
  policy may win on agents what it loses on chat.
- The policy is behind when a class with at least :data:`MIN_CLASS_SHARE` of the window's prompt
  tokens (or all traffic) saves fewer tokens than the ghost by more than :data:`MARGIN`
  of that class's prompt tokens in the window (it trails now) and has no credit left: its hit
  tokens minus the ghost's since the last switch, with a surplus counted up to
  :data:`CREDIT_SHARE` x window tokens. The combining algorithms switch on costs accumulated over
  the phase; the cap keeps an old surplus from hiding a new regime for long, while a policy well
  ahead of LRU does not trip on one unlucky window of a handful of long prompts.
- Hysteresis: the window restarts at every switch, so each mode is judged on a full window of
  its own traffic; in fallback the policy cannot show it would be ahead (it follows LRU), so it
  resumes the predicted order after a hold of :data:`HOLD_WINDOWS` windows (a probe). A probe
  that trips before it has lasted as long as the hold before it doubles the next hold (up to
  :data:`MAX_HOLD_WINDOWS` windows: geometric phases bound the cost of probing to a logarithmic
  number of windows); a probe that lasts that long, and the first predicted phase, leave the
  next hold at :data:`HOLD_WINDOWS`.
"""

from __future__ import annotations

from collections import deque
from typing import Hashable, Sequence

from .ghost import ShadowLRU

__all__ = ["ShadowLRU", "LRUGuard", "host_value", "WINDOW_CAPACITIES", "MARGIN", "MIN_CLASS_SHARE", "CREDIT_SHARE",
           "HOLD_WINDOWS", "MAX_HOLD_WINDOWS"]

#: Window of the comparison, in device capacities of prompt tokens: a longer window notices a
#: losing order later; the credit below keeps the short window from tripping a policy that is well
#: ahead. Chosen with ``benchmarks/policy_matrix.py`` (figures: ``docs/design/engine.md``,
#: "How the guard's constants were chosen").
WINDOW_CAPACITIES = 1.0
#: Allowed deficit of saved tokens (device hits + host_value x host hits) vs the ghost, as a share
#: of a class's prompt tokens.
MARGIN = 0.01
#: Least share of the window's prompt tokens a class needs to be judged on its own.
MIN_CLASS_SHARE = 0.1
#: Key of the all-traffic credit (no app is named by this object).
_ALL = object()
#: Most surplus a class may bank against later deficits, as a share of the window's prompt tokens:
#: enough that a policy well ahead of the ghost does not trip on one losing window (figures:
#: ``docs/design/engine.md``, "How the guard's constants were chosen").
CREDIT_SHARE = 0.5
#: First fallback hold, in windows of prompt tokens. Each probe of the predicted order costs
#: about a window of LRU's hits while predictions are still wrong (and the chat class pays most of
#: it), so holds are long (figures: ``docs/design/engine.md``, "How the guard's constants were chosen").
HOLD_WINDOWS = 64
#: Longest fallback hold, in windows (holds double after each failed probe).
MAX_HOLD_WINDOWS = 512


def host_value(profile) -> float:
    """Share of a prompt token's prefill that a host-tier hit saves under ``profile`` (a
    :class:`~pbkv_server.engine.cost.HardwareProfile`): ``1 - load_time / prefill_time`` per token,
    clamped to [0, 1] (both are linear in tokens, docs/architecture.md "Cost model")."""
    prefill = profile.prefill_time(1_000_000)
    return min(1.0, max(0.0, 1.0 - profile.load_time(1_000_000) / prefill)) if prefill > 0 else 0.0


class LRUGuard:
    """Decides whether a predictive policy follows its predicted order or LRU's (module docstring).

    Args:
        capacity: device KV capacity, tokens (the ghost's, and the window's unit).
        host_capacity: host-tier KV capacity, tokens (the ghost's host tier; 0: none).
        host_value: share of a token's prefill that a host hit saves (1 - load / prefill time per
            token), in [0, 1].
        window_capacities, margin, min_class_share, hold_windows, max_hold_windows, credit_share:
            see the module constants.

    Attributes:
        ghost: the :class:`ShadowLRU`.
        fallback: True while the policy must use LRU order.
        switches: mode changes so far (both directions).
        window_tokens: size of the comparison window, prompt tokens.

    Raises:
        ValueError: capacity < 1, a window <= 0, a margin or credit share < 0, holds < 1 or a
            first hold above the longest, a host value outside [0, 1].
    """

    def __init__(self, capacity: int, host_capacity: int = 0, host_value: float = 1.0, window_capacities: float = WINDOW_CAPACITIES, margin: float = MARGIN,
                 min_class_share: float = MIN_CLASS_SHARE, hold_windows: int = HOLD_WINDOWS,
                 max_hold_windows: int = MAX_HOLD_WINDOWS, credit_share: float = CREDIT_SHARE) -> None:
        if (capacity < 1 or window_capacities <= 0 or margin < 0 or credit_share < 0
                or not 1 <= hold_windows <= max_hold_windows or not 0 <= host_value <= 1):
            raise ValueError("guard needs capacity >= 1, window > 0, margin >= 0, credit >= 0, 1 <= hold <= max hold, "
                             "0 <= host value <= 1")
        self.ghost = ShadowLRU(capacity, host_capacity)
        self.host_value = host_value
        self.window_tokens = max(1, int(window_capacities * capacity))
        self.margin = margin
        self.min_class_share = min_class_share
        self.fallback = False
        self.switches = 0
        self._hold_windows = self._base_hold = hold_windows
        self._max_hold = max_hold_windows
        self._window: deque[tuple[object, int, float, float]] = deque()  # (class, prompt, real saved, ghost saved)
        self._sums: dict[object, list[float]] = {}  # class -> [prompt, real saved, ghost saved] in the window
        self._credit: dict[object, float] = {}  # class (and _ALL) -> capped surplus since the last switch
        self._credit_cap = credit_share * self.window_tokens
        self._total = 0  # prompt tokens in the window
        self._seen = 0  # counted prompt tokens since the last switch
        self._hold_until = 0
        self._probing = False  # the predicted phase began at the end of a hold
        self._running: dict[Hashable, list] = {}  # last key of a running prompt -> [its keys, requests]

    def observe(self, cls: object, keys: Sequence[Hashable], toks: Sequence[int], room: int, prompt: int,
                device_hit: int, count: bool = True, host_hit: int = 0) -> bool:
        """Record one admission: the ghost replays it, the window adds it; returns True when the
        mode changed (the caller re-files the evictable nodes).

        Args:
            cls: the request's traffic class (its workflow's app; ``None`` for anonymous ones).
            keys, toks: the prompt's unit keys and tokens per unit (as the real cache keys them).
            room: device tokens cached units may take now (capacity minus reserved outputs).
            prompt: the prompt's tokens (the hit-rate denominator of the real cache).
            device_hit: prompt tokens the real cache found on the device.
            count: the admission counts in the hit rates (``False``: speculative prefill, which
                the ghost replays but the window ignores).
            host_hit: prompt tokens the real cache loaded back from the host tier.
        """
        # the request runs: its units are locked until release()
        ghost_dev, ghost_host = self.ghost.admit_tiers(keys, toks, room, count, pin=True)
        if keys:
            run = self._running.get(keys[-1])
            if run is None:
                self._running[keys[-1]] = [keys, 1]
            else:
                run[1] += 1
        if not count or prompt <= 0:
            return False
        v = self.host_value
        device_hit, ghost_hit = device_hit + v * host_hit, ghost_dev + v * ghost_host  # prefill saved
        self._window.append((cls, prompt, device_hit, ghost_hit))
        s = self._sums.get(cls)
        if s is None:
            s = self._sums[cls] = [0, 0, 0]
        s[0] += prompt
        s[1] += device_hit
        s[2] += ghost_hit
        credit, cap, gain = self._credit, self._credit_cap, device_hit - ghost_hit
        credit[cls] = min(cap, credit.get(cls, 0.0) + gain)
        credit[_ALL] = min(cap, credit.get(_ALL, 0.0) + gain)
        self._total += prompt
        self._seen += prompt
        while self._total - self._window[0][1] >= self.window_tokens:
            old_cls, p, r, g = self._window.popleft()
            s = self._sums[old_cls]
            s[0] -= p
            s[1] -= r
            s[2] -= g
            if s[0] == 0:
                del self._sums[old_cls]
            self._total -= p
        if self.fallback:
            if self._seen >= self._hold_until:
                self._switch(False)
                self._probing = True
                return True
            return False
        if self._total < self.window_tokens:
            return False
        if self.behind():
            # a probe that did not last as long as the hold before it doubles the next hold
            failed = self._probing and self._seen < self._hold_windows * self.window_tokens
            self._hold_windows = min(self._max_hold, 2 * self._hold_windows) if failed else self._base_hold
            self._switch(True)
            return True
        return False

    def release(self, last_key: Hashable) -> None:
        """A request admitted through :meth:`observe` finished; ``last_key`` is its prompt's last
        unit key (chained keys: it names the whole prompt). Its units are no longer locked."""
        run = self._running.get(last_key)
        if run is None:
            return
        self.ghost.unpin(run[0])
        run[1] -= 1
        if run[1] == 0:
            del self._running[last_key]

    def behind(self) -> bool:
        """True if the policy trails the ghost now and has no surplus left: for some class holding
        at least ``min_class_share`` of the window's prompt tokens (or for all traffic), the saved
        tokens (device hits + ``host_value`` x host hits) in the window are below the ghost's by more than ``margin`` of that class's
        prompt tokens, and the class's credit (its saved tokens minus the ghost's since the last
        switch, a surplus counted up to ``credit_share`` x window tokens) is negative."""
        total = self._total
        if total <= 0:
            return False
        margin, credit = self.margin, self._credit
        real = ghost = 0
        for cls, (prompt, r, g) in self._sums.items():
            real += r
            ghost += g
            if prompt >= self.min_class_share * total and g - r > margin * prompt and credit[cls] < 0:
                return True
        return ghost - real > margin * total and credit[_ALL] < 0

    def _switch(self, fallback: bool) -> None:
        self.fallback = fallback
        self.switches += 1
        self._window.clear()
        self._sums.clear()
        self._credit.clear()
        self._total = 0
        self._seen = 0
        self._hold_until = self._hold_windows * self.window_tokens
