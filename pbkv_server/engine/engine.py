"""The engine core's scheduler: continuous batching over the two-tier prefix cache (``docs/architecture.md``).

One :class:`Engine` serves the simulator and the live sim server; its cache
(:class:`~pbkv_server.engine.cache.PrefixCache`), policies and workflow table
(:class:`~pbkv_server.engine.workflows.WorkflowTable`) also serve the SGLang plugin. Time is
virtual: :meth:`Engine.step` runs one iteration (or, when nothing can change, a run of identical
decode iterations) and advances :attr:`Engine.clock` by the modelled duration.

An iteration: admit waiting requests in FIFO order while their KV fits (the cache evicts per
policy); load their host-tier hits over PCIe; prefill their uncached tokens; decode one token for
every request already running. First tokens of admitted requests appear at the end of the
iteration. When nothing was admitted the iteration is decode-only: the policy may prefetch, and
the engine advances straight to the next completion (or to ``until``), since no admission can
succeed before a request finishes and frees memory.

Engine models (``config.engine_model``; ``docs/cost-model.md``, "Engine model"): ``legacy`` is the
above, each admission holding room for the request's whole output. ``sglang`` follows SGLang's
scheduler (sglang 0.5.23): admission by an estimate of new tokens (``PrefillAdder``,
``new_token_ratio``), KV that grows one token per decode step, retraction of running requests
when it runs out (``ScheduleBatch.retract_decode``), and prefill batches of at most
``--chunked-prefill-size`` new tokens; its bookkeeping is in :class:`_SglangModel`.
"""

from __future__ import annotations

import heapq
import itertools
import math
import numbers
import operator
import time
from collections import abc, deque
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

from pbkv_contract.hints import Hints

from .acquire import AcquireRequest, UniformSums
from .cache import PrefixCache
from .pages import block_size, to_units
from .policies.base import NO_HOOKS, Lifecycle, Pins, Prefetching, QueueOrder
from .radix import Node
from .scoring import NodeScore, ScoreBoard
from .types import EngineConfig, EngineRequest, EngineStats, Finished, FirstToken
from .workflows import END_CLIENT, Workflow, WorkflowTable

__all__ = ["Engine", "Workflow", "EndListener"]

#: ``listener(workflow, status, reason)``: called for every workflow end (reason: client, idle,
#: table_full), after the cache re-filed the workflow's nodes.
EndListener = Callable[[Workflow, str, str], None]


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
    tail: int = 0
    end: Node | None = None
    device_hit: int = 0
    host_hit: int = 0
    new_tokens: int = 0
    load: int = 0
    done_at: int = 0
    context: int = 0  # KV tokens it adds to the decode batch's context once running
    cum: "list | UniformSums" = field(default_factory=list)  # AcquireRequest.cum
    internal: bool = False  # a speculative prefill the engine submitted itself: no events, not counted
    generated: int = 0  # engine model sglang: output tokens made before a retraction (prefilled again)
    started: bool = False  # its first token was reported (a retracted request does not report it again)


#: SGLang's estimate constants (sglang 0.5.23 ``srt/environ.py``): SGLANG_INIT_NEW_TOKEN_RATIO,
#: SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR, SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS,
#: SGLANG_RETRACT_DECODE_STEPS, SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION.
INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO_FACTOR = 0.14
NEW_TOKEN_RATIO_DECAY_STEPS = 600
RETRACT_DECODE_STEPS = 20
CLIP_MAX_NEW_TOKENS = 4096
#: The types of a request's block token counts that :meth:`Engine._request` reads as they are.
_INT_ONLY = {int}


def _uniform_least(toks) -> int | None:
    """The least of a prompt's block token counts when they are a list of ints of one block
    size, the last block possibly smaller (every block-hash trace's shape: fixed blocks, a partial
    last one); ``None`` when they are not, and :meth:`Engine._request` checks each count.

    The general check reads every count twice in Python's comparison and type machinery (~45 us
    for an 80k-token prompt of 64-token blocks); here :func:`~pbkv_server.engine.pages.block_size`
    counts the same small-int object in C, and one ``sum`` proves the rest are ints: any other
    number equal to the block size (a float, a NumPy scalar, a ``Decimal``) makes the sum
    something other than an int (an ``int`` subclass equal to it, whose arithmetic is int's, is read as it is). A size
    of 1 is left to the general check, where ``True`` counts as 1 and is converted.
    """
    if type(toks) is not list:
        return None
    size = block_size(toks)
    if size is None or size < 2 or type(sum(toks)) is not int:
        return None
    return min(size, toks[-1])


