"""Parameter and result objects of the engine core: requests, events, statistics, config."""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Hashable, Protocol, Sequence, runtime_checkable

from pbkv_contract.hints import Hints

from .cost import HardwareProfile
from .policy_names import BASELINE_POLICY

#: Prefill cost models (``docs/cost-model.md``): ``linear`` = new tokens / prefill rate (the
#: legacy model); ``attention`` adds the attention term of each request's context.
PREFILL_COSTS = ("linear", "attention")
#: Engine models: ``legacy`` admits a request only with room for its whole output and never
#: retracts; ``sglang`` admits by SGLang's estimate of new tokens, retracts running requests when
#: the KV pool runs out and chunks long prefills (``docs/cost-model.md``, "Engine model").
ENGINE_MODELS = ("legacy", "sglang")
#: Defaults of every engine, replay and CLI (one place, so the switch is one commit).
DEFAULT_PREFILL_COST = "attention"
DEFAULT_ENGINE_MODEL = "sglang"

if TYPE_CHECKING:  # the prediction interface imports no torch; keep the engine import graph minimal
    from pbkv_contract.prediction import Predictor

    from .workflows import Workflow

__all__ = ["PREFILL_COSTS", "ENGINE_MODELS", "DEFAULT_PREFILL_COST", "DEFAULT_ENGINE_MODEL", "EngineRequest", "FirstToken", "Finished", "EngineStats", "FutureOracle", "EngineConfig", "Admission"]

#: Latency samples kept per kind (the newest ones); counts keep growing past it.
MAX_SAMPLES = 200_000


@dataclass(slots=True)
class EngineRequest:
    """One LLM request as the engine sees it.

    Attributes:
        request_id: unique id among requests currently known to the engine.
        blocks: chained block keys of the prompt, in order (the ``prefix_hashes`` of the
            canonical prompt, computed by ``pbkv-server`` for live requests and recorded in
            traces for replay); a key identifies the whole prefix up to its block. The engine
            turns them into cache units (:mod:`~pbkv_server.engine.pages`).
        block_tokens: tokens of each block, same length as ``blocks``; each a whole number >= 0
            (an int, an integral float, a NumPy integer).
        output_tokens: tokens to generate (values < 1 are served as 1: the first token).
        hints: workflow identity; ``None`` = anonymous request (no workflow, LRU-like treatment).
        features: request feature vector passed to the predictor.

    Request metadata that users of other cache managers send, read only by the policies that model
    them (``docs/architecture.md``, "Compared policies"); every other policy ignores them:

    Attributes:
        session_id: SGLang's top-level ``session_id`` (the session radix cache tags KV by it);
            replay: the trace's ``session_id``, else the workflow id.
        priority: the request's ``priority`` (SGLang, Dynamo ``nvext.agent_hints.priority``);
            ``None``: not sent (SGLang's default 0).
        cache_ttl_s: Dynamo ``nvext.cache_control`` TTL, seconds; ``None``: not sent.
        last_step: the client marks this request as its workflow's last (Continuum's
            ``is_last_step``).
        speculative_next: ``(blocks, block_tokens)`` of the next turn's prefix (this prompt plus
            its reply) that the client's frontend prefills with one output token after this
            request finishes (Dynamo ``speculative_prefill``); ``None``: no such prefill.
    """

    request_id: str
    blocks: Sequence[Hashable]
    block_tokens: Sequence[int]
    output_tokens: int
    hints: Hints | None = None
    features: tuple[float, ...] = ()
    session_id: str | None = None
    priority: int | None = None
    cache_ttl_s: float | None = None
    last_step: bool = False
    speculative_next: tuple[Sequence[Hashable], Sequence[int]] | None = None


