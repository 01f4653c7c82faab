"""The two-tier prefix cache of the engine core: radix tree, tier accounting, policy heaps, eviction.

:class:`PrefixCache` owns everything about cached KV and nothing about time or batching: the
:class:`~pbkv_server.engine.radix.RadixTree` over block keys, the device and host capacities, the
tokens locked by running requests and reserved for their outputs, and three lazy heaps ordered by
the policy (device victims, host victims, prefetch candidates). The scheduler
(:class:`~pbkv_server.engine.Engine`) asks it to :meth:`acquire` a request's prefix at admission
and to :meth:`release` it at completion; policies use the primitives below (refresh, split,
evict, load, lock) and see nothing of the scheduler. See ``docs/architecture.md``, "Engine core".

Eviction frees whole units only (pages, or blocks in replay; :mod:`~pbkv_server.engine.pages`)
and no more of a node than needed: a victim larger than the shortfall is split and only its tail
goes, so a later request that shares the node's first units still finds them, and no cached node
ever sits below an evicted one. It moves the freed part to the host tier when the host can make
room (by dropping host leaves in policy order, again only what is needed), and otherwise drops it
with its host subtree. Nodes on the path of a running request, and nodes pinned with
:meth:`PrefixCache.lock`, never move: a node is kept on the device rather than dropped while a
pinned host node hangs below it. A policy that pins nodes itself (the ``Pins`` capability: TTL pins,
Continuum's tool-call pins) is asked :meth:`~pbkv_server.engine.policies.Policy.holds` about each
victim (a held node stays on its tier) and
:meth:`~pbkv_server.engine.policies.Policy.keeps` before a drop (a kept node stays in the cache);
both are pure questions, and the cache calls :meth:`~pbkv_server.engine.policies.Policy.expire`
just before them so that holds whose time is over are cleared (and their nodes re-filed) first.
"""

from __future__ import annotations

import time
from typing import Callable, Mapping, NamedTuple, Sequence

from .acquire import Acquired, AcquireObserver, AcquireRequest, UniformSums
from .context import EngineContext
from .cost import HardwareProfile
from .eviction import Eviction
from .guard import LRUGuard, host_value
from .guard_feed import GuardFeed
from .heaps import EvictionHeaps
from .policies import make_policy
from .policies.base import NO_HOOKS, UNGUARDED, Lifecycle, Pins, Policy, Prefetching
from .prefetch import run_plan
from .radix import DEVICE, HOST, Node, RadixTree
from .scoring import NodeScore, ScoreBoard
from .types import Admission, EngineConfig, EngineStats
from .workflows import Workflow

__all__ = ["PrefixCache", "Acquired", "AcquireRequest", "AcquireObserver"]


class _Match(NamedTuple):
    """The match step of :meth:`PrefixCache.acquire`: the prompt's cached prefix and its cost.

    Attributes:
        path: cached nodes covering ``blocks[:matched]`` (device ones first).
        matched: leading units found.
        device_hit, host_hit: prompt tokens found per tier (the request's own token counts).
        load: tokens of the host nodes to copy to the device (the nodes' own counts).
        newly_locked: device tokens the path would lock that no running request locks yet.
    """

    path: list[Node]
    matched: int
    device_hit: int
    host_hit: int
    load: int
    newly_locked: int


