"""Several replicas behind a router: trace replay for planning past one machine
(``docs/architecture.md``, "Simulator").

Each replica is its own :class:`~pbkv_server.engine.Engine` (its own device and host tiers,
workflow table and predictor). At each request's submission a router model picks the replica,
as the real routers do:

* ``affinity``: consistent hashing of the workflow id, the key the SDK puts in
  ``X-SMG-Routing-Key``. A ring with :data:`VIRTUAL_NODES` points per replica; a key goes to the
  first point clockwise from its hash (SMG ``consistent_hashing``: lightseekorg/smg
  ``model_gateway/src/worker/hash_ring.rs``, 150 virtual nodes per worker; blake2b here, blake3
  there, so the replica a given id lands on differs from SMG's, the spread does not);
* ``round-robin``: the next replica for every request (SMG ``round_robin``);
* ``cache-aware``: SMG's HTTP ``cache_aware`` policy as SMG 1.13 runs it (smg-project/smg
  ``model_gateway/src/policies/cache_aware.rs``: ``select_worker``, ``select_worker_with_text``,
  ``select_matched_candidate``, ``gate_selected_candidate``; the margin cap from ``smg launch
  --help`` 1.13). The router mirrors, per replica, the prefixes it has sent there (block keys here;
  SMG keeps a radix tree of request text, evicted only past ``--max-tree-size``, so it
  over-estimates a replica's cache once the replica evicts). If the longest mirrored prefix covers
  more than ``cache_threshold`` of the prompt's tokens, the request goes to the least loaded of the
  replicas holding it (``load`` = requests in flight; SMG breaks ties at random, lowest index
  here), unless that replica is over the spill gate: ``load > balance_rel_threshold * mean`` and
  ``load > mean + margin``, ``margin = min(balance_abs_threshold, max(4, 2 * sqrt(mean)))`` (two
  standard deviations of a Poisson in-flight count: our reading of "the in-flight count's natural
  swing"); then, and on a miss, to the least loaded replica (ties: fewer requests routed, then
  lower index). The spill target becomes a holder of the prefix, so hot prefixes replicate.
  Thin replicas are warmed as ``--worker-warmup-divert-every`` says: one cache hit in
  ``divert_every`` goes to a thin replica with nothing in flight (the smallest mirror first; thin:
  a mirror under ``thin_ratio`` x the median mirror, until it has grown by ``warmup_blocks``
  blocks). Without it a replica that missed the first requests never holds a shared prefix and
  idles. SMG's age-based warm-up slice (misses offered to workers during their first 60 s) is not
  modelled: misses already go to the least loaded replica. Defaults are SMG's: 0.3, 64, 1.5, 8,
  0.5, 1024. (SMG's ``docs/configuration/routing.md`` still describes the older rule: a global
  max-min imbalance check, and the smallest tree on a miss.)

A cluster replay is :func:`~pbkv_server.sim.simulator.simulate` with ``replicas`` and ``router``;
its loop (:class:`~pbkv_server.sim.driver.ReplayDriver`) sends end signals to every replica that
served the workflow and advances the engine clocks together. With one replica the replay equals
the single-engine one (a test checks it).
"""

from __future__ import annotations

import bisect
import hashlib
import math
import statistics
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Sequence

from pbkv_server.engine import Engine, EngineRequest

__all__ = [
    "ROUTERS", "VIRTUAL_NODES", "CacheAwareSettings", "Router", "AffinityRouter", "RoundRobinRouter",
    "CacheAwareRouter", "make_router", "cluster_line",
]

#: Router models, by their ``pbkv-bench replay --router`` name.
ROUTERS = ("affinity", "round-robin", "cache-aware")
#: Ring points per replica of the affinity router (SMG's VIRTUAL_NODES_PER_WORKER).
VIRTUAL_NODES = 150


@dataclass(frozen=True, slots=True)
class CacheAwareSettings:
    """SMG's cache-aware thresholds (``--cache-threshold``, ``--balance-abs-threshold``,
    ``--balance-rel-threshold``; SMG's defaults).

    Attributes:
        cache_threshold: matched share of the prompt (0-1) above which a holder of the match is chosen.
        balance_abs_threshold: spill gate, requests in flight above the mean (capped, see the module docstring).
        balance_rel_threshold: spill gate, multiple of the mean load.
        divert_every: one cache hit in this many goes to a thin replica (0: never).
        thin_ratio: a mirror under this share of the median mirror (blocks) is thin.
        warmup_blocks: a thin replica is warm once its mirror grew by this many blocks.
    """

    cache_threshold: float = 0.3
    balance_abs_threshold: int = 64
    balance_rel_threshold: float = 1.5
    divert_every: int = 8
    thin_ratio: float = 0.5
    warmup_blocks: int = 1024


class Router(ABC):
    """Picks the replica of each request at its submission time."""

    @abstractmethod
    def route(self, req: EngineRequest, workflow_id: str, engines: Sequence[Engine]) -> int:
        """Index of the replica in ``engines`` that serves ``req`` (of workflow ``workflow_id``)."""


class AffinityRouter(Router):
    """Consistent hashing of the workflow id on a ring of :data:`VIRTUAL_NODES` points per replica.

    Args:
        replicas: number of replicas (>= 1).
    """

    def __init__(self, replicas: int):
        ring = sorted((_hash64(f"replica-{r}#{v}"), r) for r in range(replicas) for v in range(VIRTUAL_NODES))
        self._points = [p for p, _ in ring]
        self._owners = [r for _, r in ring]
        self._memo: dict[str, int] = {}

    def route(self, req: EngineRequest, workflow_id: str, engines: Sequence[Engine]) -> int:
        r = self._memo.get(workflow_id)
        if r is None:
            i = bisect.bisect_left(self._points, _hash64(workflow_id))
            r = self._memo[workflow_id] = self._owners[i % len(self._points)]
        return r