@dataclass(frozen=True, slots=True)
class FirstToken:
    """A request's first output token appeared at ``time`` (engine seconds).

    ``prompt_tokens`` = ``device_cached_tokens`` (device-tier hits) + ``host_cached_tokens``
    (loaded over PCIe) + tokens prefilled.

    Where the time to first token went (``docs/architecture.md``, "Cost model"): the request was
    admitted by the iteration that started at ``admitted_at`` (engine seconds; it waited in the
    queue before that) and ended at ``time``. That iteration spent ``load_s`` seconds copying
    the host-tier hits of every request it admitted, ``prefill_s`` seconds prefilling their
    uncached tokens, and the rest, ``time - admitted_at - load_s - prefill_s``, decoding one
    token for the requests already running. ``admitted_at`` is ``None`` when the producer does
    not know it (the metrics then count the whole TTFT as queueing).
    """

    request_id: str
    time: float
    prompt_tokens: int
    device_cached_tokens: int
    host_cached_tokens: int
    admitted_at: float | None = None
    load_s: float = 0.0
    prefill_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Finished:
    """A request produced its last of ``output_tokens`` tokens at ``time`` (engine seconds)."""

    request_id: str
    time: float
    output_tokens: int


@dataclass(frozen=True, slots=True)
class Admission:
    """A request the cache just admitted, as policies see it (:meth:`Policy.on_admit`).

    Attributes:
        index: the request's 0-based submission index (order of :meth:`Engine.submit` calls).
        blocks: its prompt's block keys, in order.
        workflow: its workflow (``None`` for an anonymous request).
        agent: the agent that made it (``None`` for an anonymous request).
        request: the request itself (its session, priority, TTL...), ``None`` when a caller of
            :meth:`PrefixCache.acquire` passed none.
    """

    index: int
    blocks: Sequence[Hashable]
    workflow: "Workflow | None"
    agent: str | None
    request: EngineRequest | None = None


@runtime_checkable
class FutureOracle(Protocol):
    """The future, for the offline ``belady`` policy (the simulator builds it from the trace).

    ``now_index`` is the 0-based submission index (order of :meth:`Engine.submit` calls) of the
    request whose admission triggers the question; requests submitted after it, waiting ones
    included, are the future. ``next_use`` returns the submission index (or any monotone stand-in,
    such as a time) of the next request after ``now_index`` whose prompt contains block ``key``,
    or ``math.inf`` if none does.
    """

    def next_use(self, key: Hashable, now_index: int) -> float: ...


@dataclass(slots=True)
class EngineStats:
    """Counters and latency samples of an engine (token counts in tokens, latencies in seconds).

    Latency sample deques keep the newest :data:`MAX_SAMPLES` wall-clock measurements:
    ``eviction_decision_s`` per eviction call (choosing and applying victims),
    ``score_update_s`` per node of a workflow whose prediction changed (recomputing Score(c)
    and the prefetch value), ``prefetch_decision_s`` per prefetch round, ``predictor_call_s``
    per predictor call. Totals: ``score_update_total_s`` and ``score_refile_total_s`` (re-filing
    the changed nodes in the eviction/prefetch heaps) over ``score_update_nodes`` nodes give the
    node-weighted means (small updates weigh less than in the sample mean).

    Engine time (virtual seconds): ``decode_iterations`` counts the iterations that decoded a
    token for at least one running request (decode-only iterations and admission iterations
    with a running batch), ``decode_s`` sums the decode part of their durations, so
    ``decode_s / decode_iterations`` is the mean decode step (PBKV Table 4 reports it).

    Robustness guard (:mod:`~pbkv_server.engine.guard`, predictive policies): ``guard_switches``
    counts mode changes (to LRU order and back), ``guard_fallback_evictions`` the device evictions
    made in LRU order (share: / ``evictions``), ``guard_ghost_hit_tokens`` the prompt tokens the
    ghost LRU found on its device (compare ``device_hit_tokens``), ``guard_ghost_host_hit_tokens``
    those it found on its host tier (compare ``host_hit_tokens``); ``guard_decision_s`` samples
    the guard's work per admission (ghost replay, window, and the re-filing at a switch).

    Engine model ``sglang``: ``retractions`` counts running requests retracted because the KV pool
    ran out (each is prefilled again later), ``retracted_tokens`` the KV tokens they gave up
    (prompt + output so far, prefilled again), ``oom_events`` the decode steps where even one
    running request had no room left: the real engine aborts a request there (out of memory).
    """

    prompt_tokens: int = 0
    device_hit_tokens: int = 0
    host_hit_tokens: int = 0
    evictions: int = 0
    evicted_tokens: int = 0
    dropped_tokens: int = 0
    prefetched_tokens: int = 0
    speculative_prefill_tokens: int = 0
    decode_iterations: int = 0
    decode_s: float = 0.0
    device_used_tokens: int = 0
    host_used_tokens: int = 0
    active_workflows: int = 0
    retired_workflows: int = 0
    queue_depth: int = 0
    running: int = 0
    requests_finished: int = 0
    score_update_total_s: float = 0.0
    score_refile_total_s: float = 0.0
    score_update_nodes: int = 0
    guard_switches: int = 0
    guard_fallback_evictions: int = 0
    guard_ghost_hit_tokens: int = 0
    guard_ghost_host_hit_tokens: int = 0
    retractions: int = 0
    retracted_tokens: int = 0
    oom_events: int = 0
    eviction_decision_s: deque = field(default_factory=lambda: deque(maxlen=MAX_SAMPLES))
    score_update_s: deque = field(default_factory=lambda: deque(maxlen=MAX_SAMPLES))
    prefetch_decision_s: deque = field(default_factory=lambda: deque(maxlen=MAX_SAMPLES))
    predictor_call_s: deque = field(default_factory=lambda: deque(maxlen=MAX_SAMPLES))
    guard_decision_s: deque = field(default_factory=lambda: deque(maxlen=MAX_SAMPLES))

    @property
    def hit_rate(self) -> float:
        """Token-level device hit rate: device-cached prompt tokens / all prompt tokens (0 if none)."""
        return self.device_hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def host_hit_rate(self) -> float:
        """Host-tier hit rate: prompt tokens loaded from host / all prompt tokens (0 if none)."""
        return self.host_hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