class PrefixCache(Eviction):
    """Device and host KV cache as one radix tree, evicted in the order of a policy.

    The eviction primitives (:meth:`evict_device` and the tier moves and drops behind it) are
    inherited from :class:`~pbkv_server.engine.eviction.Eviction`, split out by job.

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
        hooks: the policy's :class:`~pbkv_server.engine.policies.base.Lifecycle` (a no-op object
            when it overrides no hook); the engine calls its hooks through it too.
        device_capacity, host_capacity: KV capacities, tokens.
        heaps: the :class:`~pbkv_server.engine.heaps.EvictionHeaps` the policy's order is kept in.
        app_graphs: app -> static agent graph (agent -> possible next agents), for graph policies.
        now: engine time of the current scheduling step, seconds (kept by the scheduler; policies
            that reason about time read it).
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
        self.tree = RadixTree(on_split=self._on_split, path_keys=config.path_keys)
        self.app_graphs: dict[str, dict[str, tuple[str, ...]]] = {}
        self._reserved = 0
        self._locked_dev = 0
        # upper parts of device nodes whose tail an eviction took (see condemned())
        self._condemned: dict[Node, None] = {}
        # the tail an eviction is cutting off to take it at once (Eviction._split_tail): the cut
        # files neither part again, the eviction files both
        self._cutting: Node | None = None
        self._observers: list[AcquireObserver] = []
        self._guard_feed: GuardFeed | None = None
        # what the policy may read of this cache, and its one way to say an order changed
        self.context = context = EngineContext(board, self.device_capacity, self.host_capacity, self.app_graphs,
                                               config.future, config.horizon, config.rho, self.tree.split,
                                               self.profile.prefill_tokens_per_s)
        self.policy = policy = make_policy(config.policy, context)
        # the policy's capabilities, resolved once (policies/base.py): the hot paths test these
        self._pins: Pins | None = policy.capability(Pins)
        self.hooks: Lifecycle = policy.capability(Lifecycle) or NO_HOOKS
        self._prefetcher: Prefetching | None = policy.capability(Prefetching)
        self._prefetches = self._prefetcher is not None
        self._per_unit = bool(policy.unit_priority)
        self._selective_host = bool(policy.selective_host)
        grouped = type(policy).group is not Policy.group  # the policy groups its victims (heaps.py)
        self.heaps = heaps = EvictionHeaps(policy, self._prefetches, grouped)
        # one-unit eviction takes runs of units at once (eviction.py, _evict_run) when nothing
        # but the heaps' order decides: no holds, no groups
        self._unit_runs = self._per_unit and self._pins is None and not grouped
        # bound once, shadowing the refresh() method: re-filing is on every policy's hot path
        self.refresh = self._refile = context.reorder = heaps.refile_grouped if grouped else heaps.refile
        context.regroup = self.heaps.regroup
        if type(policy).settle is Policy.settle:
            # bound once, shadowing peek_victim(): with the default settle (nothing ever pending)
            # the device's next victim is the heap's, asked with no call between (once a victim)
            self.peek_victim = heaps.peek_device
        # robustness guard (guard.py): a ghost LRU at the same capacity, fed every admission; while
        # the policy is behind it, the policy ranks in LRU order and the heaps are re-filed
        if config.lru_guard and policy.guardable:
            self.guard = LRUGuard(self.device_capacity, self.host_capacity, host_value(self.profile))

    # ================================================================ accounting
    @property
    def now(self) -> float:
        """Engine time of the current scheduling step, seconds (kept by the scheduler; the
        policy reads it as ``context.now``)."""
        return self.context.now

    @now.setter
    def now(self, value: float) -> None:
        self.context.now = value

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

    def condemned(self, node: Node) -> bool:
        """True for the rest of a device node whose tail an eviction took and that no request has
        used since: the policy already chose this node to leave, and took only what it needed.
        Conservative prefetch may take the rest, as it takes retired cache (whole-node eviction,
        SGLang's, would have freed it already)."""
        return node in self._condemned

    def load_tokens(self, seconds: float) -> int:
        """Tokens of KV cache PCIe can move in ``seconds`` (the profile's bandwidth)."""
        return self.profile.load_tokens(seconds)

    # ================================================================ observers
    @property
    def guard(self) -> LRUGuard | None:
        """The robustness guard fed by this cache's admissions, or ``None`` (not guarded).
        Setting it replaces the guard (``None`` switches it off)."""
        return self._guard_feed.guard if self._guard_feed is not None else None

    @guard.setter
    def guard(self, guard: LRUGuard | None) -> None:
        if self._guard_feed is not None:
            self._observers.remove(self._guard_feed)
        self._guard_feed = GuardFeed(guard, self) if guard is not None else None
        if self._guard_feed is not None:
            self._observers.append(self._guard_feed)
        # the policy reads the guard's own fallback state (the guard owns it; nobody copies it)
        self.policy.order_guard = guard if guard is not None else UNGUARDED

    def add_observer(self, observer: AcquireObserver) -> None:
        """Tell ``observer`` of every admission, cached output and release from now on (after the ones
        added before it)."""
        self._observers.append(observer)

    # ================================================================ requests
    def acquire(self, req: AcquireRequest) -> Acquired | None:
        """Admit a request's prompt if its KV fits: match its cached prefix, lock it (evicting
        what is needed), load its host part, insert its new part, and reserve room for its output.

        Returns:
            The locked prefix, or ``None`` when the request does not fit now (nothing changed but
            a possible split of a node where the prompt diverges, and evictions made while trying
            when pinned nodes kept the rest of the room).
        """
        m = self._match(req)
        inserted = req.cum[-1] - m.device_hit - m.host_hit
        if not self._lock(m.path, m.newly_locked, m.load + inserted + req.reserve):
            return None
        self._load(m.path)
        path = self._insert(req, m)
        got = Acquired(path, m.device_hit, m.host_hit, m.load, inserted + req.uncached)
        self._reserve(req, got)
        for observer in self._observers:
            observer.admitted(req, got)
        self.hooks.on_admit(Admission(req.index, req.blocks, req.workflow, req.agent, req.request), path)
        return got

    def fit_idle(self, req: AcquireRequest) -> bool:
        """Let an idle device admit ``req`` when only its cached prefix's size keeps it out.

        Space for a matched prefix is the cached nodes' tokens, hits are the request's own
        per-unit tokens (:meth:`_match`), and the two may differ: a replayed trace without
        ``block_tokens`` spreads each prompt's tokens evenly over its hashes, so a block shared by
        two prompts can hold 10 tokens as the first one cached it and count 9 in the second. A
        request whose own KV fits the device (``Engine.submit`` checks it) can then need more
        than the whole device with its prefix as cached, and would wait forever.

        Call it when nothing runs and ``req`` was refused. If its prefix as cached (device hits,
        host loads) plus the rest of its prompt and its reservation exceeds the device, the
        prefix is dropped from its first node that holds more tokens than the request counts for
        the same units, with the subtree below (the request re-inserts those units with its own
        counts, as a miss). The nodes above are no larger than the request counts them, so the
        request then fits an empty device.

        Returns:
            True if nodes were dropped (admit again); False if the cached sizes were not what
            kept it out, or the node is pinned.
        """
        m = self._match(req)
        cum = req.cum
        need = m.load + cum[-1] - m.device_hit - m.host_hit + req.reserve
        if self._reserved + self._locked_dev + m.newly_locked + need <= self.device_capacity:
            return False
        i = 0
        for node in m.path:
            j = i + len(node.keys)
            if node.frag:  # one-unit nodes, each compared alone: from the first one larger
                u = next((u for u, t in enumerate(node.toks) if t > cum[i + u + 1] - cum[i + u]), None)
                if u:
                    self.tree.split(node, u)  # node keeps the units from u on
                larger = u is not None
            else:
                larger = node.tokens > cum[j] - cum[i]
            if larger:
                if node.lock or self._pinned_below(node) or self._kept(node):
                    return False
                parent = node.parent
                self._drop_subtree(node)
                self._refile(parent)
                return True
            i = j
        return False

    def hold(self, tokens: int) -> None:
        """Add ``tokens`` of decoded KV to the running requests' reservation (engine model
        ``sglang``: the output grows a token a step; the caller made room for it first)."""
        self._reserved += tokens
        for observer in self._observers:
            observer.held(self.device_capacity - self._reserved)

    def release(self, end: Node | None, reserve: int) -> None:
        """A request finished: unlock its path from ``end`` up and free its output reservation."""
        self._reserved -= reserve
        if end is not None:
            for observer in self._observers:
                observer.released(end)
        node = end
        while node is not None and node.parent is not None:
            parent = node.parent
            self.unlock(node)
            node = parent

    def insert_output(self, end: Node | None, keys: list, toks: list, now: float, workflow: Workflow | None,
                      agent: str | None, active: bool) -> Node | None:
        """Keep a finished request's output KV as SGLang does at finish: a leaf under the prompt's
        last cached node ``end`` (or the root), recorded for ``workflow`` like a prompt use.

        Call it right after :meth:`release` of the request's reservation, which holds the room,
        so nothing is evicted. ``keys``/``toks`` are the output's units; ``now``, ``workflow``,
        ``agent``, ``active`` as in :class:`AcquireRequest`.

        Returns:
            The new leaf, or ``None`` when ``keys`` is empty or the room is gone.
        """
        if not keys or sum(toks) > self.device_free():
            return None
        parent = end if end is not None and end.attached and end.tier == DEVICE else self.tree.root
        node = self.tree.insert(parent, list(keys), list(toks), DEVICE, now)  # the tree's own lists
        node.sc = NodeScore(node)
        if workflow is not None and active:
            self.board.touch(node.sc, workflow.workflow_id, agent)
        elif workflow is not None:
            self.board.note_ended_use(node.sc)
        self._refile(node)
        self._refile(parent)
        for observer in self._observers:
            observer.output_cached(keys, toks)
        return node

    def rescore(self, records: Sequence[NodeScore]) -> None:
        """Re-file the nodes whose score or prefetch value changed (a new prediction, an end).

        A node whose re-filing would change no decision is skipped without a call (most of a
        long prompt's chain): a locked node (no victim entry; a prefetch entry it got would be
        invalid from the start, and an invalid entry stays so: ``heaps.py``; its unlock re-files
        it), a device node with a device child (no entry), a host node with a child under a host
        parent (no entry)."""
        refile = self._refile
        for rec in records:
            node = rec.owner
            if node.lock or (node.n_dev_children if node.tier == DEVICE
                             else node.children and node.parent is not None and node.parent.tier != DEVICE):
                continue
            refile(node)

    def reorder(self) -> None:
        """Re-file every evictable node: the policy's order changed as a whole (the guard switched
        modes), and the victim heaps hold priorities of the old order. O(tree)."""
        self.heaps.clear_victims()
        for node in self.tree.nodes():
            self._refile(node)

    def set_app_graph(self, app: str, edges: Mapping[str, Sequence[str]]) -> None:
        """Set ``app``'s static agent graph (agent -> possible next agents) and tell the policy."""
        self.app_graphs[app] = {str(a): tuple(str(b) for b in nexts) for a, nexts in edges.items()}
        self.hooks.on_graph(app)

    # ---------------------------------------------------------------- the steps of acquire()
    def _match(self, req: AcquireRequest) -> _Match:
        """Step 1: the prompt's cached prefix (splitting the node where it diverges) and what it
        would hit, load and newly lock."""
        cum = req.cum
        path, n = self.tree.match(req.blocks)
        # Hits are counted with the request's own per-block token counts (a replayed trace may
        # spread tokens over a shared block differently in two prompts); space with the nodes'.
        device_hit = host_hit = load = newly_locked = 0
        # units of one size but the last (UniformSums): each node's span of the sums is computed
        # here, not read (a list, or the sums' __getitem__ at a Python call each, would cost more)
        size = cum.size if cum.__class__ is UniformSums else 0
        i = 0
        for node in path:
            j = i + len(node.keys)
            if size:
                span = (j - i) * size - (cum.short if j == cum.n else 0)
            else:
                span = cum[j] - cum[i]
            if node.tier == DEVICE:
                device_hit += span
                if node.lock == 0:
                    newly_locked += node.tokens
            else:
                host_hit += span
                load += node.tokens
            i = j
        return _Match(path, n, device_hit, host_hit, load, newly_locked)

    def _lock(self, path: list[Node], newly_locked: int, need: int) -> bool:
        """Step 2: lock ``path`` and evict until ``need`` device tokens are free (host loads, new
        units, the reservation); False, with the path unlocked again, if the locked and reserved
        tokens leave no such room or pinned nodes kept it."""
        if self._reserved + self._locked_dev + newly_locked + need > self.device_capacity:
            return False
        for node in path:
            self.lock(node)
        short = need - self.device_free()
        if short > 0 and self.evict_device(short) < short:
            # nodes pinned below their victims kept the room: the request waits, nothing moved
            for node in path:
                self.unlock(node)
            return False
        return True

    def _load(self, path: list[Node]) -> None:
        """Step 3: move the path's host nodes to the device (their room was made in step 2)."""
        tree = self.tree
        prefetches = self._prefetches
        for node in path:
            if node.tier == HOST:
                tree.set_tier(node, DEVICE)
                self._locked_dev += node.tokens
                if prefetches:  # its host children became prefetch candidates
                    for child in node.children.values():
                        # (a locked child, such as the path's next node, is not one: re-filing it
                        # would only push an entry invalid from the start, as rescore() says)
                        if not child.lock:
                            self._refile(child)

    def _insert(self, req: AcquireRequest, m: _Match) -> list[Node]:
        """Step 4: add the prompt's new units as a locked device leaf, and record the use of every
        node of the path (last access, workflow). Returns the whole path."""
        path, n, blocks, now = m.path, m.matched, req.blocks, req.now
        if n < len(blocks):
            parent = path[-1] if path else self.tree.root
            node = self.tree.insert(parent, blocks[n:], req.toks[n:], DEVICE, now)
            node.sc = NodeScore(node)
            self.lock(node)
            path.append(node)
        for node in path:  # used again: no longer the rest of a victim
            self._condemned.pop(node, None)
        board, workflow = self.board, req.workflow
        if workflow is not None and not req.active:
            # the workflow ended while this request waited: its use counts, but as an ended one
            for node in path:
                node.last_access = now
                board.note_ended_use(node.sc)
        else:
            for node in path:
                node.last_access = now
                if workflow is not None:
                    board.touch(node.sc, workflow.workflow_id, req.agent)
        return path

    def _reserve(self, req: AcquireRequest, got: Acquired) -> None:
        """Step 5: hold the request's output room and count its prompt."""
        self._reserved += req.reserve
        s = self.stats
        if req.count:
            s.prompt_tokens += req.prompt_tokens
            s.device_hit_tokens += got.device_hit
            s.host_hit_tokens += got.host_hit
        else:
            s.speculative_prefill_tokens += req.prompt_tokens

    # ================================================================ primitives for policies
    def refresh(self, node: Node) -> None:
        """Re-file ``node`` in the eviction/prefetch heaps after something its priority depends on
        changed (policies call this for state they own). O(log n).

        Each cache binds this name to :meth:`EvictionHeaps.refile` at construction (no extra call
        per re-filing); the method is the fallback and the documentation."""
        self._refile(node)

    def split(self, node: Node, blocks: int) -> Node:
        """Cut ``node`` after its first ``blocks`` blocks (0 < blocks < len); returns the upper part
        (policies mark the end of a prefix inside a node this way)."""
        return self.tree.split(node, blocks)

    def peek_victim(self) -> Node | None:
        """The device node the policy would evict next (not removed), or ``None``."""
        self.policy.settle()
        return self.heaps.peek_device()

    def prefetch(self, seconds: float) -> None:
        """Run the policy's prefetch plan for a decode-only stretch of ``seconds`` (nothing if the
        policy does not prefetch or plans nothing; :func:`~pbkv_server.engine.prefetch.run_plan`)."""
        if self._prefetcher is None:
            return
        plan = self._prefetcher.prefetch_plan(seconds)
        if plan is not None:
            run_plan(self, seconds, plan)

    def peek_prefetch(self) -> Node | None:
        """The host node with the highest prefetch value whose parent is on the device, or None."""
        return self.heaps.peek_prefetch()

    def load(self, node: Node) -> bool:
        """Copy host node ``node`` to the device as a prefetch (caller checked space; parent on device).

        Every policy's prefetch passes here, so this is where the rule "a pinned node is never
        moved by prefetch" (regression case 5) is kept, once: a locked node is refused.

        Returns:
            True if the node was loaded; False, with nothing changed, if it is pinned (locked by a
            running request or with :meth:`lock`): the caller treats it as a load that failed.
        """
        if node.lock:
            return False
        self._condemned.pop(node, None)  # brought back for a reason: no longer the rest of a victim
        self.tree.set_tier(node, DEVICE)
        self.stats.prefetched_tokens += node.tokens
        self._refile(node)
        for child in node.children.values():
            self._refile(child)
        return True

    def load_nodes(self, nodes: Sequence[Node]) -> int:
        """Bring the host-tier ones of ``nodes`` back to the device (each through :meth:`load`)
        while device room lasts: free tokens, plus retired cache and the condemned rest of victims,
        which conservative prefetch may displace too; active cache is never evicted for them. A
        node loads once its parent is on the device, so the passes repeat while one loads (parents
        first, whatever the order).

        Used by an orchestrator's fetch hint (``kv.fetch``: :meth:`Engine.prefetch_workflow`); the
        policies' own prefetch never calls it.

        Returns:
            Tokens loaded.
        """
        pending = [n for n in nodes if n.attached and n.tier == HOST]
        loaded, progress = 0, True
        while pending and progress:
            progress, rest = False, []
            for node in pending:
                if not node.attached or node.tier != HOST:
                    continue
                parent = node.parent
                if parent is None or parent.tier != DEVICE:
                    rest.append(node)
                    continue
                short = node.tokens - self.device_free()
                if short > 0:
                    self.evict_for(node, short, self._spare)
                if node.tokens <= self.device_free() and self.load(node):
                    loaded += node.tokens
                    progress = True
                else:
                    rest.append(node)
            pending = rest
        return loaded

    def _spare(self, victim: Node, tokens: int) -> bool:
        """Victims :meth:`load_nodes` may evict: retired cache and condemned rests only."""
        return self.policy.is_retired(victim) or self.condemned(victim)

    def evict_for(self, node: Node, tokens: int, limit: Callable[[Node, int], bool] | None = None,
                  loads: bool = False) -> int:
        """Evict device nodes (as :meth:`evict_device`) to free ``tokens`` for prefetching host node ``node``.

        ``node`` and its parent are locked meanwhile: a demotion could otherwise drop the node from
        a full host tier, and the node it hangs from must stay on the device. A pinned ``node``
        cannot be loaded (:meth:`load`), so nothing is evicted for it.

        ``loads``: the caller loads ``node`` (:meth:`load`) next, before anything reads a heap,
        once the device has room for it. The unlocks then file neither ``node`` nor its parent
        when it has: the load moves ``node`` to the device and gives the parent a device child,
        so those entries would go stale unread (a prefetch round makes room this way for most of
        the nodes it loads).

        Returns:
            Tokens freed (0 for a pinned node).
        """
        if node.lock:
            return 0
        parent = node.parent
        self.lock(parent)
        self.lock(node)
        freed = self.evict_device(tokens, limit)
        if loads and self.device_free() >= node.tokens:
            node.lock -= 1  # 0 again (an unlocked host node was locked here): nothing counted
            parent.lock -= 1  # unlock(parent) without the re-filing
            if parent.lock == 0 and parent.tier == DEVICE:
                self._locked_dev -= parent.tokens
        else:
            self.unlock(node)
            self.unlock(parent)
        return freed

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
                if node.n_dev_children:  # not a victim: refile would file nothing (a released path)
                    return
            self._refile(node)

    # ================================================================ internals
    def _on_split(self, top: Node, bottom: Node) -> None:
        if bottom.sc is not None:
            top.sc = self.board.copy(bottom.sc, top)
        if bottom in self._condemned:
            self._condemned[top] = None
        # locked/tier token totals are unchanged: the tokens only moved between the two halves
        self.hooks.on_split(top, bottom)
        if bottom.frag:  # a cut between one-unit nodes (radix.Node.frag): no entry changes
            return
        if bottom is self._cutting:
            # an eviction takes bottom now and files top after it (Eviction._split_tail), before
            # any heap is read: entries filed here would only go stale unread
            return
        self._refile(bottom)  # its first key changed (belady) and its entry must stay current
        self._refile(top)  # a host-tier top is the new prefetch frontier in place of bottom
