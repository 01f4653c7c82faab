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
- its finish: ``on_finish`` (an admission not reported before is implied: a finished request ran);
- a workflow end (client, KV hint, idleness or table bound): ``on_workflow_end``;
- a session close: ``on_session_close``; tree splits and node drops: ``on_split`` / ``on_drop``.

A backend keeps no heap of priorities (SGLang and vLLM ask ``priority`` for every candidate at
each eviction), so the policy's ``cache`` is a :class:`BackendCache`: the clock, the book's
score board and a ``refresh`` with nothing to re-file. A hook that fails (a policy reading more
of the cache than a backend has) is logged once; serving never stops for it.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from pbkv_server.engine.policies.base import Lifecycle
from pbkv_server.engine.scoring import ScoreBoard
from pbkv_server.engine.types import Admission, EngineRequest
from pbkv_server.engine.workflows import Workflow

log = logging.getLogger(__name__)

__all__ = ["BackendCache", "LifecycleFeed", "MAX_LIVE_REQUESTS"]

#: Requests followed between arrival and finish (an aborted request never finishes; the oldest
#: are forgotten beyond this bound).
MAX_LIVE_REQUESTS = 65536


class BackendCache:
    """What a policy's hooks read of its cache inside a backend that owns the tree.

    Args:
        board: the backend book's score board (``board.records(workflow)`` -> node records).
        clock: the book's clock, seconds.

    Attributes:
        host_capacity: the backend's host-tier capacity in its own unit (0: none, until the backend
            reports its tier: SGLang's HiCache, vLLM's CPU offload tier); ``pbkv``'s device order
            depends on whether there is one (its rule 6).
    """

    __slots__ = ("board", "_clock", "host_capacity")

    def __init__(self, board: ScoreBoard, clock: Callable[[], float]) -> None:
        self.board = board
        self._clock = clock
        self.host_capacity = 0

    @property
    def now(self) -> float:
        """The backend's time now, seconds (the engine's ``cache.now``)."""
        return self._clock()

    def refresh(self, node: Any) -> None:
        """Nothing to re-file: the backend asks ``priority`` anew for every candidate at each
        eviction, so a changed priority is read at the next one."""


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
