"""Policy interface and the self-describing policy registry (style of SGLang's ``evict_policy.py``).

A policy orders evictable nodes: :meth:`Policy.priority` returns a tuple, and the node with the
lowest tuple leaves first. The cache (:class:`~pbkv_server.engine.cache.PrefixCache`) keeps one
lazy heap per tier keyed by these tuples and asks for a node's priority again whenever something
it depends on changes (access, score, retirement), so a priority must depend only on the node's
state and on state the policy reports through ``context.reorder(node)``. Hooks default to doing
nothing.

A policy sees the engine it serves through one read-only :class:`PolicyContext` (clock, score
board, capacities, app graphs, the offline future, and ``reorder``), handed to its constructor by
every engine: the embedded engine's cache (:class:`~pbkv_server.engine.context.EngineContext`),
the SGLang plugin and the vLLM backend (``backends/lifecycle.py``). It never sees the cache.

Each policy class also declares what it needs and does (:class:`PolicyInfo`): whether it uses
predictions, whether it prefetches, whether it needs the trace's future (offline, replay only),
and which backends run it (``replay``: ``pbkv-bench``; ``server``: ``pbkv-server``'s sim engine;
``sglang``: the SGLang plugin, under its ``sglang_name``). Every list of policies in the CLIs, the
server, the plugin and the examples is derived from this registry, so a new policy is one module
plus its :func:`register_policy` line. Policies outside this package register through the
``pbkv.policies`` entry-point group (each entry point names a module to import). See
``docs/architecture.md``, "Adding a policy".
"""

from __future__ import annotations

import abc
import importlib.metadata
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Hashable, Mapping, Protocol, Sequence, TypeVar, runtime_checkable

from ..policy_names import (  # re-exported: the names' home is policy_names.py (no policy import)
    BASELINE_POLICY, DEFAULT_POLICY, HEADLINE_POLICIES, REAL_TRAFFIC_POLICIES, REFERENCE_POLICY, REPLAY, SERVER,
    SGLANG,
)

if TYPE_CHECKING:
    from ..scoring import NodeScore, ScoreBoard
    from ..types import Admission, EngineRequest, FutureOracle
    from ..workflows import Workflow
    from .plan import PrefetchPlan

__all__ = [
    "Policy", "PolicyInfo", "PolicyContext", "NodeView", "EvictionOrder", "OrderGuard", "UNGUARDED", "Pins", "QueueOrder",
    "Prefetching", "Lifecycle", "NO_HOOKS", "CAPABILITIES", "capability_methods", "has_capability",
    "register_policy", "unregister_policy", "available_policies", "policy_info",
    "make_policy", "parse_policy_list", "parse_sglang_policy_list", "sglang_policy_names", "resolve_policy_name", "REPLAY", "SERVER", "SGLANG",
    "BASELINE_POLICY", "DEFAULT_POLICY", "REFERENCE_POLICY", "HEADLINE_POLICIES", "REAL_TRAFFIC_POLICIES",
    "ENTRY_POINT_GROUP",
]

log = logging.getLogger(__name__)

#: Entry-point group of out-of-tree policy modules.
ENTRY_POINT_GROUP = "pbkv.policies"

_REGISTRY: dict[str, type["Policy"]] = {}
_entry_points_loaded = False