@dataclass(slots=True, kw_only=True)
class EngineConfig:
    """Configuration of one :class:`~pbkv_server.engine.Engine` (keyword arguments only).

    Attributes:
        profile: hardware cost model and default capacities.
        policy: eviction policy name (see :func:`~pbkv_server.engine.available_policies`).
        device_tokens: GPU KV capacity in tokens; ``None`` = ``profile.device_kv_tokens``.
        host_tokens: host KV capacity in tokens; ``None`` = ``profile.host_kv_tokens``.
        horizon: K, number of future steps in the lookahead score (PBKV Eq. 2).
        gamma: per-step decay of the lookahead score, in (0, 1].
        rho: fraction of device capacity that aggressive prefetch may displace (pbkv-aggressive).
        predictor: next-agent predictor; ``None`` = every score is 0 (he degrades to lae order).
        max_batch: most requests running at once.
        future: next-use oracle, required by offline policies (``belady``).
        idle_retire_s: retire a workflow with nothing in flight and no activity for this many
            seconds of the lifecycle clock (None = never).
        lifecycle_clock: clock of workflow activity and idleness, seconds; ``None`` = the engine's
            own (virtual) clock. A live server passes ``time.monotonic``: a client that crashed
            is idle in wall time, whatever the engine's simulated time does.
        max_active_workflows: most active workflows; beyond it the least recently active one
            without a request in flight is retired (``None`` = unbounded).
        max_ended_ids: ended workflow ids remembered for idempotent ends and reuse detection.
        page_size: KV page size in tokens (SGLang's ``--page-size``): the cache holds whole pages
            only; ``None`` caches whole blocks of the request (replay's block granularity).
        batch_predictions: ask a predictor that does not learn online once per scheduling step
            for every invocation since the last step (one batched forward pass), instead of once
            per invocation; the results are identical.
        cache_outputs: keep each finished request's output KV as SGLang does (it inserts prompt +
            output[:-1] into its radix tree at finish): a leaf of ``output_tokens - 1`` tokens under the
            prompt, recorded for the request's workflow. Traces hash prompts by text, so no later
            prompt matches it: it costs capacity only, as in ``pbkv-bench live-replay`` against SGLang
            (whose outputs are never re-sent). ``False`` (default): outputs are not cached.
        prefill_cost: ``linear`` or ``attention`` (:data:`PREFILL_COSTS`).
        engine_model: ``legacy`` or ``sglang`` (:data:`ENGINE_MODELS`).
        chunked_prefill_size: most new tokens in one prefill batch under ``engine_model="sglang"``
            (SGLang's ``--chunked-prefill-size``); ``None`` = the profile's default, 0 = no chunking.
        lru_guard: run the robustness guard (:mod:`~pbkv_server.engine.guard`) for policies that
            declare ``guardable`` (``he``, ``pbkv``, ``pbkv-aggressive``): while a ghost LRU at the
            same capacity finds more device hits than the policy, the policy ranks in LRU order.
            ``False`` = always the predicted order (``--no-lru-guard``).
        path_keys: every block key fixes the keys before it in its prompt (a replay's keys,
            ``Workload.path_keys``), so a node's keys match a prompt's whole when their last ones
            are equal, and where they diverge is found by bisection: the radix tree compares one
            or a few keys per node instead of each (a Claude Code prompt is ~1,300 keys). ``False``
            (a live server's): key by key.

    Raises:
        ValueError: a setting out of its range or of the wrong type (one line naming the field,
            e.g. ``gamma must be in (0, 1], got 0``; counts are whole numbers), at construction: a
            setting read only later (``rho`` at the first prefetch) must not fail a run half-way.
    """

    profile: HardwareProfile
    policy: str = BASELINE_POLICY
    device_tokens: int | None = None
    host_tokens: int | None = None
    horizon: int = 3
    gamma: float = 0.7
    rho: float = 0.1
    predictor: "Predictor | None" = None
    max_batch: int = 256
    future: FutureOracle | None = None
    idle_retire_s: float | None = None
    lifecycle_clock: Callable[[], float] | None = None
    max_active_workflows: int | None = None
    max_ended_ids: int = 100_000
    page_size: int | None = None
    batch_predictions: bool = True
    cache_outputs: bool = False
    lru_guard: bool = True
    prefill_cost: str = DEFAULT_PREFILL_COST
    engine_model: str = DEFAULT_ENGINE_MODEL
    chunked_prefill_size: int | None = None
    path_keys: bool = False

    def __post_init__(self) -> None:
        problems = _config_problems(self)
        if problems:
            raise ValueError(problems[0])