def _whole(value, what: str) -> int:
    """``value`` as an int if it is a whole number (:func:`_as_whole`), else a ValueError naming
    ``what``."""
    got = _as_whole(value)
    if got is None:
        raise ValueError(f"{what} must be a whole number, got {value!r}")
    return got


def _as_whole(value) -> int | None:
    """``value`` as an int if it is a whole number: an int, an integral float (a JSON writer's
    ``64.0``), a NumPy integer; ``None`` for anything else (a fraction, NaN, infinity, a bool, a
    string, None), as the trace reader refuses them (``pbkv_contract.trace``)."""
    if type(value) is int:
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)  # an integer type (NumPy's too)
    except TypeError:
        pass
    if isinstance(value, numbers.Real):  # another real type (a NumPy float32, a Fraction)
        value = float(value)
        return int(value) if value.is_integer() else None
    return None


def _whole_counts(toks, rid) -> list[int]:
    """A request's block token counts as a list of ints (:func:`_as_whole` each), or a ValueError
    that names the first one that is not a whole number."""
    try:
        if isinstance(toks, _NOT_SEQUENCES):
            raise TypeError
        len(toks)  # a sized sequence, as blocks must be (an iterator is refused like them)
        items = list(toks)
    except TypeError:
        raise ValueError(f"request {rid}: block_tokens must be a sequence of token counts, "
                         f"got {type(toks).__name__}") from None
    counts = list(map(_as_whole, items))
    if None in counts:
        i = counts.index(None)
        raise ValueError(f"request {rid}: block_tokens[{i}] must be a whole number, got {items[i]!r}")
    return counts


#: What is iterable but not a sequence of blocks or counts in order (a str's characters, a set's
#: or a dict's keys).
_NOT_SEQUENCES = (str, bytes, abc.Set, abc.Mapping)


def _check_metadata(req: EngineRequest) -> None:
    """Refuse, before the engine records anything, request fields of the wrong type that it would
    only meet later (a workflow's invocation, a policy's read of the session or TTL, the
    speculative prefill after the request finishes)."""
    rid = req.request_id
    if not isinstance(rid, str) or not rid:
        raise ValueError(f"request id must be a non-empty string, got {rid!r}")
    hints = req.hints
    if hints is not None:
        if not isinstance(hints, Hints):
            raise ValueError(f"request {rid}: hints must be pbkv_contract.hints.Hints or None, "
                             f"got {type(hints).__name__}")
        if not isinstance(hints.workflow_id, str) or not hints.workflow_id or not isinstance(hints.agent, str):
            raise ValueError(f"request {rid}: hints need a non-empty workflow_id and an agent, as strings")
        if _as_whole(hints.step) is None or hints.step < 0:
            raise ValueError(f"request {rid}: hints.step must be a whole number >= 0, got {hints.step!r}")
    try:
        features = tuple(req.features)
    except TypeError:
        raise ValueError(f"request {rid}: features must be a sequence of numbers") from None
    for i, f in enumerate(features):
        if isinstance(f, bool) or not isinstance(f, numbers.Real) or not math.isfinite(f):
            raise ValueError(f"request {rid}: features[{i}] must be a finite number, got {f!r}")
    if not isinstance(req.last_step, bool):
        raise ValueError(f"request {rid}: last_step must be true or false, got {req.last_step!r}")
    nxt = req.speculative_next
    if nxt is not None and not (isinstance(nxt, (tuple, list)) and len(nxt) == 2
                                and all(not isinstance(x, _NOT_SEQUENCES) and hasattr(x, "__len__") for x in nxt)
                                and len(nxt[0]) == len(nxt[1])):
        raise ValueError(f"request {rid}: speculative_next must be None or (blocks, block_tokens) of one length")
    if req.session_id is not None and not isinstance(req.session_id, str):
        raise ValueError(f"request {rid}: session_id must be a string or None, got {type(req.session_id).__name__}")
    if req.priority is not None:
        _whole(req.priority, f"request {rid}: priority")
    ttl = req.cache_ttl_s
    if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not ttl >= 0
                            or math.isinf(ttl)):
        raise ValueError(f"request {rid}: cache_ttl_s must be a finite number >= 0 or None, got {ttl!r}")


