"""The server's workflow table: which workflows are active, which ended, which went idle.

Bounded under millions of ids: active workflows leave the table when they end, when they have
been idle for ``idle_retire_s`` (a client that crashed never sends its end signal), or when the
table is full (the least recently seen goes first); ended ids are remembered in an LRU map of
fixed size only so that repeated end signals stay idempotent and countable. All operations are
O(1) amortised; the table is used from the server's event loop only (no locking).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from pbkv_contract.hints import Hints

__all__ = ["WorkflowState", "WorkflowTable", "RETIRED_IDLE", "RETIRED_EVICTED"]

#: End status recorded when a workflow is retired for idleness (DESIGN.md section 2).
RETIRED_IDLE = "cancelled"
#: End status recorded when the table is full and the least recently seen workflow is dropped.
RETIRED_EVICTED = "cancelled"


@dataclass(slots=True)
class WorkflowState:
    """One active workflow.

    Attributes:
        workflow_id: the id from the hints.
        app: app name from its latest hinted request (may be ``None``).
        first_seen: wall time (``time.monotonic`` seconds) of its first request.
        last_seen: wall time of its latest request.
        requests: hinted requests served so far.
    """

    workflow_id: str
    app: str | None
    first_seen: float
    last_seen: float
    requests: int = 0


class WorkflowTable:
    """Active workflows in least-recently-seen order plus an LRU memory of ended ids.

    Args:
        idle_retire_s: seconds without a request after which :meth:`retire_idle` retires a
            workflow; ``None`` disables idle retirement.
        max_active: most active workflows kept; :meth:`touch` retires the least recently seen
            beyond it (returned to the caller, which tells the engine).
        max_ended: most ended ids remembered.

    Raises:
        ValueError: a bound < 1 or ``idle_retire_s`` <= 0.
    """

    def __init__(self, idle_retire_s: float | None = 600.0, max_active: int = 100_000, max_ended: int = 100_000):
        if max_active < 1 or max_ended < 1:
            raise ValueError("table bounds must be >= 1")
        if idle_retire_s is not None and idle_retire_s <= 0:
            raise ValueError("idle_retire_s must be > 0")
        self.idle_retire_s = idle_retire_s
        self.max_active = max_active
        self.max_ended = max_ended
        self._active: OrderedDict[str, WorkflowState] = OrderedDict()
        self._ended: OrderedDict[str, str] = OrderedDict()

    # ------------------------------------------------------------------ queries

    def __len__(self) -> int:
        return len(self._active)

    @property
    def ended_count(self) -> int:
        """Ended ids currently remembered (<= ``max_ended``)."""
        return len(self._ended)

    def get(self, workflow_id: str) -> WorkflowState | None:
        """The active workflow's state, or ``None``."""
        return self._active.get(workflow_id)

    def ended_status(self, workflow_id: str) -> str | None:
        """The end status of a remembered ended workflow, or ``None``."""
        return self._ended.get(workflow_id)

    # ------------------------------------------------------------------ updates

    def touch(self, hints: Hints, now: float) -> list[str]:
        """Record a hinted request at wall time ``now``.

        A request for an ended workflow reactivates it (a late or retried call: the engine sees
        it as active again).

        Returns:
            ids retired because the table overflowed (status :data:`RETIRED_EVICTED`); the caller
            must end them in the engine.
        """
        wid = hints.workflow_id
        state = self._active.get(wid)
        if state is None:
            self._ended.pop(wid, None)
            state = WorkflowState(wid, hints.app, first_seen=now, last_seen=now)
            self._active[wid] = state
        else:
            self._active.move_to_end(wid)
            state.last_seen = now
            if hints.app is not None:
                state.app = hints.app
        state.requests += 1
        overflow: list[str] = []
        while len(self._active) > self.max_active:
            old, _ = self._active.popitem(last=False)
            self._remember_ended(old, RETIRED_EVICTED)
            overflow.append(old)
        return overflow

    def end(self, workflow_id: str, status: str) -> bool:
        """Mark a workflow ended. Idempotent.

        Returns:
            ``True`` when the workflow was active (first end signal), ``False`` when it was
            already ended or never seen (the endpoint still answers 204).
        """
        state = self._active.pop(workflow_id, None)
        if state is None:
            if workflow_id in self._ended:
                self._ended.move_to_end(workflow_id)
            return False
        self._remember_ended(workflow_id, status)
        return True

    def retire_idle(self, now: float) -> list[str]:
        """Retire every workflow idle for at least ``idle_retire_s`` at wall time ``now``.

        Returns:
            the retired ids (status :data:`RETIRED_IDLE`), oldest first.
        """
        if self.idle_retire_s is None:
            return []
        cutoff = now - self.idle_retire_s
        retired: list[str] = []
        # The map is ordered by last_seen, so the scan stops at the first workflow still fresh.
        while self._active:
            wid, state = next(iter(self._active.items()))
            if state.last_seen > cutoff:
                break
            self._active.popitem(last=False)
            self._remember_ended(wid, RETIRED_IDLE)
            retired.append(wid)
        return retired

    def _remember_ended(self, workflow_id: str, status: str) -> None:
        self._ended[workflow_id] = status
        self._ended.move_to_end(workflow_id)
        while len(self._ended) > self.max_ended:
            self._ended.popitem(last=False)