@dataclass(frozen=True, slots=True)
class PolicyInfo:
    """What a registered policy needs and does.

    Attributes:
        name: registry name (``pbkv-bench --policy``, ``pbkv-server --policy``).
        summary: one line for help texts and tables.
        predictive: uses next-agent predictions (the engine calls the predictor and keeps scores).
        prefetches: loads host-tier cache to the device on decode-only steps.
        offline: needs the whole trace's future; runs in replay only.
        backends: where it runs, a subset of ``{"replay", "server", "sglang"}``.
        sglang_name: its ``--radix-eviction-policy`` value in the SGLang plugin, or ``None``.
        uses_app_graph: reads the apps' declared static agent graphs (``PUT .../graph``).
        iterates_order: offline, and needs its future in the replay's own submission order (the
            simulator replays until that order is stable).
        speculative_prefill: clients prefill each request's next-turn prefix after it finishes
            (Dynamo ``speculative_prefill``); the simulator and the server attach that prefix.
        shipped_by: inference engines that ship this rule to their users today (``"sglang"``,
            ``"vllm"``, ``"dynamo"``); ``pbkv-bench advise`` compares PBKV with the best of them.
        shipped_as: what those engines call it ("session cache"); empty: the registry name.
        client_signal: what the client must send for the rule to act ("SGLang session id"); empty:
            nothing beyond the prompt. Without it the rule replays as ``lru`` (``--no-hints`` notes it).
    """

    name: str
    summary: str
    predictive: bool
    prefetches: bool
    offline: bool
    backends: frozenset[str]
    sglang_name: str | None
    uses_app_graph: bool
    iterates_order: bool
    speculative_prefill: bool = False
    shipped_by: frozenset[str] = frozenset()
    shipped_as: str = ""
    client_signal: str = ""


def register_policy(name: str) -> Callable[[type], type]:
    """Class decorator: make the policy constructible by ``name`` and listed everywhere it can run.

    Raises:
        ValueError: ``name`` or the class's ``sglang_name`` is already taken by another policy.
    """

    def deco(cls: type) -> type:
        old = _REGISTRY.get(name)
        if old is not None and old is not cls:
            raise ValueError(f"policy name {name!r} is already registered by {old.__qualname__}")
        sglang_name = getattr(cls, "sglang_name", None)
        for other in _REGISTRY.values():
            if other is not old and sglang_name is not None and other.sglang_name == sglang_name:
                raise ValueError(f"SGLang policy name {sglang_name!r} is already used by {other.name!r}")
        _REGISTRY[name] = cls
        cls.name = name
        return cls

    return deco


def unregister_policy(name: str) -> None:
    """Remove ``name`` from the registry (tests, plugin reloads); unknown names are ignored."""
    _REGISTRY.pop(name, None)


def available_policies(backend: str | None = None) -> list[str]:
    """Names of the registered policies in registration order, optionally only those running on
    ``backend`` (``"replay"``, ``"server"`` or ``"sglang"``)."""
    _load_entry_points()
    return [name for name, cls in _REGISTRY.items() if backend is None or backend in _info(cls).backends]


def policy_info(name: str) -> PolicyInfo:
    """The declaration of policy ``name`` (an engine name or an SGLang name such as ``pbkv-he``).

    Raises:
        ValueError: unknown name (the message lists the known ones).
    """
    return _info(_class(resolve_policy_name(name)))


def sglang_policy_names() -> dict[str, str]:
    """SGLang ``--radix-eviction-policy`` value -> engine policy name, for every plugin policy."""
    _load_entry_points()
    return {cls.sglang_name: name for name, cls in _REGISTRY.items() if cls.sglang_name is not None}


def resolve_policy_name(name: str) -> str:
    """The engine policy name of ``name``, which may be an engine name or a plugin (SGLang) name;
    an unknown name is returned unchanged (callers that need a policy then raise)."""
    _load_entry_points()
    if name in _REGISTRY:
        return name
    return sglang_policy_names().get(name, name)


def parse_policy_list(text: str, backend: str | None = REPLAY, flag: str = "--policy") -> list[str]:
    """The names of a comma-separated policy option (``--policy lru,pbkv``), in the order given.

    The one reading of such a list for every command line (``pbkv-bench replay``, ``study``,
    ``benchmarks/policy_matrix.py``, ``sim_speed.py``), so a typo is refused alike everywhere
    and before any replay: ``lru,,pbkv`` silently replayed two policies where three were meant,
    and a name listed twice replayed it twice.

    Raises:
        ValueError: an empty list or item (a doubled or trailing comma), a name given twice, or a
            name that does not run on ``backend`` (the message names ``flag`` and the known ones).
    """
    return _parse_names(text, available_policies(backend), flag)