@dataclass(slots=True)
class _SglangModel:
    """SGLang's admission estimate (``NewTokenRatioTracker``, ``schedule_policy.py``
    ``PrefillAdder``): a request is admitted when its new tokens plus ``min(output left, 4096) x
    ratio`` for it and for every running request fit the pool (evictable cache counts as free).
    The ratio starts at 0.7, falls by (0.7 - 0.7 x 0.14) / 600 per decode step to 0.7 x 0.14, and
    after a retraction is set to ``(decoded + 20 x running) / (max new tokens + 1)``, at most 1;
    it is reset when the engine goes idle. The trace's output length stands for
    ``max_new_tokens`` (no ``ignore_eos``)."""

    chunk: int  # most new tokens per prefill batch (0: no chunking)
    ratio: float = INIT_NEW_TOKEN_RATIO

    @property
    def min_ratio(self) -> float:
        return INIT_NEW_TOKEN_RATIO * MIN_NEW_TOKEN_RATIO_FACTOR

    def decay(self, steps: int) -> None:
        step = (INIT_NEW_TOKEN_RATIO - self.min_ratio) / NEW_TOKEN_RATIO_DECAY_STEPS
        self.ratio = max(self.ratio - step * steps, self.min_ratio)

    def estimate(self, tokens_left: int) -> int:
        """Tokens the admission check sets aside for ``tokens_left`` more output tokens."""
        return math.ceil(min(tokens_left, CLIP_MAX_NEW_TOKENS) * self.ratio)

    def running_estimate(self, running: Iterable["_Request"], iters: int) -> int:
        """Sum of :meth:`estimate` over the ``running`` requests' outputs left after iteration
        ``iters`` (one call rather than one per request: it runs at every step)."""
        ratio, ceil, clip = self.ratio, math.ceil, CLIP_MAX_NEW_TOKENS
        return sum([ceil(min(r.done_at - iters, clip) * ratio) for r in running])


