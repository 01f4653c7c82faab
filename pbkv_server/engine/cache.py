"""The two-tier prefix cache of the engine core: radix tree, tier accounting, policy heaps, eviction.

:class:`PrefixCache` owns everything about cached KV and nothing about time or batching: the
:class:`~pbkv_server.engine.radix.RadixTree` over block keys, the device and host capacities, the
tokens locked by running requests and reserved for their outputs, and three lazy heaps ordered by
the policy (device victims, host victims, prefetch candidates). The scheduler
(:class:`~pbkv_server.engine.Engine`) asks it to :meth:`acquire` a request's prefix at admission
and to :meth:`release` it at completion; policies use the primitives below (refresh, split,
evict, load, lock) and see nothing of the scheduler. See ``docs/architecture.md``, "Engine core".

Eviction moves a device node to the host tier when the host can make room (by dropping host
leaves in policy order), and otherwise drops it with its host subtree; nodes on the path of a
running request are locked and never move.
"""

from __future__ import annotations

import heapq
import itertools
import time
from typing import Callable, Mapping, NamedTuple, Sequence

from .cost import HardwareProfile
from .policies import make_policy
from .radix import DEVICE, HOST, Node, RadixTree
from .scoring import NodeScore, ScoreBoard
from .types import Admission, EngineConfig, EngineStats
from .workflows import Workflow

__all__ = ["PrefixCache", "Acquired"]


class Acquired(NamedTuple):
    """A request's prefix, locked on the device (result of :meth:`PrefixCache.acquire`).

    Attributes:
        path: nodes from the root down covering the whole prompt (root excluded).
        device_hit: prompt tokens found on the device tier.
        host_hit: prompt tokens found on the host tier (loaded over PCIe at admission).
        load: tokens copied host -> device (the nodes' sizes, which a replayed trace may count
            differently from the request's own per-block tokens).
        new_tokens: prompt tokens to prefill.
    """

    path: list[Node]
    device_hit: int
    host_hit: int
    load: int
    new_tokens: int

    @property
    def end(self) -> Node | None:
        """Deepest node of the prompt (``None`` for an empty prompt)."""
        return self.path[-1] if self.path else None


