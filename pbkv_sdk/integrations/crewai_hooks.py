"""CrewAI: the hooks, listener and interceptor that :mod:`pbkv_sdk.integrations.crewai` installs
(this module imports CrewAI; the instrumentor there checks for it first).

Mapping and the CrewAI APIs used (crewai 1.x, checked against the installed source):

* workflow = one ``Crew.kickoff`` / ``kickoff_async`` / ``akickoff``: created by an
  ``execution_start`` interception hook (dispatched synchronously inside the kickoff), ended by
  the ``execution_end`` hook (``completed`` / ``failed``), exactly once; a
  ``CrewKickoffCompletedEvent`` / ``CrewKickoffFailedEvent`` listener on the event bus ends it if
  the hook did not (the bus runs handlers later on a thread pool, so it is only the fallback).
  An ``akickoff`` whose asyncio task is cancelled ends ``cancelled`` (CrewAI dispatches no end
  for it). ``inputs={"pbkv_workflow_id": ...}`` chooses the id.
* inside one kickoff: tasks with ``async_execution=True`` (worker threads) and guardrail retries
  are steps of the same workflow; a hierarchical crew's manager is an agent like the others
  (its ``role``).
* agent = the calling agent's ``role``, set by a ``before_llm_call`` hook in the thread or task
  that makes the call (the hook context carries the agent and its crew). The hook only reads
  and returns ``None``: PBKV registers no after-call hook and changes no message or response.
  A task's ``pre_step`` hook also sets its agent's role for the whole task (reset by
  ``post_step``): CrewAI's forced final answer after ``max_iter``
  (``utilities/agent_utils.handle_max_iterations_exceeded``) calls ``llm.call`` without its
  agent, so its ``before_llm_call`` context names none (issue 35 item 4).
* transport: the process-wide stamping of :mod:`pbkv_sdk.autopatch` (the native OpenAI
  provider sends through httpx). :class:`PBKVInterceptor`, for ``LLM(interceptor=...)``, still
  works for apps that pass it (it stamps first; the transport then leaves the request alone).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
from typing import Any

import httpx
from crewai.events.event_bus import crewai_event_bus
from crewai.events.types.crew_events import CrewKickoffCompletedEvent, CrewKickoffFailedEvent
from crewai.hooks.dispatch import InterceptionPoint, register, unregister
from crewai.hooks.llm_hooks import register_before_llm_call_hook, unregister_before_llm_call_hook
from crewai.llms.hooks.base import BaseInterceptor

from pbkv_sdk.context import ENV_BODY_HINTS, Workflow, reset_agent, set_agent, set_workflow
from pbkv_sdk.env import env_flag
from pbkv_sdk.integrations.base import Instrumentor, Options
from pbkv_sdk.stamping import PendingCall, observe_response, prepare_request

log = logging.getLogger(__name__)

#: ``kickoff(inputs=...)`` key that sets the workflow id.
WORKFLOW_ID_INPUT_KEY = "pbkv_workflow_id"

# The request being sent by this thread/task, between the interceptor's outbound and inbound calls.
_pending_var: contextvars.ContextVar[PendingCall | None] = contextvars.ContextVar("pbkv_crewai_pending", default=None)


class PBKVInterceptor(BaseInterceptor[httpx.Request, httpx.Response]):
    """CrewAI transport interceptor: stamps LLM requests and records them (sync and async).

    Args:
        body_hints: also send ``custom_params.pbkv`` (see :func:`pbkv_sdk.http_client`).
    """

    def __init__(self, body_hints: bool | None = None):
        self.body_hints = env_flag(ENV_BODY_HINTS) if body_hints is None else body_hints

    def on_outbound(self, message: httpx.Request) -> httpx.Request:
        """Stamp an outgoing request (never raises: on trouble it goes out unstamped)."""
        request, pending = prepare_request(message, body_hints=self.body_hints)
        _pending_var.set(pending)
        return request

    def on_inbound(self, message: httpx.Response) -> httpx.Response:
        """Attach trace recording to the response of the request this thread just stamped."""
        return self._inbound(message, is_async=False)

    async def aon_outbound(self, message: httpx.Request) -> httpx.Request:
        return self.on_outbound(message)

    async def aon_inbound(self, message: httpx.Response) -> httpx.Response:
        return self._inbound(message, is_async=True)

    def _inbound(self, message: httpx.Response, *, is_async: bool) -> httpx.Response:
        pending = _pending_var.get()
        _pending_var.set(None)
        return observe_response(message, pending, is_async=is_async)


class CrewAIInstrumentation:
    """The installed hooks and listener (the handle of the CrewAI instrumentor).

    Args:
        options: what the kickoffs' workflows are made with.
        instrumentor: the instrumentor that installed it (:meth:`uninstrument` goes through it).

    Attributes:
        interceptor: a :class:`PBKVInterceptor` for apps that pass ``LLM(interceptor=...)``
            (optional since the transports stamp by themselves).
    """

    def __init__(self, options: Options, instrumentor: Instrumentor):
        self.options = options
        self.instrumentor = instrumentor
        self.interceptor = PBKVInterceptor(options.body_hints)
        self._lock = threading.Lock()
        # id(crew) -> (workflow, token of the workflow variable set by execution_start)
        self._active: dict[int, tuple[Workflow, contextvars.Token | None]] = {}
        self._kickoff_of: dict[int, str | None] = {}  # workflow object id -> CrewAI kickoff event id
        self._task_agent: dict[int, contextvars.Token] = {}  # id(task) -> token of its pre_step's set_agent

    # ----------------------------------------------------------------- lifecycle

    def workflow_of(self, crew: Any) -> Workflow | None:
        """The running workflow of ``crew``, or ``None``."""
        with self._lock:
            entry = self._active.get(id(crew))
        return entry[0] if entry else None

    def uninstrument(self) -> None:
        """Remove the hooks, the event listener and (if this is the installed one) the transport stamping."""
        if self.instrumentor.handle is self:
            self.instrumentor.uninstrument()  # calls remove()
        else:
            self.remove()

    def remove(self) -> None:
        """Remove the hooks and the event listener (idempotent)."""
        unregister(InterceptionPoint.EXECUTION_START, self._on_execution_start)
        unregister(InterceptionPoint.EXECUTION_END, self._on_execution_end)
        unregister(InterceptionPoint.PRE_STEP, self._on_task_start)
        unregister(InterceptionPoint.POST_STEP, self._on_task_end)
        unregister_before_llm_call_hook(self._before_llm_call)
        for event_type, handler in ((CrewKickoffCompletedEvent, self._on_kickoff_event), (CrewKickoffFailedEvent, self._on_kickoff_event)):
            try:
                crewai_event_bus.off(event_type, handler)
            except Exception:  # already gone
                pass

    def install(self) -> None:
        """Register the hooks and the event listener."""
        register(InterceptionPoint.EXECUTION_START, self._on_execution_start)
        register(InterceptionPoint.EXECUTION_END, self._on_execution_end)
        register(InterceptionPoint.PRE_STEP, self._on_task_start)
        register(InterceptionPoint.POST_STEP, self._on_task_end)
        register_before_llm_call_hook(self._before_llm_call)
        crewai_event_bus.register_handler(CrewKickoffCompletedEvent, self._on_kickoff_event)
        crewai_event_bus.register_handler(CrewKickoffFailedEvent, self._on_kickoff_event)

    # ----------------------------------------------------------------- hooks (never raise: CrewAI would abort)

    def _on_execution_start(self, ctx: Any) -> None:
        crew = getattr(ctx, "crew", None)
        if crew is None:  # a Flow, not a crew: its crews' kickoffs are the workflows
            return None
        try:
            chosen = (getattr(ctx, "inputs", None) or {}).get(WORKFLOW_ID_INPUT_KEY)
            # a non-string input is not a choice of id: a fresh id without a warning
            wf = self.options.workflow(chosen if isinstance(chosen, str) else None)
            token = set_workflow(wf)  # the kickoff's own thread/task: its sequential LLM calls see it
            with self._lock:
                self._active[id(crew)] = (wf, token)
            self._end_if_cancelled(crew, wf)
        except Exception:
            log.warning("PBKV: could not start a workflow for this kickoff", exc_info=True)
        return None

    def _on_execution_end(self, ctx: Any) -> None:
        crew = getattr(ctx, "crew", None)
        if crew is None:
            return None
        with self._lock:
            entry = self._active.pop(id(crew), None)
            if entry is not None:  # forget it: ids of ended workflows get reused by new objects
                self._kickoff_of.pop(id(entry[0]), None)
            # a failed task never reached post_step: its agent is undone here, or the caller's
            # context would keep the role, and its next LLM call outside any crew would carry it
            left = [t for t in (self._task_agent.pop(id(task), None) for task in getattr(crew, "tasks", None) or ())
                    if t is not None]
        for token in reversed(left):  # the newest first, so the oldest restores the value before the kickoff
            try:
                reset_agent(token)
            except ValueError:  # set in another context (an async task's thread): not this one's to undo
                pass
        if entry is None:
            return None
        wf, token = entry
        if token is not None:
            try:
                token.var.reset(token)
            except ValueError:  # ended from another context than it started in
                pass
        wf.end("failed" if getattr(ctx, "status", "completed") == "failed" else "completed")
        return None

    def _end_if_cancelled(self, crew: Any, wf: Workflow) -> None:
        """In ``akickoff`` (a running event loop), end ``wf`` ``cancelled`` if its task is cancelled."""
        try:
            task = asyncio.current_task()
        except RuntimeError:  # no event loop in this thread: kickoff / kickoff_async's worker
            return
        if task is None:
            return

        def done(t: asyncio.Task) -> None:
            if not t.cancelled():
                return
            with self._lock:
                entry = self._active.get(id(crew))
                if entry is None or entry[0] is not wf:
                    return
                self._active.pop(id(crew))
                self._kickoff_of.pop(id(wf), None)
            wf.end("cancelled")

        task.add_done_callback(done)

    def _on_task_start(self, ctx: Any) -> None:
        """A crew task starts: its agent's role is the agent of every LLM call the task makes,
        including the ones whose ``before_llm_call`` context names no agent (the forced final answer)."""
        try:
            role = getattr(ctx, "agent_role", None) or getattr(getattr(ctx, "agent", None), "role", None)
            task = getattr(ctx, "task", None)
            if getattr(ctx, "kind", None) != "task" or not role or task is None:
                return None
            token = set_agent(str(role).strip())
            with self._lock:
                self._task_agent[id(task)] = token
        except Exception:
            log.debug("PBKV: pre_step hook failed", exc_info=True)
        return None

    def _on_task_end(self, ctx: Any) -> None:
        """A crew task ends: the agent goes back to what it was before the task."""
        with self._lock:
            token = self._task_agent.pop(id(getattr(ctx, "task", None)), None)
        if token is not None:
            try:
                reset_agent(token)
            except ValueError:  # ended in another context than it started in: leave it
                pass
        return None

    def _before_llm_call(self, ctx: Any) -> None:
        try:
            wf = self.workflow_of(ctx.crew) if getattr(ctx, "crew", None) is not None else None
            if wf is not None:
                # Async tasks and tool threads may not inherit the kickoff's context: set it here too.
                set_workflow(wf)
                wf.expect_llm_call()
                self._kickoff_of.setdefault(id(wf), getattr(ctx.crew, "_kickoff_event_id", None))
            role = getattr(getattr(ctx, "agent", None), "role", None)
            if role:
                set_agent(str(role).strip())
        except Exception:
            log.debug("PBKV: before_llm_call hook failed", exc_info=True)
        return None

    def _on_kickoff_event(self, source: Any, event: Any) -> None:
        """Fallback end (thread pool, later): only for the kickoff the event belongs to."""
        with self._lock:
            entry = self._active.get(id(source))
            if entry is None or self._kickoff_of.get(id(entry[0])) != getattr(event, "started_event_id", None):
                return
            self._active.pop(id(source))
            self._kickoff_of.pop(id(entry[0]), None)
        entry[0].end("failed" if isinstance(event, CrewKickoffFailedEvent) else "completed")