def parse_sglang_policy_list(text: str, flag: str = "--policies") -> list[str]:
    """The names of a comma-separated list of policies for live SGLang servers (the live
    benchmarks' ``--policies lru,pbkv,pbkv-he``), read as :func:`parse_policy_list` reads one: the
    known names are the plugin's (:func:`sglang_policy_names`) and ``BASELINE_POLICY`` (SGLang's
    own lru).

    Raises:
        ValueError: an empty list or item, a name given twice, or another name (the message
            names ``flag`` and the known ones).
    """
    return _parse_names(text, [BASELINE_POLICY, *sglang_policy_names()], flag)


def _parse_names(text: str, known: list[str], flag: str) -> list[str]:
    from pbkv_contract.settings import known_items

    return known_items(text, known, flag, "policy")


def make_policy(name: str, context: "PolicyContext") -> "Policy":
    """Instantiate policy ``name`` for the engine that ``context`` describes.

    Raises:
        ValueError: unknown name (the message lists the known ones), or a policy that needs what
            the context lacks (an offline policy without ``context.future``).
    """
    return _class(name)(context)


class NodeView(Protocol):
    """What a policy may read of a cache node (engine :class:`~pbkv_server.engine.radix.Node`s and
    the SGLang plugin's tree nodes both provide it).

    Attributes:
        tokens: KV tokens the node holds.
        last_access: time of the latest request that used the node, seconds.
        sc: the node's score record (A_w(c), Score(c), one-step value, workflows ever), or ``None``.
    """

    tokens: int
    last_access: float
    sc: "NodeScore | None"


@runtime_checkable
class PolicyContext(Protocol):
    """Everything a policy may read of the engine it orders, and the one thing it may tell it.

    Every engine hands one to each policy it builds (no engine passes ``None``): the embedded
    engine (:class:`~pbkv_server.engine.context.EngineContext`), the SGLang plugin and the vLLM
    backend (:class:`~pbkv_server.backends.lifecycle.BackendContext`). A backend keeps no heap
    and asks :meth:`Policy.priority` anew at every eviction, so there ``reorder`` has nothing to do.

    Attributes:
        now: the engine's time now, seconds (replay: engine time of the current step).
        board: the :class:`~pbkv_server.engine.scoring.ScoreBoard` (A_w(c), scores, retirement);
            read it, never write it.
        device_capacity, host_capacity: KV capacities in the engine's unit (tokens; a backend
            reports 0 until it knows, and ``host_capacity`` 0 means no host tier).
        app_graphs: app -> static agent graph (agent -> possible next agents).
        future: the trace's future (offline policies, replay only), or ``None``.
        horizon: K, future steps in the lookahead score.
        rho: share of the device aggressive prefetch may displace per step window.

    ``reorder`` and ``regroup`` are the two ways to say "my order changed": for one node, or for
    every node of a group at once (:meth:`Policy.group`).
    """

    @property
    def now(self) -> float: ...

    @property
    def board(self) -> "ScoreBoard": ...

    @property
    def device_capacity(self) -> int: ...

    @property
    def host_capacity(self) -> int: ...

    @property
    def app_graphs(self) -> Mapping[str, Mapping[str, tuple[str, ...]]]: ...

    @property
    def future(self) -> "FutureOracle | None": ...

    @property
    def horizon(self) -> int: ...

    @property
    def rho(self) -> float: ...

    @property
    def prefill_tokens_per_s(self) -> float:
        """Prompt tokens a cold prefill computes per second under the engine's profile; 0 where the
        backend does not know it (a policy that needs it then keeps its engine's default rule)."""

    def reorder(self, node: "NodeView") -> None:
        """My order for ``node`` changed (something its priority or prefetch value reads): file it
        again. O(log n) in the embedded engine."""

    def regroup(self, group: Hashable) -> None:
        """My rank for ``group`` changed (:meth:`Policy.group_rank`): file the group again, not
        each of its nodes. O(log n) in the embedded engine."""

    def split(self, node: "NodeView", blocks: int) -> "NodeView":
        """Cut ``node`` after its first ``blocks`` units and return the upper part, where a prefix
        the policy tracks ends inside it (``kvflow``'s fixed prompt); an engine that cannot cut
        its nodes returns ``node`` whole."""