class Engine:
    """Continuous-batching scheduler over a :class:`~pbkv_server.engine.cache.PrefixCache`.

    Args:
        config: see :class:`~pbkv_server.engine.EngineConfig`.

    Raises:
        ValueError: unknown policy, an offline policy without ``config.future``, or bad capacities.

    Attributes:
        clock: engine time, seconds (virtual).
        cache: the :class:`~pbkv_server.engine.cache.PrefixCache` (tree, tiers, heaps, policy).
        workflows: the :class:`~pbkv_server.engine.workflows.WorkflowTable`.
        board: the :class:`~pbkv_server.engine.scoring.ScoreBoard` (A_w(c), scores, retirement).
        profile: the hardware cost model iterations are timed with (``config.profile``).

    The cache's state (``tree``, ``policy``, capacities, ``app_graphs``) and primitives
    (``refresh``, ``evict_device``...) are read on :attr:`cache` itself; the engine repeats none.
    """

    #: Clock of the latency samples in :attr:`stats` (seconds). Wall time by default; a benchmark
    #: on a shared machine may use ``time.thread_time`` so other processes' load does not count.
    latency_clock = staticmethod(time.perf_counter)

    def __init__(self, config: EngineConfig) -> None:
        if config.max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        self.config = config
        self.profile = config.profile
        self.clock = 0.0
        self._stats = EngineStats()
        self.board = ScoreBoard(config.gamma, config.horizon)
        self.cache = PrefixCache(config, self.board, self._stats, self.latency_clock)
        policy = self.cache.policy
        # the policy's opt-in parts, resolved once (policies/base.py, "capabilities")
        self._hooks: Lifecycle = policy.capability(Lifecycle) or NO_HOOKS
        self._queue: QueueOrder | None = policy.capability(QueueOrder)
        self._pins: Pins | None = policy.capability(Pins)
        self._prefetcher: Prefetching | None = policy.capability(Prefetching)
        # workflow table, predictor calls and their latency samples: shared with the SGLang plugin
        self.workflows = WorkflowTable(
            self.board, config.predictor, predict=policy.uses_predictions, stats=self._stats,
            latency_clock=self.latency_clock, on_end=self._on_workflow_end,
            max_active=config.max_active_workflows, max_ended=config.max_ended_ids,
            batch=config.batch_predictions, on_changed=self._rescore, on_release=self.cache.rescore)
        self._active = self.workflows.workflows  # the same OrderedDict, read on the hot path
        self._lifecycle_clock = config.lifecycle_clock
        self._end_listeners: list[EndListener] = []
        self._waiting: deque[_Request] = deque()
        self._running: dict[str, _Request] = {}
        self._known_ids: set[str] = set()
        self._finish_heap: list = []
        self._context = 0  # KV tokens the running requests hold (prompt + tokens generated so far)
        self._iters = 0
        self._attention = config.prefill_cost == "attention"
        chunk = config.chunked_prefill_size
        self._sglang = (_SglangModel(self.profile.chunked_prefill_size if chunk is None else chunk)
                        if config.engine_model == "sglang" else None)
        self._submitted = 0
        self._internal = itertools.count(1)  # speculative prefills: negative indices, never the caller's

    # ================================================================ public API
    @property
    def busy(self) -> bool:
        """True while any request is waiting or running."""
        return bool(self._waiting or self._running)

    @property
    def stats(self) -> EngineStats:
        """Counters and latency samples (a live object; gauges are refreshed on each access)."""
        s = self._stats
        tree = self.cache.tree
        s.device_used_tokens = tree.device_tokens + self.cache.reserved_tokens
        s.host_used_tokens = tree.host_tokens
        s.active_workflows = len(self._active)
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
            ValueError: a field of the wrong type (one line naming the request and the field: a
                count that is not a whole number, an unhashable block key, a request id that is
                not a string...), ``blocks``/``block_tokens`` lengths differ, a token count is
                negative, the id is already waiting or running, or the request's KV (prompt +
                output tokens) exceeds the device capacity (a real server rejects it too). The
                engine is then as it was.
        """
        r = self._request(req, self._submitted)
        self.cache.now = self.clock
        self._submitted += 1
        hints = req.hints
        if hints is not None:
            r.wf, r.agent = self._invocation(hints, tuple(req.features), req.session_id)
        self._known_ids.add(req.request_id)
        self._waiting.append(r)

    def close_session(self, session_id: str) -> None:
        """The client closed SGLang session ``session_id`` (``/close_session``): tell the policy,
        and release the session's hold on the history its ended turns left (it may retire now;
        :meth:`WorkflowTable.close_session`). A PBKV workflow of the same id is ended separately
        (:meth:`end_workflow`)."""
        self._hooks.on_session_close(session_id)
        self.workflows.close_session(session_id)

    def end_workflow(self, workflow_id: str, status: str = "completed", reason: str = END_CLIENT) -> bool:
        """The workflow ended: its nodes lose it (retired if it was their last). Idempotent.

        Returns:
            True if the workflow was active (False for a repeated end or an unknown id).
        """
        return self.workflows.end(workflow_id, status, reason) is not None

    def keep_workflow(self, workflow_id: str) -> bool:
        """A KV-hint retain or fetch from another request says active workflow ``workflow_id``
        runs on (a long tool call): its idle clock restarts on the lifecycle clock, as the
        backends' book does (:meth:`WorkflowTable.keep`). Returns whether it is active; an ended
        or unknown id is left alone (a hint never starts a workflow)."""
        return self.workflows.keep(workflow_id, self._lifecycle_now())

    def prefetch_workflow(self, workflow_id: str) -> int:
        """Load the host-tier cache that workflow ``workflow_id`` touched back to the device, as far
        as free device room goes (an orchestrator's ``kv.fetch`` hint; nothing is evicted for it,
        a node locked by a running request stays). An ended or unknown workflow has no nodes.

        Returns:
            Tokens loaded (counted in ``stats.prefetched_tokens`` like any prefetch).
        """
        return self.cache.load_nodes([rec.owner for rec in self.board.records(workflow_id)])

    def add_end_listener(self, listener: EndListener) -> None:
        """Call ``listener(workflow, status, reason)`` at every workflow end (see :data:`EndListener`)."""
        self._end_listeners.append(listener)

    def retire_idle(self) -> list[str]:
        """Retire workflows idle for ``config.idle_retire_s`` on the lifecycle clock (engine time,
        or ``config.lifecycle_clock``); returns their ids. Also runs at every :meth:`step`."""
        if (not self._active and not self.workflows.sessions) or self.config.idle_retire_s is None:
            return []
        return self.workflows.retire_idle(self._lifecycle_now(), self.config.idle_retire_s)

    def set_app_graph(self, app: str, edges: Mapping[str, Sequence[str]]) -> None:
        """Set ``app``'s static agent graph (agent -> possible next agents), used by graph policies."""
        self.workflows.flush()
        self.cache.set_app_graph(app, edges)

    def advance_to(self, t: float) -> None:
        """Move the clock forward to ``t`` seconds (no-op if ``t <= clock``)."""
        if t > self.clock:
            self.clock = t
            self.retire_idle()

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
        self.workflows.flush()  # one predictor call for the invocations since the last step
        self.retire_idle()
        self.cache.now = self.clock
        admitted: list[_Request] = []
        max_batch = self.config.max_batch
        queue, pins, sg = self._queue, self._pins, self._sglang
        if sg is not None:
            if not self._running and not self._waiting:
                sg.ratio = INIT_NEW_TOKEN_RATIO  # idle: SGLang resets its estimate
            headroom = sg.running_estimate(self._running.values(), self._iters)
            budget = sg.chunk or math.inf
        while self._waiting and len(self._running) + len(admitted) < max_batch:
            # FIFO, unless the policy schedules some waiting request first (Continuum: jobs whose
            # KV it pinned); the request it picks blocks the rest like the head does
            i = queue.pick_waiting([r.req for r in self._waiting]) if queue is not None else 0
            if sg is not None and budget <= 0:
                break  # the prefill batch holds its chunk of new tokens (PrefillAdder.rem_chunk_tokens)
            if not (self._admit(self._waiting[i]) if sg is None else self._admit_sglang(self._waiting[i], headroom)):
                if not self._running and not admitted and pins is not None and pins.relieve():
                    continue  # the policy's pins blocked an idle engine: it gave one up, retry
                if not self._running and not admitted and self.cache.fit_idle(self._acquire_request(self._waiting[i])):
                    continue  # its prefix was cached larger than it counts it: dropped, retry
                break
            r = self._waiting[i]
            admitted.append(r)
            del self._waiting[i]
            if sg is not None:
                budget -= r.new_tokens
                headroom += sg.estimate(r.output_tokens - r.generated - 1)
        events: list[FirstToken | Finished] = []
        profile = self.profile
        if admitted:
            # a prefill of more new tokens than the chunk runs over several iterations, each with
            # a decode step of the running batch (SGLang keeps prefill and decode batches apart)
            fresh = sum(r.new_tokens for r in admitted)
            chunks = max(1, math.ceil(fresh / sg.chunk)) if sg is not None and sg.chunk else 1
            if sg is not None and self._running:
                self._decode_room(chunks, whole=True)  # the running batch decodes during every chunk
            n_decode = len(self._running)
            load = sum(r.load for r in admitted)
            load_s = profile.load_time(load)
            if self._attention:  # each request attends to its cached prefix (and, as a whole, to itself)
                prefill_s = sum(profile.prefill_time_at(r.new_tokens, r.prompt_tokens + r.generated - r.new_tokens)
                                for r in admitted)
            else:
                prefill_s = profile.prefill_time(fresh)
            dt = load_s + prefill_s
            if n_decode:
                decode_s = profile.decode_steps_time(n_decode, self._context, chunks)
                dt += decode_s
                self._stats.decode_iterations += chunks
                self._stats.decode_s += decode_s
                self._context += n_decode * chunks  # each running request generated one token per iteration
                if sg is not None:
                    self._hold(n_decode * chunks)
                    sg.decay(chunks)
            admitted_at = self.clock
            self.clock += dt
            last_iter = self._iters + chunks - 1
            self._iters += chunks
            for r in admitted:
                r.done_at = last_iter + r.output_tokens - r.generated
                r.context = r.prompt_tokens + r.generated + 1  # its prompt, any output before a retraction, a token
                self._context += r.context
                self._running[r.req.request_id] = r
                heapq.heappush(self._finish_heap, (r.done_at, r.index, r))
                if not r.internal and not r.started:
                    r.started = True
                    events.append(FirstToken(r.req.request_id, self.clock, r.prompt_tokens, r.device_hit, r.host_hit,
                                             admitted_at, load_s, prefill_s))
        elif self._running:
            n = len(self._running)
            k = self._finish_heap[0][0] - self._iters
            if until is not None and profile.decode_step_time(n, self._context) > 0:
                k = min(k, profile.decode_steps_until(n, self._context, until - self.clock))
            k = max(1, k)
            if sg is not None:  # the KV grows a token per sequence and step: room first, else retract
                k = self._decode_room(k)
                n = len(self._running)
                if not n:
                    return events  # all retracted: they wait to be prefilled again
                # allocated before the stretch runs, as SGLang allocates each step's KV before the
                # forward pass: a prefetch during it gets only what is left
                self._hold(n * k)
            stretch = profile.decode_steps_time(n, self._context, k)
            if self._prefetcher is not None:
                t0 = self.latency_clock()
                self.cache.prefetch(stretch)
                self._stats.prefetch_decision_s.append(self.latency_clock() - t0)
            self._context += n * k
            clock = self.clock + stretch
            if until is not None and clock < until <= clock + 1e-9 * max(1.0, until):
                clock = until  # the boundary is ``until`` itself; keep float rounding from landing before it
            self._stats.decode_iterations += k
            self._stats.decode_s += clock - self.clock
            self.clock = clock
            self._iters += k
            if sg is not None:
                sg.decay(k)
        elif self._waiting:  # cannot happen: submit() rejects requests larger than the device, and
            # an idle device drops a prefix cached larger than the request counts it (fit_idle)
            raise RuntimeError("engine stalled: a waiting request does not fit an idle device")
        else:
            return events
        self.cache.now = self.clock  # completions happen at the end of the iteration
        while self._finish_heap and self._finish_heap[0][0] <= self._iters:
            done, _, r = heapq.heappop(self._finish_heap)
            if done != r.done_at or self._running.get(r.req.request_id) is not r:
                continue  # retracted since (engine model sglang): its new entry is elsewhere in the heap
            self._finish(r)
            if not r.internal:
                events.append(Finished(r.req.request_id, self.clock, r.output_tokens))
        return events

    def workflow(self, workflow_id: str) -> Workflow | None:
        """State of an active workflow, or None."""
        return self._active.get(workflow_id)

    def active_workflows(self) -> list[Workflow]:
        """All active workflows (oldest activity first)."""
        return list(self._active.values())

    # ================================================================ internals
    def _request(self, req: EngineRequest, index: int) -> _Request:
        """Check ``req`` and turn it into the scheduler's record (see :meth:`submit` for errors)."""
        rid = req.request_id
        toks = req.block_tokens
        least = _uniform_least(toks)
        uniform = least is not None
        if not uniform:
            # a list of counts that are all ints already is read as it is, a type check in C at
            # half the cost of reading each; anything else is read count by count. (Nothing keeps
            # this list: to_units copies it.)
            if type(toks) is not list or set(map(type, toks)) != _INT_ONLY:
                toks = _whole_counts(toks, rid)
            least = min(toks, default=1)  # read once: to_units needs it too
        blocks = req.blocks
        try:  # every key, in C (~3 us a long prompt): an unhashable one would stop the engine at admission
            if isinstance(blocks, _NOT_SEQUENCES):
                raise TypeError
            len(blocks)  # a sequence, read again later (an iterator would be empty by then)
            hash(tuple(blocks))
        except TypeError:
            raise ValueError(f"request {rid}: blocks must be a sequence of hashable keys, "
                             f"got {type(blocks).__name__}") from None
        _check_metadata(req)
        if len(req.blocks) != len(toks):
            raise ValueError(f"request {req.request_id}: {len(req.blocks)} blocks but {len(toks)} token counts")
        if least < 0:
            raise ValueError(f"request {req.request_id}: negative block token count")
        if req.request_id in self._known_ids:
            raise ValueError(f"request id {req.request_id!r} is already waiting or running")
        page_size = self.config.page_size
        if page_size is None and least > 0:
            # one unit per block, its count as given (to_units): the prompt is the last of the
            # units' running sums, which the request keeps anyway (no separate pass to sum them)
            units = to_units(req.blocks, toks, None, least)
            cum = UniformSums(len(toks), toks[0], toks[-1]) if uniform else [0, *itertools.accumulate(units.toks)]
            prompt = cum[-1]
        else:
            units = cum = None
            prompt = sum(toks)
        out = max(1, _whole(req.output_tokens, f"request {rid}: output_tokens"))
        if prompt + out > self.cache.device_capacity:
            raise ValueError(f"request {req.request_id} needs {prompt + out} tokens of KV cache; "
                             f"the device holds {self.cache.device_capacity}")
        if units is None:
            units = to_units(req.blocks, toks, page_size, least)
            cum = [0, *itertools.accumulate(units.toks)]
        # the uncached tail (less than a page) holds KV while the request runs, like its output
        return _Request(req, units.keys, units.toks, prompt, out, index, self.clock, None, None,
                        reserve=out + units.tail, tail=units.tail, cum=cum)

    def _speculative_prefill(self, r: _Request) -> None:
        """Queue the one-token prefill of ``r``'s next-turn prefix (Dynamo ``speculative_prefill``:
        the frontend sends it once a turn finishes, so the next turn finds it cached). It costs
        prefill compute like any request, emits no events, and its prompt is counted in
        ``speculative_prefill_tokens`` instead of the hit-rate figures."""
        blocks, toks = r.req.speculative_next
        if not blocks:
            return
        spec = EngineRequest(f"{r.req.request_id}~speculative", list(blocks), list(toks), 1)
        try:
            q = self._request(spec, -next(self._internal))
        except ValueError:  # larger than the device, or (never expected) a clash of ids
            return
        q.internal = True
        self._known_ids.add(spec.request_id)
        self._waiting.append(q)

    def _lifecycle_now(self) -> float:
        return self.clock if self._lifecycle_clock is None else self._lifecycle_clock()

    def _invocation(self, hints, features: tuple[float, ...], session: str | None) -> tuple[Workflow, str]:
        # the table re-files what a prediction changed through on_changed (_rescore)
        wf = self.workflows.invocation(hints, features, self._lifecycle_now(), session)
        wf.inflight += 1
        history = wf.history
        self._hooks.on_invocation(wf, history[-2] if len(history) > 1 else None)
        return wf, hints.agent

    def _rescore(self, changed: list[NodeScore]) -> None:
        """Re-file the nodes whose score a new prediction changed (timed)."""
        t0 = self.latency_clock()
        self.cache.rescore(changed)
        self._stats.score_refile_total_s += self.latency_clock() - t0

    def _on_workflow_end(self, wf: Workflow, changed: list[NodeScore], status: str, reason: str) -> None:
        # called by the table between the board's retirement and the predictor's notification
        self.cache.rescore(changed)
        self._stats.retired_workflows += 1
        self._hooks.on_workflow_end(wf)
        for listener in self._end_listeners:
            listener(wf, status, reason)

    def _acquire_request(self, r: _Request, reserve: int | None = None) -> AcquireRequest:
        wf = r.wf
        active = wf is None or self._active.get(wf.workflow_id) is wf
        return AcquireRequest(r.blocks, r.toks, r.cum, r.reserve if reserve is None else reserve, self.clock, wf,
                              r.agent, active, r.index, r.tail, r.req, not r.internal)

    def _admit(self, r: _Request) -> bool:
        got = self.cache.acquire(self._acquire_request(r))
        if got is None:
            return False
        r.end = got.end
        r.device_hit, r.host_hit, r.new_tokens, r.load = got.device_hit, got.host_hit, got.new_tokens, got.load
        return True

    def _admit_sglang(self, r: _Request, headroom: int) -> bool:
        """Admit ``r`` by SGLang's check (``PrefillAdder.add_one_req``): its new tokens, the KV it
        holds at once (uncached tail, output before a retraction, first token) and the estimate
        of its output and of every running request's (``headroom`` for those) must fit beside
        what cannot be evicted. The estimate is freed again at once: KV grows by decode steps."""
        hold = r.tail + r.generated + 1
        spare = self._sglang.estimate(r.output_tokens - r.generated - 1) + headroom
        got = self.cache.acquire(self._acquire_request(r, hold + spare))
        if got is None:
            return False
        self.cache.release(None, spare)
        r.reserve = hold
        r.end = got.end
        r.device_hit, r.host_hit, r.load = got.device_hit, got.host_hit, got.load
        r.new_tokens = got.new_tokens + r.generated  # output made before a retraction is prefilled again
        return True

    def _hold(self, tokens: int) -> None:
        """Add ``tokens`` of decoded KV to the running requests' reservation (room was made by
        :meth:`_decode_room`)."""
        self.cache.hold(tokens)

    def _decode_room(self, steps: int, whole: bool = False) -> int:
        """Make room for ``steps`` decode steps of the running batch (a token per sequence and
        step), evicting cache per policy; retract running requests while not even one step fits
        (all ``steps`` when ``whole``). Returns the steps that fit (0: none runs any more).

        Retraction follows ``ScheduleBatch.retract_decode``: the request with the fewest output
        tokens, then the longest prompt, goes first, until the rest fit a step; its KV is freed,
        it waits at the head of the queue and is prefilled again (prompt + output so far); SGLang
        then evicts ``20 x remaining`` tokens and resets the ratio. One request that cannot fit
        alone is where SGLang aborts it for lack of memory: counted in ``oom_events``."""
        cache, sg = self.cache, self._sglang
        retracted = False
        while self._running:
            n = len(self._running)
            want = n * steps if whole else n
            short = n * steps - cache.device_free()
            if short > 0:
                cache.evict_device(short)
            free = cache.device_free()
            if free >= want:
                break
            if n == 1:
                self._stats.oom_events += 1  # the real engine aborts it; the model lets it run
                return steps
            # SGLang sorts (output so far, -prompt) descending, stably, and pops the last: among
            # equals the latest admitted goes first
            self._retract(min(reversed(self._running.values()),
                              key=lambda q: (q.output_tokens - (q.done_at - self._iters), -q.prompt_tokens)))
            retracted = True
        if retracted and self._running:
            short = len(self._running) * RETRACT_DECODE_STEPS - cache.device_free()
            if short > 0:
                cache.evict_device(short)
            decoded = sum(q.output_tokens - (q.done_at - self._iters) for q in self._running.values())
            wanted = sum(q.output_tokens for q in self._running.values())
            sg.ratio = min(1.0, (decoded + RETRACT_DECODE_STEPS * len(self._running)) / (wanted + 1))
        n = len(self._running)
        return min(steps, max(1, cache.device_free() // n)) if n else 0

    def _retract(self, r: _Request) -> None:
        """Take ``r`` off the running batch (engine model sglang): free its KV (its prompt's
        cached prefix stays, unlocked), and queue it first, to be prefilled again."""
        made = r.output_tokens - (r.done_at - self._iters)  # tokens generated in all, >= 1
        del self._running[r.req.request_id]
        self._context -= r.prompt_tokens + made
        self.cache.release(r.end, r.tail + made)
        self._stats.retractions += 1
        self._stats.retracted_tokens += r.prompt_tokens + made
        r.generated, r.end = made, None
        self._waiting.appendleft(r)

    def _finish(self, r: _Request) -> None:
        del self._running[r.req.request_id]
        self._context -= r.context + r.output_tokens - r.generated - 1  # its prompt and all its output tokens
        self._known_ids.discard(r.req.request_id)
        self._hooks.on_finish(r.req, r.wf, r.end)  # before the release: pins are set on a locked path
        # legacy: the whole output was reserved at admission; sglang: it grew a token a step
        self.cache.release(r.end, r.reserve if self._sglang is None else r.tail + r.output_tokens)
        if r.internal:
            return
        self._stats.requests_finished += 1
        if self.config.cache_outputs and r.output_tokens > 1:
            self._cache_output(r)
        if r.wf is not None:
            self.workflows.finished(r.wf, self._lifecycle_now())
        if r.req.speculative_next is not None:
            self._speculative_prefill(r)

    def _cache_output(self, r: _Request) -> None:
        """SGLang's insert at finish (see ``EngineConfig.cache_outputs``): prompt + output[:-1], in
        whole pages, so the uncached prompt tail and the output fill pages together."""
        tokens = r.output_tokens - 1 + r.tail
        key = f"\x00out:{r.req.request_id}:{r.index}"  # never a prompt's key: no later prompt matches it
        page = self.config.page_size
        if page is None:
            keys, toks = [key], [tokens]
        else:
            keys = [(key, i) for i in range(tokens // page)]
            toks = [page] * len(keys)
        wf = r.wf
        active = wf is not None and self._active.get(wf.workflow_id) is wf
        self.cache.insert_output(r.end, keys, toks, self.clock, wf, r.agent, active)
