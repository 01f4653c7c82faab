"""``ttl-pin``: TTL prefix pinning with refresh on hit (SGLang HiCache + Dynamo ``cache_control``).

Sources: sgl-project/sglang PR #18941 ("TTL-based prefix pinning with refresh-on-hit for
HiRadixCache", later reverted by #21884) and ai-dynamo/dynamo PR #6213 / the "SGLang for Agentic
Workloads" guide (``nvext.cache_control``). A client sends ``nvext.cache_control: {"type":
"ephemeral", "ttl": "5m"}``; when the response stream completes, Dynamo's router calls
``pin_prefix(token_ids, ttl)`` on the worker, which walks the radix tree along the request's
tokens and pins each node until ``now + ttl``:

- a pinned node may leave the GPU (it is demoted to host memory, HiCache's write-through copy),
  but host eviction never deletes it while the pin lasts (SGLang's ``host_ref_counter`` hold);
- pins are bounded by a budget, ``SGLANG_HICACHE_MAX_PINNED_RATIO`` x host capacity; when the
  budget is spent mid-walk the prefix is pinned partially (the nodes nearest the root);
- a cache hit on a pinned node refreshes its expiry to ``now + ttl`` (refresh-on-hit);
- expiry is lazy: expired pins are cleared when eviction or pinning looks at them;
- Dynamo clamps the TTL to [300, 3600] s; device eviction among unpinned and pinned nodes alike is
  SGLang's default LRU, and host eviction is LRU among unpinned nodes.

Without a host tier SGLang refuses pins (HiCache is required), and the budget here is 0 then, so
the policy is LRU. Requests that ask for no TTL are not pinned.

Modelling choices: the TTL is :attr:`EngineRequest.cache_ttl_s` (``pbkv-server``: the body's
``nvext.cache_control.ttl``, ``"5m"``, ``"1h"`` or seconds). A trace records it only in an
optional ``cache_ttl_s`` field; replaying a trace without it, the simulator plays a user who
marks every hinted request with ``"5m"`` (300 s: Anthropic's default ephemeral TTL, PR #18941's
demonstration and Dynamo's lower clamp; ``pbkv_server.sim.simulator.REPLAY_CACHE_TTL_S``). The
pin budget ratio is :data:`PIN_RATIO` = 0.6, the value PR #18941 suggests (Dynamo's guide uses
0.1; a smaller budget pins less). On an idle engine whose queue head cannot fit because pins keep
the host full, the pin that expires last is given up (:meth:`relieve`), which SGLang, rejecting
pins over budget, does not need.
"""

from __future__ import annotations

import heapq
import itertools

from ..radix import HOST
from .base import Policy, register_policy

#: Share of the host tier that pins may hold (``SGLANG_HICACHE_MAX_PINNED_RATIO``; PR #18941's example).
PIN_RATIO = 0.6
#: Dynamo clamps ``cache_control`` TTLs to this range, seconds.
MIN_TTL_S, MAX_TTL_S = 300.0, 3600.0


@register_policy("ttl-pin")
class TTLPinPolicy(Policy):
    """LRU on the device; on the host, unpinned ``(0, last_access)`` before pinned nodes, which are
    never dropped until their TTL expires.

    Per-node state (kept here, keyed by node): the pin's expiry (engine seconds) and TTL.
    """

    summary = "TTL pins (SGLang #18941, Dynamo cache_control): pinned prefixes never leave host memory until expiry"
    #: what the client sends that this rule reads (--no-hints removes it: the rule replays as lru)
    client_signal = "cache TTL"
    shipped_by, shipped_as = frozenset({"dynamo"}), "TTL prefix pins"  # SGLang reverted #18941

    def __init__(self, context) -> None:
        super().__init__(context)
        self.budget = int(PIN_RATIO * context.host_capacity)
        self.pinned_tokens = 0
        self._pin: dict = {}  # node -> [expiry s, ttl s]
        self._expiries: list = []  # (expiry, seq, node), stale entries skipped
        self._seq = itertools.count()

    def priority(self, node) -> tuple:
        """``(1 if the node is pinned and on the host else 0, last_access)``."""
        return (1 if node.tier == HOST and node in self._pin else 0, node.last_access)

    def pinned(self, node) -> bool:
        """True if ``node`` holds a pin (expired pins are cleared first)."""
        self._sweep()
        return node in self._pin

    def holds(self, node) -> bool:
        """A pinned host node is not dropped (expired pins are cleared by :meth:`expire`)."""
        return node.tier == HOST and node in self._pin

    def keeps(self, node) -> bool:
        """A pinned node is never dropped (demoting it to the host is fine)."""
        return node in self._pin

    def expire(self) -> bool:
        """Clear the pins that expired by now; True if one was."""
        return self._sweep()

    def relieve(self) -> bool:
        """Give up the pin that expires last (only when an idle engine cannot admit its queue head)."""
        if not self._pin:
            return False
        node = max(self._pin, key=lambda n: self._pin[n][0])
        self._unpin(node)
        return True

    # ----------------------------------------------------------------- hooks
    def on_finish(self, request, wf, end) -> None:
        """Pin the finished request's prefix from the root down, within the budget (``pin_prefix``)."""
        ttl = request.cache_ttl_s
        if ttl is None or end is None or self.budget <= 0:
            return
        ttl = min(MAX_TTL_S, max(MIN_TTL_S, float(ttl)))
        self._sweep()
        path = []
        node = end
        while node is not None and node.parent is not None:
            path.append(node)
            node = node.parent
        expiry = self.context.now + ttl
        for node in reversed(path):
            pin = self._pin.get(node)
            if pin is not None:
                if expiry > pin[0]:
                    pin[0], pin[1] = expiry, max(pin[1], ttl)
                    heapq.heappush(self._expiries, (expiry, next(self._seq), node))
                continue
            if self.pinned_tokens + node.tokens > self.budget:
                break  # budget spent: the prefix is pinned partially
            self._pin[node] = [expiry, ttl]
            self.pinned_tokens += node.tokens
            heapq.heappush(self._expiries, (expiry, next(self._seq), node))
            self.context.reorder(node)

    def on_admit(self, admission, path) -> None:
        """Refresh on hit: a pinned node used again lives another TTL from now."""
        if not self._pin:
            return
        self._sweep()
        now = self.context.now
        for node in path:
            pin = self._pin.get(node)
            if pin is not None and now + pin[1] > pin[0]:
                pin[0] = now + pin[1]
                heapq.heappush(self._expiries, (pin[0], next(self._seq), node))

    def on_split(self, top, bottom) -> None:
        """Both halves of a pinned node stay pinned (the pinned tokens are unchanged)."""
        pin = self._pin.get(bottom)
        if pin is not None:
            self._pin[top] = list(pin)
            heapq.heappush(self._expiries, (pin[0], next(self._seq), top))

    def on_drop(self, node) -> None:
        """Forget the node (a pinned node is never dropped; kept for safety)."""
        if self._pin.pop(node, None) is not None:
            self.pinned_tokens -= node.tokens

    # ----------------------------------------------------------------- internals
    def _sweep(self) -> bool:
        """Clear the pins that expired by now (lazy expiry, as SGLang's eviction paths do); True
        if one was."""
        heap, now = self._expiries, self.context.now
        released = False
        while heap and heap[0][0] <= now:
            expiry, _, node = heapq.heappop(heap)
            pin = self._pin.get(node)
            if pin is not None and pin[0] == expiry:
                self._unpin(node)
                released = True
        return released

    def _unpin(self, node) -> None:
        del self._pin[node]
        self.pinned_tokens -= node.tokens
        self.context.reorder(node)
