"""An engine-core policy's lifecycle hooks, fed from what an engine backend observes.

The embedded engine (:class:`~pbkv_server.engine.Engine`) tells a policy that has the
:class:`~pbkv_server.engine.policies.base.Lifecycle` capability about every request (submitted,
admitted, finished), every workflow end, session close and tree change; ``pbkv`` builds its
workflow ages, waiting requests and next-use estimates there. An engine backend (SGLang, vLLM)
sees the same events through its own hooks and hands them to its
:class:`~pbkv_server.backends.book.WorkflowBook`, which calls the policy through a
:class:`LifecycleFeed` in the engine's order and with the engine core's own types
(:class:`~pbkv_server.engine.types.EngineRequest`, :class:`~pbkv_server.engine.types.Admission`,
:class:`~pbkv_server.engine.workflows.Workflow`, the backend's nodes as
:class:`~pbkv_server.engine.policies.base.NodeView`):

- a request's first sight (its arrival): ``on_invocation`` for a hinted one (after the workflow
  table's invocation, as :meth:`Engine.submit`), nothing yet for an anonymous one;
- its admission (the backend scheduled it): ``on_admit``, once per request, for every request;
- its prompt cached deeper than at admission (a backend that inserts the prompt after the
  prefill, SGLang): ``on_prompt_cached``, at each such insert;
- its finish: ``on_finish`` (an admission not reported before is implied: a finished request ran);
- a workflow end (client, KV hint, idleness or table bound): ``on_workflow_end``;
- a session close: ``on_session_close``; tree splits and node drops: ``on_split`` / ``on_drop``.

A request's ``blocks`` are the chained keys of its prompt, as the engine's: vLLM's block hashes;
a backend that sees token ids only (SGLang) passes :class:`PrefixKeys`, one key per token.

A backend keeps no heap of priorities (SGLang and vLLM ask ``priority`` for every candidate at
each eviction), so the policy's :class:`~pbkv_server.engine.policies.base.PolicyContext` is a
:class:`BackendContext`: the clock, the book's score board, the capacities the backend reports,
and a ``reorder`` with nothing to re-file. It implements the whole protocol (a test checks it
against the protocol's members), so a policy reads the same context in every engine. A hook that
fails all the same is logged once; serving never stops for it.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Sequence as SequenceABC
from dataclasses import dataclass, fields
from typing import Any, Callable, Mapping, Sequence

from pbkv_server.engine.policies.base import Lifecycle
from pbkv_server.engine.scoring import ScoreBoard
from pbkv_server.engine.types import EngineConfig
from pbkv_server.engine.types import Admission, EngineRequest
from pbkv_server.engine.workflows import Workflow

log = logging.getLogger(__name__)

__all__ = ["BackendContext", "LifecycleFeed", "MAX_LIVE_REQUESTS", "PrefixKeys"]

#: The engine's default rho (``EngineConfig.rho``), the backends' (they run no aggressive prefetch).
_DEFAULT_RHO: float = next(f.default for f in fields(EngineConfig) if f.name == "rho")

#: Requests followed between arrival and finish (an aborted request never finishes; the oldest
#: are forgotten beyond this bound).
MAX_LIVE_REQUESTS = 65536


class BackendContext:
    """The :class:`~pbkv_server.engine.policies.base.PolicyContext` of a policy inside a backend
    that owns the tree (SGLang's radix cache, vLLM's block pool and offload tier).

    Built with the policy (the backend's strategy or runtime), then attached to the backend's
    :class:`~pbkv_server.backends.book.WorkflowBook`, whose board and clock it reads from then on.

    Args:
        board: the score board until a book attaches its own.
        clock: the clock until a book attaches its own, seconds.
        horizon: K of the backend's settings.

    Attributes:
        board: the book's score board (``board.records(workflow)`` -> node records).
        device_capacity, host_capacity: the backend's tier sizes in its own unit (0 until the
            backend reports them; ``host_capacity`` 0 = no host tier: SGLang's HiCache, vLLM's CPU
            offload tier set it when they exist, and ``pbkv``'s device order depends on it, its
            rule 6).
        app_graphs: static agent graphs (the backends receive none: empty).
        future: ``None`` (offline policies run in replay only).
        horizon: K. rho: the engine default (aggressive prefetch does not run in a backend).
    """

    __slots__ = ("board", "_clock", "device_capacity", "host_capacity", "app_graphs", "future", "horizon", "rho",
                 "prefill_tokens_per_s")

    def __init__(self, board: ScoreBoard, clock: Callable[[], float], horizon: int) -> None:
        self.board = board
        self._clock = clock
        self.device_capacity = 0
        self.host_capacity = 0
        self.app_graphs: Mapping[str, Mapping[str, tuple[str, ...]]] = {}
        self.future = None
        self.horizon = horizon
        self.rho = _DEFAULT_RHO
        self.prefill_tokens_per_s = 0.0  # unknown: tlru keeps SGLang's default budget 0 (LRU)

    def attach(self, board: ScoreBoard, clock: Callable[[], float]) -> None:
        """Read ``board`` and ``clock`` from now on (the backend's book)."""
        self.board = board
        self._clock = clock

    @property
    def now(self) -> float:
        """The backend's time now, seconds."""
        return self._clock()

    def reorder(self, node: Any) -> None:
        """Nothing to re-file: the backend asks ``priority`` anew for every candidate at each
        eviction, so a changed priority is read at the next one."""

    def regroup(self, group: Any) -> None:
        """Nothing to re-file (as :meth:`reorder`)."""

    def split(self, node: Any, blocks: int) -> Any:
        """A backend's tree is the engine's own: the policy cannot cut it, and gets ``node`` whole."""
        return node


class PrefixKeys(SequenceABC):
    """The chained keys of a prompt given as token ids, one key per token, computed when read.

    Key ``i`` identifies the prompt's first ``i + 1`` tokens (a hash of them), as the engine's
    block keys identify a whole prefix, so two prompts with an equal key ``i`` are equal up to
    token ``i``. A key costs O(i) to read: ``pbkv``'s rule 7 reads two per admission
    (:meth:`~pbkv_server.engine.policies.conversation.Conversations.admitted`), where computing
    all of a long prompt's keys up front would cost a Python loop over every token.

    Args:
        tokens: the prompt's token ids (a list, tuple or ``array``); not copied, so the caller
            must not change it.
    """

    __slots__ = ("_tokens",)

    def __init__(self, tokens: Sequence[int]) -> None:
        self._tokens = tokens

    def __len__(self) -> int:
        return len(self._tokens)

    def __getitem__(self, i):
        n = len(self._tokens)
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(n))]
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("prefix key index out of range")
        return hash(tuple(self._tokens[:i + 1]))