class EvictionOrder(Protocol):
    """The narrow core every engine consumes: the order of evictable nodes and what they are worth.

    SGLang's eviction strategy is one ``get_priority`` (``backends/sglang/strategy.py`` forwards it
    to :meth:`priority`, and for host leaves to :meth:`host_priority`); the SGLang prefetch scan
    and the vLLM block pool and offload tier read these only. A policy's lifecycle hooks, where it
    has them, are fed by the backends' book (``backends/lifecycle.py``).
    """

    def priority(self, node: NodeView) -> tuple:
        """Sort key of an evictable node; the smallest leaves first."""

    def host_priority(self, node: NodeView) -> tuple:
        """Sort key of a host-tier leaf; the smallest is dropped first."""

    def is_retired(self, node: NodeView) -> bool:
        """True if every workflow that touched the node has ended (its cache is free to take)."""

    def prefetch_value(self, node: NodeView) -> float:
        """Value of loading host node ``node`` to the device; <= 0 means never prefetch it."""


class OrderGuard(Protocol):
    """What a guardable policy asks the LRU guard (:class:`~pbkv_server.engine.guard.LRUGuard`):
    ``fallback`` is True while LRU would have done better on the traffic served, and the policy
    must rank in LRU order. The guard owns the state; the policy only reads it."""

    @property
    def fallback(self) -> bool: ...


class _Unguarded:
    """The :class:`OrderGuard` of a policy no guard watches: never in fallback."""

    __slots__ = ()
    fallback = False


#: Order guard of every policy until a cache attaches its LRU guard (``Policy.order_guard``).
UNGUARDED: OrderGuard = _Unguarded()


# ----------------------------------------------------------------------------- capabilities
# Opt-in parts of a policy beyond the core. A policy has a capability when it overrides one of
# the capability's methods (nothing else declares it: no flag to forget). The cache and the engine
# ask once, at construction, ``policy.capability(Kind)`` and keep the answer (the policy, or
# None), so their hot paths test a local reference. Each capability's method names are written
# once, in its class below; :func:`capability_methods` reads them from there.


class Pins(Protocol):
    """The policy pins nodes (TTL pins, Continuum's tool-call pins): it overrides one of these."""

    def holds(self, node: NodeView) -> bool:
        """True if ``node`` must stay on the tier it is on now (see :meth:`Policy.holds`)."""

    def keeps(self, node: NodeView) -> bool:
        """True if ``node`` must not leave the cache (see :meth:`Policy.keeps`)."""

    def relieve(self) -> bool:
        """Give up one hold to unblock an idle engine; True if one was released."""

    def expire(self) -> bool:
        """Clear the holds whose time is over (see :meth:`Policy.expire`); True if any was."""


class QueueOrder(Protocol):
    """The policy picks which waiting request is admitted next: it overrides :meth:`pick_waiting`."""

    def pick_waiting(self, waiting: Sequence["EngineRequest"]) -> int:
        """Index in ``waiting`` (oldest first) of the request to admit next."""


class Prefetching(Protocol):
    """The policy plans loads of host cache on decode-only steps: it overrides :meth:`prefetch_plan`."""

    def prefetch_plan(self, seconds: float) -> "PrefetchPlan | None":
        """What to load during a decode-only stretch of ``seconds`` (see :mod:`.plan`)."""


