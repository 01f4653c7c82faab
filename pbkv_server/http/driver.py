"""The sim engine driver: one :class:`pbkv_server.engine.Engine` stepped by an asyncio task.

HTTP handlers :meth:`SimDriver.submit` an :class:`EngineRequest` and await the two futures of the
returned :class:`Submission` (first token, finished). A single background task runs continuous
batching on the engine's virtual clock: while the engine is busy it calls ``step()`` and resolves
the futures named by the returned events; when idle it sleeps until the next submission.

Pacing (``--pace``): with ``pace == 0`` steps run back to back (virtual time runs as fast as the
CPU allows; idle wall time is not added to the clock). With ``pace = p > 0`` each step is followed
by ``p x`` its simulated duration of real sleep, and idle wall time advances the clock by
``idle / p``, so at ``p = 1`` the engine clock tracks the wall clock.

All engine calls happen on the event loop's thread, so the engine needs no locking.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from pbkv_server.engine import EndListener, Engine, EngineConfig, EngineRequest, Finished, FirstToken

__all__ = ["SimDriver", "Submission", "EngineFailure"]

log = logging.getLogger(__name__)

# With pacing, a decode-only stretch is cut at this much wall time so that new arrivals are
# admitted within it (the engine would otherwise run to the next completion in one step).
_PACED_QUANTUM_S = 0.05
# Steps in a row that neither advance the clock nor emit events before the loop backs off (a
# stalled engine must not spin a core while it waits for, e.g., an end signal that frees memory).
_STALL_STEPS = 64
_STALL_SLEEP_S = 0.001


class EngineFailure(RuntimeError):
    """The engine raised while stepping; the request was dropped (the server answers 500)."""


@dataclass(slots=True)
class Submission:
    """One request in flight.

    Attributes:
        request: what was submitted.
        submit_time: engine clock (seconds) at submission.
        first_token: resolves to the :class:`FirstToken` event.
        finished: resolves to the :class:`Finished` event.
    """

    request: EngineRequest
    submit_time: float
    first_token: asyncio.Future[FirstToken] = field(repr=False)
    finished: asyncio.Future[Finished] = field(repr=False)

    @property
    def prompt_tokens(self) -> int:
        """Prompt length in tokens (sum of the request's block token counts)."""
        return sum(self.request.block_tokens)


class SimDriver:
    """Owns the engine and the stepping task.

    Args:
        make_config: builds the :class:`EngineConfig` (called again to rebuild the engine after
            an engine failure).
        pace: see module docstring (>= 0).
        on_workflow_end: an :data:`~pbkv_server.engine.EndListener` attached to every engine
            this driver builds (the first and any rebuilt one).
    """

    def __init__(self, make_config: Callable[[], EngineConfig], pace: float = 0.0,
                 on_workflow_end: EndListener | None = None):
        if pace < 0:
            raise ValueError("pace must be >= 0")
        self._make_config = make_config
        self._on_workflow_end = on_workflow_end
        self.pace = pace
        self.engine_config = make_config()
        self.engine = self._build_engine()
        self._inflight: dict[str, Submission] = {}
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._idle_since = time.monotonic()
        self._parked = False  # the loop waits for work (the engine is idle and its time is slept off)
        self.steps = 0
        self.engine_failures = 0

    # ------------------------------------------------------------------ lifecycle

    @property
    def device_capacity(self) -> int:
        """Device KV capacity in tokens (config override or the profile's)."""
        cfg = self.engine_config
        return cfg.device_tokens if cfg.device_tokens is not None else cfg.profile.device_kv_tokens

    async def start(self) -> None:
        """Start the stepping task on the running event loop (idempotent)."""
        if self._task is None:
            self._wake = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._run(), name="pbkv-engine")

    async def stop(self) -> None:
        """Cancel the stepping task; requests still in flight fail with :class:`EngineFailure`."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        self._fail_all(EngineFailure("server shutting down"))

    # ------------------------------------------------------------------ requests

    def submit(self, request: EngineRequest) -> Submission:
        """Queue ``request`` at the current engine clock; must be called on the event loop.

        Raises:
            ValueError: the request id is already in flight, or the engine rejects the request
                (its KV does not fit the device; malformed blocks).
        """
        if request.request_id in self._inflight:
            raise ValueError(f"request id {request.request_id!r} already in flight")
        if self._parked and self.pace > 0:
            # Idle wall time is simulated time too when pacing (the clock tracks the wall clock / pace).
            # Only while parked: right after a step the loop is still sleeping off that step's time.
            self.engine.advance_to(self.engine.clock + (time.monotonic() - self._idle_since) / self.pace)
            self._idle_since = time.monotonic()
        loop = asyncio.get_running_loop()
        sub = Submission(request, self.engine.clock, loop.create_future(), loop.create_future())
        self.engine.submit(request)
        self._inflight[request.request_id] = sub
        if self._wake is not None:
            self._wake.set()
        return sub

    def end_workflow(self, workflow_id: str, status: str = "completed") -> bool:
        """Tell the engine a workflow ended (idempotent, unknown ids are fine); True if it was active.
        The SGLang session of the same id closes with it (a client that sends both forms names its
        session after its workflow)."""
        self.engine.close_session(workflow_id)
        active = self.engine.end_workflow(workflow_id, status)
        if self._wake is not None:
            self._wake.set()  # ending may free memory a waiting request needs
        return active

    def keep_workflow(self, workflow_id: str) -> bool:
        """Restart active workflow ``workflow_id``'s idle clock (a ``kv.retain`` / ``kv.fetch``
        of another workflow; :meth:`Engine.keep_workflow`); True if it is active."""
        return self.engine.keep_workflow(workflow_id)

    def prefetch_workflow(self, workflow_id: str) -> int:
        """Load ``workflow_id``'s host-tier cache back to the device where free room allows (a
        ``kv.fetch`` hint; :meth:`Engine.prefetch_workflow`); returns the tokens loaded."""
        return self.engine.prefetch_workflow(workflow_id)

    def close_session(self, session_id: str) -> bool:
        """SGLang ``/close_session``: the policy drops the session's tags, and the PBKV workflow of
        the same id ends (``completed``); True if that workflow was active."""
        return self.end_workflow(session_id, "completed")

    def retire_idle(self) -> list[str]:
        """Retire the engine's idle workflows now (the server's sweeper calls it); returns their ids."""
        retired = self.engine.retire_idle()
        if retired and self._wake is not None:
            self._wake.set()
        return retired

    def set_app_graph(self, app: str, edges: Mapping[str, Sequence[str]]) -> None:
        """Register an app's static agent graph (used by the ``kvflow`` policy)."""
        self.engine.set_app_graph(app, edges)

    @property
    def inflight(self) -> int:
        """Requests submitted and not finished."""
        return len(self._inflight)

    def stats(self) -> Any:
        """The engine's current ``EngineStats``."""
        return self.engine.stats

    # ------------------------------------------------------------------ loop

    async def _run(self) -> None:
        assert self._wake is not None
        stalled = 0
        idle = False
        while True:
            if not self.engine.busy:
                if not idle:  # busy -> idle: idle wall time counts from here (see submit)
                    self._idle_since = time.monotonic()
                    idle = True
                self._wake.clear()
                self._parked = True
                try:
                    await self._wake.wait()
                finally:
                    self._parked = False
                continue
            idle = False
            before = self.engine.clock
            until = before + _PACED_QUANTUM_S / self.pace if self.pace > 0 else None
            try:
                events = self.engine.step(until)
            except Exception as exc:  # keep serving: drop in-flight work, rebuild the engine
                self._recover(exc)
                continue
            self.steps += 1
            elapsed = self.engine.clock - before
            stalled = 0 if (events or elapsed > 0) else stalled + 1
            if self.pace > 0:
                # Sleep before answering: a paced client sees each event when its time has come.
                await asyncio.sleep(self.pace * elapsed)
            for event in events:
                self._dispatch(event)
            # Yield to the HTTP handlers between steps; back off if the engine stalls.
            await asyncio.sleep(_STALL_SLEEP_S if stalled >= _STALL_STEPS else 0)

    def _dispatch(self, event: FirstToken | Finished) -> None:
        sub = self._inflight.get(event.request_id)
        if sub is None:
            return
        if isinstance(event, FirstToken):
            if not sub.first_token.done():
                sub.first_token.set_result(event)
        elif isinstance(event, Finished):
            if not sub.first_token.done():  # defensive: a Finished implies its first token
                sub.first_token.set_exception(EngineFailure("finished without a first token"))
            if not sub.finished.done():
                sub.finished.set_result(event)
            del self._inflight[event.request_id]

    def _recover(self, exc: Exception) -> None:
        self.engine_failures += 1
        log.exception("engine step failed; dropping %d in-flight requests and rebuilding the engine", len(self._inflight))
        self._fail_all(EngineFailure(f"engine failure: {type(exc).__name__}: {exc}"))
        self.engine_config = self._make_config()
        self.engine = self._build_engine()

    def _build_engine(self) -> Engine:
        engine = Engine(self.engine_config)
        if self._on_workflow_end is not None:
            engine.add_end_listener(self._on_workflow_end)
        return engine

    def _fail_all(self, exc: Exception) -> None:
        for sub in self._inflight.values():
            for fut in (sub.first_token, sub.finished):
                if not fut.done():
                    fut.set_exception(exc)
                    fut.exception()  # mark retrieved: a handler that went away must not log noise
        self._inflight.clear()