class PrefixCache:
    """Device and host KV cache as one radix tree, evicted in the order of a policy.

    Args:
        config: engine settings (policy name, capacities, K, gamma, rho, future oracle).
        board: the :class:`~pbkv_server.engine.scoring.ScoreBoard` holding each node's A_w(c)
            and Score(c) (shared with the workflow table that installs predictions).
        stats: the engine's counters (evictions, prefetched tokens, hit tokens, latency samples).
        latency_clock: clock of the decision-latency samples, seconds.

    Raises:
        ValueError: unknown policy, a policy that needs what the config lacks, or capacities
            that are not device > 0, host >= 0 tokens.

    Attributes:
        tree, board, policy, profile, config, stats: as above (``policy`` built from ``config``).
        device_capacity, host_capacity: KV capacities, tokens.
        app_graphs: app -> static agent graph (agent -> possible next agents), for graph policies.
    """

    def __init__(self, config: EngineConfig, board: ScoreBoard, stats: EngineStats,
                 latency_clock: Callable[[], float] = time.perf_counter) -> None:
        self.config = config
        self.profile: HardwareProfile = config.profile
        self.device_capacity = int(config.device_tokens if config.device_tokens is not None
                                   else config.profile.device_kv_tokens)
        self.host_capacity = int(config.host_tokens if config.host_tokens is not None
                                 else config.profile.host_kv_tokens)
        if self.device_capacity <= 0 or self.host_capacity < 0:
            raise ValueError(f"device capacity must be > 0 and host >= 0 tokens, got "
                             f"{self.device_capacity} and {self.host_capacity}")
        self.board = board
        self.stats = stats
        self.latency_clock = latency_clock
        self.tree = RadixTree(on_split=self._on_split)
        self.app_graphs: dict[str, dict[str, tuple[str, ...]]] = {}
        self._seq = itertools.count()
        self._dev_heap: list = []
        self._host_heap: list = []
        self._pf_heap: list = []
        self._reserved = 0
        self._locked_dev = 0
        self.policy = make_policy(config.policy, self)

    # ================================================================ accounting
    @property
    def reserved_tokens(self) -> int:
        """Device tokens reserved for the outputs of running requests."""
        return self._reserved

    @property
    def locked_device_tokens(self) -> int:
        """Device tokens of nodes locked by running requests."""
        return self._locked_dev

    def device_free(self) -> int:
        """Unused device tokens (capacity - cached - reserved for running outputs)."""
        return self.device_capacity - self.tree.device_tokens - self._reserved

    def load_tokens(self, seconds: float) -> int:
        """Tokens of KV cache PCIe can move in ``seconds`` (the profile's bandwidth)."""
        return self.profile.load_tokens(seconds)

    # ================================================================ requests
    def acquire(self, blocks: list, toks: list, cum: list, reserve: int, now: float,
                workflow: Workflow | None, agent: str | None, active: bool, index: int) -> Acquired | None:
        """Admit a request's prompt if its KV fits: lock its cached prefix, load its host part,
        insert its new part, evict what is needed, and reserve room for its output.

        Args:
            blocks: the prompt's block keys (a ``list``); toks: tokens per block; cum: prefix
                sums of ``toks`` (``cum[0] = 0``).
            reserve: device tokens to reserve for the output.
            now: engine time, seconds (the nodes' last access).
            workflow, agent: who made the request (``None`` for an anonymous request).
            active: the workflow is still active (``False``: it ended while the request waited,
                so the use counts as an ended workflow's).
            index: the request's submission index (for policies that read the future).

        Returns:
            The locked prefix, or ``None`` when the request does not fit now (nothing changed but
            a possible split of a node where the prompt diverges).
        """
        tree = self.tree
        path, n = tree.match(blocks)
        # Hits are counted with the request's own per-block token counts (a replayed trace may
        # spread tokens over a shared block differently in two prompts); space with the nodes'.
        device_hit = host_hit = load = newly_locked = 0
        i = 0
        for node in path:
            j = i + len(node.keys)
            if node.tier == DEVICE:
                device_hit += cum[j] - cum[i]
                if node.lock == 0:
                    newly_locked += node.tokens
            else:
                host_hit += cum[j] - cum[i]
                load += node.tokens
            i = j
        new_tokens = cum[-1] - device_hit - host_hit
        need = load + new_tokens + reserve
        if self._reserved + self._locked_dev + newly_locked + need > self.device_capacity:
            return None
        for node in path:
            self.lock(node)
        short = need - self.device_free()
        if short > 0:
            self.evict_device(short)
        prefetches = self.policy.prefetches
        for node in path:
            if node.tier == HOST:
                tree.set_tier(node, DEVICE)
                self._locked_dev += node.tokens
                if prefetches:  # its host children became prefetch candidates
                    for child in node.children.values():
                        self.refresh(child)
        parent = path[-1] if path else tree.root
        if n < len(blocks):
            node = tree.insert(parent, blocks[n:], toks[n:], DEVICE, now)
            node.sc = NodeScore(node)
            self.lock(node)
            path.append(node)
        board = self.board
        if workflow is not None and not active:
            # the workflow ended while this request waited: its use counts, but as an ended one
            for node in path:
                node.last_access = now
                board.note_ended_use(node.sc)
        else:
            for node in path:
                node.last_access = now
                if workflow is not None:
                    board.touch(node.sc, workflow.workflow_id, agent)
        self._reserved += reserve
        s = self.stats
        s.prompt_tokens += cum[-1]
        s.device_hit_tokens += device_hit
        s.host_hit_tokens += host_hit
        self.policy.on_admit(Admission(index, blocks, workflow, agent), path)
        return Acquired(path, device_hit, host_hit, load, new_tokens)

    def release(self, end: Node | None, reserve: int) -> None:
        """A request finished: unlock its path from ``end`` up and free its output reservation."""
        self._reserved -= reserve
        node = end
        while node is not None and node.parent is not None:
            parent = node.parent
            self.unlock(node)
            node = parent

    def rescore(self, records: Sequence[NodeScore]) -> None:
        """Re-file the nodes whose score or prefetch value changed (a new prediction, an end)."""
        for rec in records:
            self.refresh(rec.owner)

    def set_app_graph(self, app: str, edges: Mapping[str, Sequence[str]]) -> None:
        """Set ``app``'s static agent graph (agent -> possible next agents) and tell the policy."""
        self.app_graphs[app] = {str(a): tuple(str(b) for b in nexts) for a, nexts in edges.items()}
        self.policy.on_graph(app)

    # ================================================================ primitives for policies
    def refresh(self, node: Node) -> None:
        """Re-file ``node`` in the eviction/prefetch heaps after something its priority depends on
        changed (policies call this for state they own). O(log n)."""
        if not node.attached or node.parent is None:
            return
        if node.tier == DEVICE:
            if node.lock == 0 and node.n_dev_children == 0:
                node.ver += 1
                heapq.heappush(self._dev_heap, (self.policy.priority(node), next(self._seq), node.ver, node))
                if len(self._dev_heap) > self._heap_limit():
                    self._dev_heap = self._compact(self._dev_heap, self._dev_valid)
        else:
            if node.lock == 0 and not node.children:
                node.ver += 1
                heapq.heappush(self._host_heap, (self.policy.priority(node), next(self._seq), node.ver, node))
                if len(self._host_heap) > self._heap_limit():
                    self._host_heap = self._compact(self._host_heap, self._host_valid)
            if self.policy.prefetches and node.parent.tier == DEVICE:
                value = self.policy.prefetch_value(node)
                node.pver += 1  # invalidates an entry holding an outdated (maybe now zero) value
                if value > 0:
                    heapq.heappush(self._pf_heap, (-value, next(self._seq), node.pver, node))
                    if len(self._pf_heap) > self._heap_limit():
                        self._pf_heap = self._compact(self._pf_heap, self._pf_valid)

    def split(self, node: Node, blocks: int) -> Node:
        """Cut ``node`` after its first ``blocks`` blocks (0 < blocks < len); returns the upper part
        (policies mark the end of a prefix inside a node this way)."""
        return self.tree.split(node, blocks)

    def peek_victim(self) -> Node | None:
        """The device node the policy would evict next (not removed), or ``None``."""
        heap = self._dev_heap
        while heap:
            entry = heap[0]
            if self._dev_valid(entry):
                return entry[3]
            heapq.heappop(heap)
        return None

    def evict_device(self, tokens: int, limit: Callable[[Node], bool] | None = None) -> int:
        """Evict device nodes in policy order until ``tokens`` are freed.

        Args:
            tokens: tokens to free.
            limit: optional ``limit(node) -> bool``; eviction stops at the first victim for which
                it returns False (prefetch uses it to spare active cache).

        Returns:
            Tokens freed (may be less than asked when nothing else is evictable).
        """
        t0 = self.latency_clock()
        freed = 0
        while freed < tokens:
            node = self.peek_victim()
            if node is None or (limit is not None and not limit(node)):
                break
            heapq.heappop(self._dev_heap)
            freed += node.tokens
            self._evict(node)
        self.stats.eviction_decision_s.append(self.latency_clock() - t0)
        return freed

    def peek_prefetch(self) -> Node | None:
        """The host node with the highest prefetch value whose parent is on the device, or None."""
        heap = self._pf_heap
        while heap:
            entry = heap[0]
            if self._pf_valid(entry):
                return entry[3]
            heapq.heappop(heap)
        return None

    def pop_prefetch(self) -> tuple | None:
        """Remove and return the best valid prefetch entry ``(-value, seq, version, node)``, or None.
        Hand an entry that was not used back with :meth:`push_prefetch`."""
        if self.peek_prefetch() is None:
            return None
        return heapq.heappop(self._pf_heap)

    def push_prefetch(self, entry: tuple) -> None:
        """Put back an entry taken with :meth:`pop_prefetch` (it stays valid if the node is unchanged)."""
        heapq.heappush(self._pf_heap, entry)

    def load(self, node: Node) -> None:
        """Copy host node ``node`` to the device as a prefetch (caller checked space; parent on device)."""
        self.tree.set_tier(node, DEVICE)
        self.stats.prefetched_tokens += node.tokens
        self.refresh(node)
        for child in node.children.values():
            self.refresh(child)

    def lock(self, node: Node) -> None:
        """Pin ``node`` (one more user); a pinned node is never moved or dropped."""
        if node.lock == 0 and node.tier == DEVICE:
            self._locked_dev += node.tokens
        node.lock += 1

    def unlock(self, node: Node) -> None:
        """Undo one :meth:`lock`; the node becomes evictable again when its count reaches 0."""
        node.lock -= 1
        if node.lock == 0:
            if node.tier == DEVICE:
                self._locked_dev -= node.tokens
            self.refresh(node)

    # ================================================================ internals
    def _evict(self, node: Node) -> None:
        """Move device node ``node`` to the host tier, or drop it (and its host subtree) if the
        host cannot make room."""
        s = self.stats
        s.evictions += 1
        s.evicted_tokens += node.tokens
        parent = node.parent
        if self.host_capacity >= node.tokens:
            short = node.tokens - (self.host_capacity - self.tree.host_tokens)
            if short > 0:
                self._evict_host(short)
            if self.host_capacity - self.tree.host_tokens >= node.tokens:
                self.tree.set_tier(node, HOST)
                self.refresh(node)
                self.refresh(parent)
                return
        self._drop_subtree(node)
        self.refresh(parent)

    def _evict_host(self, tokens: int) -> int:
        freed = 0
        heap = self._host_heap
        while freed < tokens and heap:
            entry = heapq.heappop(heap)
            if not self._host_valid(entry):
                continue
            node = entry[3]
            parent = node.parent
            freed += node.tokens
            self._drop(node)
            self.refresh(parent)
        return freed

    def _drop_subtree(self, node: Node) -> None:
        stack, order = [node], []
        while stack:
            n = stack.pop()
            order.append(n)
            stack.extend(n.children.values())
        for n in reversed(order):  # children before parents
            self._drop(n)

    def _drop(self, node: Node) -> None:
        self.stats.dropped_tokens += node.tokens
        self.policy.on_drop(node)  # while the node is still attached (policies read its parent)
        self.tree.remove(node)
        if node.sc is not None:
            self.board.forget(node.sc)

    def _on_split(self, top: Node, bottom: Node) -> None:
        if bottom.sc is not None:
            top.sc = self.board.copy(bottom.sc, top)
        # locked/tier token totals are unchanged: the tokens only moved between the two halves
        self.policy.on_split(top, bottom)
        self.refresh(bottom)  # its first key changed (belady) and its entry must stay current
        self.refresh(top)  # a host-tier top is the new prefetch frontier in place of bottom

    def _dev_valid(self, entry) -> bool:
        node = entry[3]
        return (entry[2] == node.ver and node.attached and node.tier == DEVICE and node.lock == 0
                and node.n_dev_children == 0)

    def _host_valid(self, entry) -> bool:
        node = entry[3]
        return entry[2] == node.ver and node.attached and node.tier == HOST and node.lock == 0 and not node.children

    def _pf_valid(self, entry) -> bool:
        node = entry[3]
        return entry[2] == node.pver and node.attached and node.tier == HOST and node.parent.tier == DEVICE

    def _heap_limit(self) -> int:
        # stale entries may pile up to a few per node before a rebuild: amortised O(1) per push
        return 4 * self.tree.n_nodes + 4096

    @staticmethod
    def _compact(heap: list, valid) -> list:
        kept = [e for e in heap if valid(e)]
        heapq.heapify(kept)
        return kept