class Lifecycle:
    """The policy follows requests, workflows and the tree: it overrides one of these hooks.

    The hooks are written here once: :class:`Policy` inherits them (each does nothing), and an
    instance of this class is the no-op hooks object of a policy that overrides none.
    """

    __slots__ = ()

    def on_admit(self, admission: "Admission", path: Sequence[NodeView]) -> None:
        """A request was admitted; ``path`` are its nodes from the root down (root excluded)."""

    def on_prompt_cached(self, request: "EngineRequest", wf: "Workflow | None", path: Sequence[NodeView]) -> None:
        """The prompt of admitted ``request`` (of workflow ``wf``, or anonymous) is now cached along
        ``path`` (root first, root excluded), deeper than its ``on_admit`` path. Only a backend
        that inserts a prompt after admitting it calls this (SGLang inserts after the prefill,
        chunk by chunk); the embedded engine inserts at admission, so its ``on_admit`` path is
        already the whole prompt and it never calls this."""

    def on_invocation(self, wf: "Workflow", previous_agent: str | None) -> None:
        """Workflow ``wf`` made a new invocation (``wf.agent`` is its agent now)."""

    def on_workflow_end(self, wf: "Workflow") -> None:
        """Workflow ``wf`` ended: by its end signal, idleness or the workflow table's bound."""

    def on_finish(self, request: "EngineRequest", wf: "Workflow | None", end: NodeView | None) -> None:
        """``request`` (of workflow ``wf``, or anonymous) produced its last token; ``end`` is the
        deepest node of its prompt (its path is still locked when this is called)."""

    def on_session_close(self, session_id: str) -> None:
        """The client closed session ``session_id`` (SGLang ``/close_session``)."""

    def on_split(self, top: NodeView, bottom: NodeView) -> None:
        """``bottom`` was cut; ``top`` is its new upper part (see :meth:`RadixTree.split`)."""

    def on_drop(self, node: NodeView) -> None:
        """``node`` is about to leave the cache for good (still attached when called)."""

    def on_graph(self, app: str) -> None:
        """The static agent graph of ``app`` was set or replaced."""


#: The hooks object of a policy that overrides no hook (every call does nothing).
NO_HOOKS = Lifecycle()

#: The capabilities :meth:`Policy.capability` answers for.
CAPABILITIES: tuple[type, ...] = (Pins, QueueOrder, Prefetching, Lifecycle)


def capability_methods(kind: type) -> tuple[str, ...]:
    """The method names of capability ``kind``, read from its class (written there once).

    Raises:
        ValueError: ``kind`` is not one of :data:`CAPABILITIES`.
    """
    if kind not in CAPABILITIES:
        raise ValueError(f"unknown policy capability {kind!r}")
    return tuple(name for name, value in vars(kind).items() if callable(value) and not name.startswith("_"))


def has_capability(cls: type, kind: type) -> bool:
    """True if policy class ``cls`` overrides one of capability ``kind``'s methods."""
    return any(getattr(cls, name) is not getattr(Policy, name) for name in capability_methods(kind))


C = TypeVar("C")