def _config_problems(config: EngineConfig) -> list[str]:
    """What is out of range in ``config``, one line each, in field order (empty: valid).

    Each line starts with the field's name, so a command line can name its own option instead.
    """
    # counts are integers (a float page size or capacity would fail later, inside a request's
    # paging or a heap's sums): a count of another type is named as such, before its range; each
    # test reads the type first, so a string is refused, not raised on
    counts = (("device_tokens", 1, True, ">= 1 token"), ("host_tokens", 0, True, ">= 0 tokens"),
              ("horizon", 1, False, ">= 1"), ("max_batch", 1, False, ">= 1"), ("page_size", 1, True, ">= 1 token"),
              ("max_active_workflows", 1, True, ">= 1"), ("max_ended_ids", 0, False, ">= 0"),
              ("chunked_prefill_size", 0, True, ">= 0 tokens (0 = no chunking)"))
    problems = []
    for name, least, optional, rule in counts:
        value = getattr(config, name)
        if value is None and optional:
            continue
        if not _is_whole(value):
            problems.append(f"{name} must be a whole number, got {value!r}")
        elif value < least:
            problems.append(f"{name} must be {rule}, got {value}")
    idle = config.idle_retire_s
    checks = (
        ("gamma", _real(config.gamma) and 0.0 < config.gamma <= 1.0, "in (0, 1]"),
        ("rho", _real(config.rho) and 0.0 <= config.rho <= 1.0, "in [0, 1]"),
        ("idle_retire_s", idle is None or _real(idle) and idle >= 0, "a finite number of seconds >= 0 or None"),
        ("prefill_cost", config.prefill_cost in PREFILL_COSTS, f"one of {', '.join(PREFILL_COSTS)}"),
        ("engine_model", config.engine_model in ENGINE_MODELS, f"one of {', '.join(ENGINE_MODELS)}"),
    )
    # a number's value as Python writes it (a string "0.5" shows its quotes); a name's as it is
    problems += [f"{name} must be {rule}, got " + (str(value) if isinstance(value := getattr(config, name), str)
                                                   and name in ("prefill_cost", "engine_model") else repr(value))
                 for name, ok, rule in checks if not ok]
    order = [f.name for f in dataclasses.fields(config)]  # field order, as the docstring says
    return sorted(problems, key=lambda line: order.index(line.split(" ", 1)[0]))


def _is_whole(value) -> bool:
    """``value`` is an integer (a NumPy one too), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _real(value) -> bool:
    """``value`` is a finite real number (not a bool)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
