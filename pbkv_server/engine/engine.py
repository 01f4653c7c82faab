"""The engine core: continuous batching over a two-tier radix prefix cache (DESIGN.md sections 4-5).

One :class:`Engine` serves the simulator, the live sim server and (through its pieces) the SGLang
plugin. Time is virtual: :meth:`Engine.step` runs one iteration (or, when nothing can change, a
run of identical decode iterations) and advances :attr:`Engine.clock` by the modelled duration.

An iteration: admit waiting requests in FIFO order while their KV fits (evicting per policy);
load their host-tier hits over PCIe; prefill their uncached tokens; decode one token for every
request already running. First tokens of admitted requests appear at the end of the iteration.
When nothing was admitted the iteration is decode-only: the policy may prefetch, and the engine
advances straight to the next completion (or to ``until``), since no admission can succeed before
a request finishes and frees memory.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from .radix import DEVICE, HOST, Node, RadixTree
from .scoring import NodeScore, ScoreBoard
from .types import EngineConfig, EngineRequest, EngineStats, Finished, FirstToken
from .workflows import Workflow, WorkflowTracker
from .policies import make_policy

__all__ = ["Engine", "Workflow"]



@dataclass(slots=True, eq=False)
class _Request:
    req: EngineRequest
    blocks: list
    toks: list
    prompt_tokens: int
    output_tokens: int
    index: int
    submit_time: float
    wf: Workflow | None
    agent: str | None
    reserve: int = 0
    end: Node | None = None
    device_hit: int = 0
    host_hit: int = 0
    new_tokens: int = 0
    load: int = 0
    done_at: int = 0
    cum: list = field(default_factory=list)


class Engine:
    """Continuous-batching engine over a two-tier radix cache with a pluggable eviction policy.

    Args:
        config: see :class:`~pbkv_server.engine.EngineConfig`.

    Raises:
        ValueError: unknown policy, ``belady`` without ``config.future``, or bad capacities.

    Attributes:
        clock: engine time, seconds (virtual).
        tree: the :class:`~pbkv_server.engine.radix.RadixTree`.
        board: the :class:`~pbkv_server.engine.scoring.ScoreBoard` (A_w(c), scores, retirement).
        policy: the :class:`~pbkv_server.engine.policies.Policy` in use.
        device_capacity, host_capacity: KV capacities, tokens.
    """

    #: Clock of the latency samples in :attr:`stats` (seconds). Wall time by default; a benchmark
    #: on a shared machine may use ``time.thread_time`` so other processes' load does not count.
    latency_clock = staticmethod(time.perf_counter)

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.profile = config.profile
        self.device_capacity = int(config.device_tokens if config.device_tokens is not None
                                   else config.profile.device_kv_tokens)
        self.host_capacity = int(config.host_tokens if config.host_tokens is not None
                                 else config.profile.host_kv_tokens)
        if self.device_capacity <= 0 or self.host_capacity < 0:
            raise ValueError(f"device capacity must be > 0 and host >= 0 tokens, got "
                             f"{self.device_capacity} and {self.host_capacity}")
        if config.max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        self.clock = 0.0
        self.tree = RadixTree(on_split=self._on_split)
        self.board = ScoreBoard(config.gamma, config.horizon)
        self.app_graphs: dict[str, dict[str, tuple[str, ...]]] = {}
        self._seq = itertools.count()
        self._dev_heap: list = []
        self._host_heap: list = []
        self._pf_heap: list = []
        self._waiting: deque[_Request] = deque()
        self._running: dict[str, _Request] = {}
        self._known_ids: set[str] = set()
        self._finish_heap: list = []
        self._iters = 0
        self._reserved = 0
        self._locked_dev = 0
        self._submitted = 0
        self._stats = EngineStats()
        # workflow table, predictor calls and their latency samples: shared with the SGLang plugin
        self._flows = WorkflowTracker(self.board, config.predictor, stats=self._stats,
                                      latency_clock=self.latency_clock, on_end=self._on_workflow_end)
        self._workflows = self._flows.workflows  # the same OrderedDict, read on the hot path
        self.policy = make_policy(config.policy, self)
        self._flows.predict = self.policy.uses_predictions
        self._horizon = config.horizon
        if config.predictor is not None:
            self._horizon = min(config.horizon, getattr(config.predictor, "horizon", config.horizon))

    # ================================================================ public API
    @property
    def busy(self) -> bool:
        """True while any request is waiting or running."""
        return bool(self._waiting or self._running)

    @property
    def stats(self) -> EngineStats:
        """Counters and latency samples (a live object; gauges are refreshed on each access)."""
        s = self._stats
        s.device_used_tokens = self.tree.device_tokens + self._reserved
        s.host_used_tokens = self.tree.host_tokens
        s.active_workflows = len(self._workflows)
        s.queue_depth = len(self._waiting)
        s.running = len(self._running)
        return s

    @property
    def submitted(self) -> int:
        """Number of requests submitted so far (the next request's submission index)."""
        return self._submitted

    def submit(self, req: EngineRequest) -> None:
        """Queue ``req`` at the current clock; its workflow's prediction is refreshed now.

        Raises:
            ValueError: ``blocks``/``block_tokens`` lengths differ, a token count is negative,
                the id is already waiting or running, or the request's KV (prompt + output
                tokens) exceeds the device capacity (a real server rejects it too).
        """
        blocks = list(req.blocks)
        toks = [int(t) for t in req.block_tokens]
        if len(blocks) != len(toks):
            raise ValueError(f"request {req.request_id}: {len(blocks)} blocks but {len(toks)} token counts")
        if toks and min(toks) < 0:
            raise ValueError(f"request {req.request_id}: negative block token count")
        if req.request_id in self._known_ids:
            raise ValueError(f"request id {req.request_id!r} is already waiting or running")
        prompt = sum(toks)
        out = max(1, int(req.output_tokens))
        if prompt + out > self.device_capacity:
            raise ValueError(f"request {req.request_id} needs {prompt + out} tokens of KV cache; "
                             f"the device holds {self.device_capacity}")
        r = _Request(req, blocks, toks, prompt, out, self._submitted, self.clock, None, None, reserve=out,
                     cum=[0, *itertools.accumulate(toks)])
        self._submitted += 1
        hints = req.hints
        if hints is not None:
            r.wf, r.agent = self._invocation(hints, tuple(req.features))
        self._known_ids.add(req.request_id)
        self._waiting.append(r)

    def end_workflow(self, workflow_id: str, status: str = "completed") -> None:
        """The workflow ended: its nodes lose it (retired if it was their last). Idempotent."""
        self._flows.end(workflow_id, status)

    def set_app_graph(self, app: str, edges: Mapping[str, Sequence[str]]) -> None:
        """Set ``app``'s static agent graph (agent -> possible next agents), used by ``kvflow``."""
        self.app_graphs[app] = {str(a): tuple(str(b) for b in nexts) for a, nexts in edges.items()}
        self.policy.on_graph(app)

    def advance_to(self, t: float) -> None:
        """Move the clock forward to ``t`` seconds (no-op if ``t <= clock``)."""
        if t > self.clock:
            self.clock = t
            self._retire_idle()

    def step(self, until: float | None = None) -> list[FirstToken | Finished]:
        """Run one continuous-batching iteration at :attr:`clock` and return its events.

        Args:
            until: time of the caller's next outside event (a submission). A decode-only stretch
                stops at the first iteration boundary at or after ``until``, exactly where
                single-iteration stepping would have let the caller in. ``None``: run to the next
                completion.

        Returns:
            Events in time order; empty if the engine is idle.
        """
        self._retire_idle()
        admitted: list[_Request] = []
        max_batch = self.config.max_batch
        while self._waiting and len(self._running) + len(admitted) < max_batch:
            if not self._admit(self._waiting[0]):
                break
            admitted.append(self._waiting.popleft())
        events: list[FirstToken | Finished] = []
        profile = self.profile
        if admitted:
            n_decode = len(self._running)
            load = sum(r.load for r in admitted)
            fresh = sum(r.new_tokens for r in admitted)
            dt = profile.load_time(load) + profile.prefill_time(fresh)
            if n_decode:
                dt += profile.decode_step_time(n_decode)
            self.clock += dt
            start_iter = self._iters
            self._iters += 1
            for r in admitted:
                r.done_at = start_iter + r.output_tokens
                self._running[r.req.request_id] = r
                heapq.heappush(self._finish_heap, (r.done_at, r.index, r))
                events.append(FirstToken(r.req.request_id, self.clock, r.prompt_tokens, r.device_hit, r.host_hit))
        elif self._running:
            dt = profile.decode_step_time(len(self._running))
            k = self._finish_heap[0][0] - self._iters
            if until is not None and dt > 0:
                k = min(k, max(1, math.ceil((until - self.clock) / dt - 1e-9)))
            k = max(1, k)
            if self.policy.prefetches:
                t0 = self.latency_clock()
                self.policy.prefetch(dt * k)
                self._stats.prefetch_decision_s.append(self.latency_clock() - t0)
            clock = self.clock + dt * k
            if until is not None and clock < until <= clock + 1e-9 * max(1.0, until):
                clock = until  # the boundary is ``until`` itself; keep float rounding from landing before it
            self.clock = clock
            self._iters += k
        elif self._waiting:  # cannot happen: submit() rejects requests larger than the device
            raise RuntimeError("engine stalled: a waiting request does not fit an idle device")
        else:
            return events
        while self._finish_heap and self._finish_heap[0][0] <= self._iters:
            _, _, r = heapq.heappop(self._finish_heap)
            self._finish(r)
            events.append(Finished(r.req.request_id, self.clock, r.output_tokens))
        return events

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

    # ================================================================ primitives for policies
    def device_free(self) -> int:
        """Unused device tokens (capacity - cached - reserved for running outputs)."""
        return self.device_capacity - self.tree.device_tokens - self._reserved

    def peek_victim(self) -> Node | None:
        """The device node the policy would evict next (not removed), or ``None``."""
        heap = self._dev_heap
        while heap:
            entry = heap[0]
            if self._dev_valid(entry):
                return entry[3]
            heapq.heappop(heap)
        return None

    def evict_device(self, tokens: int, limit=None) -> int:
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
        self._stats.eviction_decision_s.append(self.latency_clock() - t0)
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
        self._stats.prefetched_tokens += node.tokens
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

    def workflow(self, workflow_id: str) -> Workflow | None:
        """State of an active workflow, or None."""
        return self._workflows.get(workflow_id)

    def active_workflows(self) -> list[Workflow]:
        """All active workflows (oldest activity first)."""
        return list(self._workflows.values())

    # ================================================================ internals
    def _invocation(self, hints, features: tuple[float, ...]) -> tuple[Workflow, str]:
        wf, changed = self._flows.invocation(hints, features, self.clock)
        wf.inflight += 1
        if changed:  # re-file the nodes whose score the new prediction changed
            t0 = self.latency_clock()
            for rec in changed:
                self.refresh(rec.owner)
            self._stats.score_refile_total_s += self.latency_clock() - t0
        history = wf.history
        self.policy.on_invocation(wf, history[-2] if len(history) > 1 else None)
        return wf, hints.agent

    def _on_workflow_end(self, wf: Workflow, changed: list) -> None:
        # called by the tracker between the board's retirement and the predictor's notification
        for rec in changed:
            self.refresh(rec.owner)
        self._stats.retired_workflows += 1
        self.policy.on_workflow_end(wf)

    def _admit(self, r: _Request) -> bool:
        tree = self.tree
        path, n = tree.match(r.blocks)
        # Hits are counted with the request's own per-block token counts (a replayed trace may
        # spread tokens over a shared block differently in two prompts); space with the nodes'.
        cum = r.cum
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
        new_tokens = r.prompt_tokens - device_hit - host_hit
        need = load + new_tokens + r.reserve
        if self._reserved + self._locked_dev + newly_locked + need > self.device_capacity:
            return False
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
        if n < len(r.blocks):
            node = tree.insert(parent, r.blocks[n:], r.toks[n:], DEVICE, self.clock)
            node.sc = NodeScore(node)
            self.lock(node)
            path.append(node)
        now = self.clock
        wf = r.wf
        board = self.board
        if wf is not None and self._workflows.get(wf.workflow_id) is not wf:
            # the workflow ended while this request waited: its use counts, but as an ended one
            for node in path:
                node.last_access = now
                board.note_ended_use(node.sc)
        else:
            for node in path:
                node.last_access = now
                if wf is not None:
                    board.touch(node.sc, wf.workflow_id, r.agent)
        self._reserved += r.reserve
        r.end = path[-1] if path else None
        r.device_hit, r.host_hit, r.new_tokens, r.load = device_hit, host_hit, new_tokens, load
        s = self._stats
        s.prompt_tokens += r.prompt_tokens
        s.device_hit_tokens += device_hit
        s.host_hit_tokens += host_hit
        self.policy.on_admit(r, path)
        return True

    def _finish(self, r: _Request) -> None:
        del self._running[r.req.request_id]
        self._known_ids.discard(r.req.request_id)
        self._reserved -= r.reserve
        node = r.end
        while node is not None and node.parent is not None:
            parent = node.parent
            self.unlock(node)
            node = parent
        self._stats.requests_finished += 1
        if self.config.cache_outputs and r.output_tokens > 1:
            self._cache_output(r)
        if r.wf is not None:
            self._flows.finished(r.wf, self.clock)

    def _cache_output(self, r: _Request) -> None:
        """SGLang's insert at finish (see ``EngineConfig.cache_outputs``); the reserve just released
        holds the room, so nothing is evicted."""
        parent = r.end if r.end is not None and r.end.attached else self.tree.root
        node = self.tree.insert(parent, [f"\x00out:{r.req.request_id}:{r.index}"], [r.output_tokens - 1], DEVICE,
                                self.clock)
        node.sc = NodeScore(node)
        wf = r.wf
        if wf is not None and self._workflows.get(wf.workflow_id) is wf:
            self.board.touch(node.sc, wf.workflow_id, r.agent)
        elif wf is not None:
            self.board.note_ended_use(node.sc)
        self.refresh(node)

    def _evict(self, node: Node) -> None:
        """Move device node ``node`` to the host tier, or drop it (and its host subtree) if the
        host cannot make room."""
        s = self._stats
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
        self._stats.dropped_tokens += node.tokens
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

    def _retire_idle(self) -> None:
        if self._workflows and self.config.idle_retire_s is not None:
            self._flows.retire_idle(self.clock, self.config.idle_retire_s)

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