class Policy(Lifecycle, abc.ABC):
    """Eviction (and optionally prefetch) rule. Lower :meth:`priority` = evicted first.

    The core every engine consumes is :class:`EvictionOrder` (:meth:`priority`,
    :meth:`is_retired`, :meth:`prefetch_value`). Pins, queue order, prefetch planning and the
    lifecycle hooks are capabilities (:class:`Pins`, :class:`QueueOrder`, :class:`Prefetching`,
    :class:`Lifecycle`) that the cache and the engine resolve once with :meth:`capability`.

    A policy sees the engine through its :class:`PolicyContext` (:attr:`context`) and nodes
    through :class:`NodeView` (plus ``keys``, ``parent`` and ``tier`` of engine nodes in the
    hooks); state a policy keeps per node lives in the policy, keyed by node, and is dropped in
    :meth:`on_drop`. It ranks and values nodes and plans prefetch; the engine moves them.

    Class attributes (the policy's declaration, see :class:`PolicyInfo`):
        name: registry name (set by :func:`register_policy`).
        summary: one line for help texts.
        uses_predictions: the engine calls the predictor and maintains scores only if True.
        offline: needs ``EngineConfig.future`` (the trace's future); replay only.
        backends: backends besides the SGLang plugin; offline policies run in replay only.
        sglang_name: the plugin's ``--radix-eviction-policy`` value, or ``None`` (not in SGLang).
        uses_app_graph: reads static agent graphs (:meth:`Engine.set_app_graph`).
        iterates_order: see :class:`PolicyInfo`.
        unit_priority: the priority is that of the node's last unit and differs between the units
            of one node, so eviction takes one unit at a time (``opt``); otherwise all units of a
            node rank alike and eviction takes the whole tail it needs at once.
        speculative_prefill: see :class:`PolicyInfo`.
        shipped_by, shipped_as: see :class:`PolicyInfo`; declared on the class itself (a subclass
            does not inherit them: a variant of a shipped rule is not what the engine ships).
        guardable: the cache runs the robustness guard (:mod:`~pbkv_server.engine.guard`) for
            this policy when ``EngineConfig.lru_guard`` is on and attaches it as
            :attr:`order_guard`; the policy ranks in LRU order (retired-first allowed) while
            ``order_guard.fallback`` is True.
        selective_host: a device victim is written to a full host tier only if it ranks above the
            host's next victim in :meth:`host_priority` (otherwise it is dropped, and the host
            keeps what it holds), while ``order_guard.fallback`` is False (in the fallback every
            victim is written, as LRU writes it); ``False``: every victim the host can make room
            for is written.

    Args:
        context: the engine's :class:`PolicyContext`.

    Attributes:
        context: as above.
        order_guard: the :class:`OrderGuard` the policy consults (:data:`UNGUARDED` until a cache
            attaches its guard).
    """

    name = "base"
    summary = ""
    uses_predictions = False
    offline = False
    backends: frozenset[str] = frozenset({REPLAY, SERVER})
    sglang_name: str | None = None
    uses_app_graph = False
    iterates_order = False
    unit_priority = False
    speculative_prefill = False
    shipped_by: frozenset[str] = frozenset()
    shipped_as = ""
    guardable = False
    selective_host = False

    def __init__(self, context: PolicyContext) -> None:
        self.context = context
        self.order_guard: OrderGuard = UNGUARDED

    @property
    def fallback(self) -> bool:
        """True while the order guard holds the policy in LRU order (read-only: the guard's state;
        priorities on the hot path read ``self.order_guard.fallback``, one attribute cheaper)."""
        return self.order_guard.fallback

    def capability(self, kind: type[C]) -> C | None:
        """This policy as capability ``kind`` (:class:`Pins`, :class:`QueueOrder`,
        :class:`Prefetching`, :class:`Lifecycle`) if its class overrides one of that capability's
        methods, else ``None``. The answer is fixed per class: callers ask once and keep it.

        Raises:
            ValueError: ``kind`` is not a capability.
        """
        return self if has_capability(type(self), kind) else None  # type: ignore[return-value]

    @abc.abstractmethod
    def priority(self, node: NodeView) -> tuple:
        """Sort key of an evictable node; the smallest leaves first (device and host tiers)."""

    def host_priority(self, node: NodeView) -> tuple:
        """Order in which the host tier drops its leaves (smallest first); defaults to :meth:`priority`."""
        return self.priority(node)

    def priority_at(self, node: NodeView, units: int) -> tuple:
        """:meth:`priority` that ``node`` would have if cut after its first ``units`` units (0 <
        units <= its length), without cutting it: a ``unit_priority`` eviction asks whether the
        rest of a node it takes units from still ranks first (``engine/eviction.py``), and
        assumes that a shorter rest never ranks earlier (``opt``: a unit's next use is never
        after the next one's). Default: ``priority(node)``, the units of a node ranking alike."""
        return self.priority(node)

    def host_priority_at(self, node: NodeView, units: int) -> tuple:
        """:meth:`priority_at` in the host tier's order (:meth:`host_priority`)."""
        return self.host_priority(node)

    def group(self, node: NodeView) -> Hashable | None:
        """The group whose rank leads ``node``'s priority, or ``None`` (ranked alone, the default).

        A policy whose priority is a rank that many nodes share followed by each node's own key
        overrides this, :meth:`group_rank` and :meth:`node_key`, such that ``priority(node) ==
        group_rank(group(node)) + node_key(node)`` (and ``host_priority`` is ``priority``). When a
        group's rank changes it calls ``context.regroup(group)`` instead of re-filing every node
        of the group (``engine/heaps.py``, "Groups"); a node whose group changes is re-filed with
        ``context.reorder``."""
        return None

    def group_rank(self, group: Hashable) -> tuple:
        """The rank of ``group`` now (the leading part of its nodes' priorities)."""
        return ()

    def node_key(self, node: NodeView) -> tuple:
        """``node``'s own key within its group (the trailing part of its priority)."""
        return ()

    def is_retired(self, node: NodeView) -> bool:
        """True if all workflows that touched the node have ended and one was multi-step
        (:attr:`NodeScore.retired`; anonymous and single-request-only nodes: False)."""
        sc = node.sc
        return sc is not None and sc.retired

    def settle(self) -> None:
        """Re-file nodes whose priority changed since the last call (a policy that defers refreshes
        so that a change touching many nodes costs once per eviction, not once per change). The
        cache calls it before it reads its heaps; the default has nothing pending."""

    def prefetch_value(self, node: NodeView) -> float:
        """Value of loading host node ``node`` to the device; <= 0 means never prefetch it."""
        return 0.0

    def prefetch_plan(self, seconds: float) -> "PrefetchPlan | None":
        """What to load during a decode-only stretch of ``seconds`` engine time (PCIe is otherwise
        idle): a :class:`~.plan.HeapPlan` or :class:`~.plan.ChainPlan` the engine runs, or ``None``."""
        return None

    # ----------------------------------------------------------------- Pins
    def holds(self, node: NodeView) -> bool:
        """True if ``node`` must stay on the tier it is on now (a device victim is not evicted, a
        host victim is not dropped). A policy that holds nodes ranks every held node after every
        unheld one on that tier, so the cache stops at the first held victim. A pure question:
        holds whose time is over are cleared by :meth:`expire`, which the cache calls first."""
        return False

    def keeps(self, node: NodeView) -> bool:
        """True if ``node`` must not leave the cache: a device victim that the host tier cannot
        take stays on the device instead of being dropped (as when a held node hangs below). A
        pure question, as :meth:`holds`."""
        return False

    def expire(self) -> bool:
        """Clear the holds whose time is over by the context's clock, re-filing their nodes;
        True if any was cleared (the eviction order may then be new). The cache calls it right
        before it asks :meth:`holds` or :meth:`keeps`."""
        return False

    def pick_waiting(self, waiting: Sequence["EngineRequest"]) -> int:
        """Index in ``waiting`` (oldest first) of the request to admit next (:class:`QueueOrder`)."""
        return 0

    def relieve(self) -> bool:
        """Give up one hold because the queue head cannot be admitted and nothing runs (a deadlock
        guard); True if a hold was released."""
        return False


# --------------------------------------------------------------------------- helpers


def _class(name: str) -> type[Policy]:
    _load_entry_points()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; available: {', '.join(_REGISTRY)}") from None


def _info(cls: type[Policy]) -> PolicyInfo:
    backends = frozenset({REPLAY}) if cls.offline else frozenset(cls.backends)
    if cls.sglang_name is not None and not cls.offline:
        backends |= {SGLANG}
    summary = cls.summary or (cls.__doc__ or "").strip().split("\n")[0]
    return PolicyInfo(cls.name, summary, bool(cls.uses_predictions), has_capability(cls, Prefetching), bool(cls.offline),
                      backends, cls.sglang_name, bool(cls.uses_app_graph), bool(cls.iterates_order),
                      bool(cls.speculative_prefill), frozenset(vars(cls).get("shipped_by", ())),
                      vars(cls).get("shipped_as", ""), vars(cls).get("client_signal", ""))


def _load_entry_points() -> None:
    """Import the out-of-tree policy modules of :data:`ENTRY_POINT_GROUP` once (errors are logged)."""
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            ep.load()
        except Exception:  # a broken plugin must not take the built-in policies down
            log.exception("cannot load PBKV policy entry point %r", ep.value)