class RoundRobinRouter(Router):
    """Replica ``k mod N`` for the k-th request."""

    def __init__(self, replicas: int):
        self._n = replicas
        self._next = 0

    def route(self, req: EngineRequest, workflow_id: str, engines: Sequence[Engine]) -> int:
        r = self._next
        self._next = (r + 1) % self._n
        return r


class CacheAwareRouter(Router):
    """SMG's HTTP cache-aware policy over a per-replica mirror of the prefixes routed there (module docstring).

    Args:
        replicas: number of replicas (>= 1).
        settings: the thresholds.
    """

    def __init__(self, replicas: int, settings: CacheAwareSettings = CacheAwareSettings()):
        self._n = replicas
        self.settings = settings
        # Block keys are chained (a key fixes its whole prefix), so a key stands for its
        # radix-tree path; the value has one bit per replica that holds the path.
        self._holders: dict[Any, int] = {}
        self._routed = [0] * replicas
        self._blocks = [0] * replicas  # blocks in each replica's mirror
        self._thin_from: list[int | None] = [None] * replicas  # mirror size when it became thin
        self._hits = 0

    def route(self, req: EngineRequest, workflow_id: str, engines: Sequence[Engine]) -> int:
        s = self.settings
        loads = [_load(e) for e in engines]
        least = min(range(self._n), key=lambda r: (loads[r], self._routed[r], r))
        choice = least
        tokens, holders = self._longest_match(req)
        prompt = sum(req.block_tokens)
        if holders and prompt and tokens / prompt > s.cache_threshold:
            self._hits += 1
            thin = self._thin_idle(loads) if s.divert_every and self._hits % s.divert_every == 0 else None
            if thin is not None:
                choice = thin
            else:
                choice = min(_bits(holders), key=lambda r: (loads[r], r))
                mean = sum(loads) / self._n
                margin = min(s.balance_abs_threshold, max(4.0, 2.0 * math.sqrt(mean)))
                if loads[choice] > s.balance_rel_threshold * mean and loads[choice] > mean + margin:
                    choice = least  # spill: the least loaded replica becomes a holder too
        self._insert(req, choice)
        return choice

    def _thin_idle(self, loads: list[int]) -> int | None:
        """The thin replica with nothing in flight and the smallest mirror, or ``None``."""
        s, sizes = self.settings, self._blocks
        median = statistics.median(sizes)
        for r in range(self._n):
            start = self._thin_from[r]
            if start is None and (sizes[r] == 0 or sizes[r] < s.thin_ratio * median):
                self._thin_from[r] = sizes[r]
            elif start is not None and sizes[r] - start >= s.warmup_blocks:
                self._thin_from[r] = None
        idle = [r for r in range(self._n) if self._thin_from[r] is not None and loads[r] == 0]
        return min(idle, key=lambda r: (sizes[r], r)) if idle else None

    def _longest_match(self, req: EngineRequest) -> tuple[int, int]:
        """(tokens, holder bits) of the longest prefix of ``req`` any replica's mirror holds; (0, 0) if none."""
        tokens, holders = 0, 0
        mirror = self._holders
        for key, tok in zip(req.blocks, req.block_tokens):
            bits = mirror.get(key, 0)
            if not bits:
                break
            tokens += tok
            holders = bits
        return tokens, holders

    def _insert(self, req: EngineRequest, r: int) -> None:
        bit, mirror = 1 << r, self._holders
        for key in req.blocks:
            held = mirror.get(key, 0)
            if not held & bit:
                mirror[key] = held | bit
                self._blocks[r] += 1
        self._routed[r] += 1


def make_router(name: str, replicas: int, cache_aware: CacheAwareSettings = CacheAwareSettings()) -> Router:
    """The router model ``name`` (one of :data:`ROUTERS`) for ``replicas`` replicas.

    Raises:
        ValueError: unknown name, or ``replicas`` < 1.
    """
    if replicas < 1:
        raise ValueError("replicas must be >= 1")
    if name == "affinity":
        return AffinityRouter(replicas)
    if name == "round-robin":
        return RoundRobinRouter(replicas)
    if name == "cache-aware":
        return CacheAwareRouter(replicas, cache_aware)
    raise ValueError(f"unknown router {name!r}; known: {', '.join(ROUTERS)}")


def cluster_line(policy: str, summary: dict[str, Any]) -> str:
    """One line of a cluster replay's routing figures (for ``pbkv-bench replay --replicas``)."""
    rates = [r["hit_rate"] for r in summary["per_replica"] if r["requests"]]
    spread = f"{min(rates):.3f}-{max(rates):.3f}" if rates else "-"
    return (f"{policy}: {summary['replicas']} replicas, router {summary['router']}: workflows on one replica "
            f"{100 * summary['single_replica_share']:.1f}%, requests on the busiest replica "
            f"{summary['load_spread']:.2f}x the mean, device hit rate per replica {spread}, "
            f"end signals {summary['end_deliveries']}")


def _load(engine: Engine) -> int:
    stats = engine.stats
    return stats.queue_depth + stats.running


def _bits(mask: int):
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


def _hash64(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big")