@dataclass(slots=True)
class _Live:
    """A request between arrival and finish: what its admission and finish hooks receive."""

    index: int
    request: EngineRequest
    workflow: Workflow | None
    agent: str | None
    admitted: bool = False


class LifecycleFeed:
    """Calls a policy's :class:`~pbkv_server.engine.policies.base.Lifecycle` hooks in the engine's
    order (module docstring). Built by the book only for a policy that has the capability.

    Args:
        hooks: the policy as its ``Lifecycle`` capability.
    """

    def __init__(self, hooks: Lifecycle) -> None:
        self.hooks = hooks
        self._live: OrderedDict[str, _Live] = OrderedDict()
        self._submitted = 0
        self._failed_logged = False

    def arrived(self, request: EngineRequest | None, wf: Workflow | None, agent: str | None = None) -> None:
        """A request was seen for the first time (of workflow ``wf``, after its invocation, with
        ``agent``; or anonymous, ``wf=None``): ``on_invocation`` for a hinted one; its admission
        and finish follow. ``request=None`` (a caller that cannot name it): its admission is
        implied at once, so nothing it leaves waiting outlives it."""
        index = self._submitted
        self._submitted += 1
        if request is not None:
            live = self._live
            live[request.request_id] = _Live(index, request, wf, agent if wf is not None else None)
            if len(live) > MAX_LIVE_REQUESTS:
                live.popitem(last=False)
        if wf is not None:
            history = wf.history
            self._call("on_invocation", wf, history[-2] if len(history) > 1 else None)
        if request is None:
            self._call("on_admit", Admission(index, (), wf, agent if wf is not None else None, None), ())

    def admitted(self, request_id: str, path: Sequence[Any] = ()) -> None:
        """The backend scheduled request ``request_id``; ``path``: its cached nodes, root first.
        Only the first report counts (a preempted request admitted again is the same request)."""
        state = self._live.get(request_id)
        if state is None or state.admitted:
            return
        state.admitted = True
        self._call("on_admit", Admission(state.index, state.request.blocks, state.workflow, state.agent,
                                         state.request), path)

    def cached(self, request_id: str, path: Sequence[Any]) -> None:
        """The admitted request ``request_id``'s prompt is now cached along ``path`` (root first),
        deeper than its admission's path: ``on_prompt_cached``. Ignored before its admission
        (a match of a waiting request is no insert) and after its finish."""
        state = self._live.get(request_id)
        if state is None or not state.admitted or not path:
            return
        self._call("on_prompt_cached", state.request, state.workflow, path)

    def finished(self, request_id: str, end: Any = None) -> None:
        """Request ``request_id`` produced its last token; ``end``: the deepest node of its prompt,
        or ``None`` where the backend cannot name it. Idempotent."""
        state = self._live.get(request_id)
        if state is None:
            return
        if not state.admitted:
            self.admitted(request_id)
        del self._live[request_id]
        self._call("on_finish", state.request, state.workflow, end)

    def workflow_ended(self, wf: Workflow) -> None:
        self._call("on_workflow_end", wf)

    def session_closed(self, session_id: str) -> None:
        self._call("on_session_close", session_id)

    def split(self, top: Any, bottom: Any) -> None:
        self._call("on_split", top, bottom)

    def dropped(self, node: Any) -> None:
        self._call("on_drop", node)

    def _call(self, hook: str, *args: Any) -> None:
        try:
            getattr(self.hooks, hook)(*args)
        except Exception:  # a policy hook must never fail a request
            if not self._failed_logged:
                log.exception("PBKV: policy hook %s failed; further failures are not logged", hook)
                self._failed_logged = True
