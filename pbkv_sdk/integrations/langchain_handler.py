"""LangChain / LangGraph: the callback handler that :mod:`pbkv_sdk.integrations.langchain` attaches
to every run (this module imports LangChain; the instrumentor there checks for it first).

Mapping: workflow = one root run (``graph.invoke/ainvoke/stream/astream``, or any other root
runnable); agent = the LangGraph node that makes the LLM call (``metadata["langgraph_node"]``,
the innermost node for nested subgraphs); step = the workflow's LLM requests in send order. A
root run's ``config={"metadata": {"pbkv_workflow_id": "..."}}`` chooses the workflow id.

Run control (each path is one workflow id and at most one end):

* the root run returns: ends ``completed``; a node raises: ``failed``; the task is cancelled,
  or the caller stops consuming ``stream``/``astream`` early: ``cancelled``;
* a node calls ``interrupt(...)`` (human in the loop, with a checkpointer): the workflow is
  *paused*, not ended, whether the caller reads the stream to its end or breaks out of it at
  the ``__interrupt__`` event (sync or async, even before the async generator is closed); the
  next run on the same ``thread_id`` whose input is
  ``Command(resume=...)`` or ``None`` continues it (same id, steps go on); a run on that thread
  with a new input instead ends the paused one ``cancelled`` and starts a new workflow. A paused
  workflow never resumed is retired by the server after its idle time.

The handler is synchronous and ``run_inline``: LangChain then calls it in the very context (task
or thread) that performs the LLM call, so the context variables it sets reach the HTTP transport.
(Async handlers run in copied contexts whose changes are lost.)
"""

from __future__ import annotations

import collections
import contextvars
import threading
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler

from pbkv_sdk.context import Workflow, set_agent, set_workflow
from pbkv_sdk.integrations.base import Options, end_status

try:  # LangGraph is optional: plain LangChain apps have no interrupts
    from langgraph.errors import GraphInterrupt as _GraphInterrupt
    from langgraph.types import Command as _Command
except ImportError:  # pragma: no cover - langgraph is installed with the extra
    _GraphInterrupt = _Command = None  # type: ignore[assignment,misc]


#: Metadata key of a root run that sets the workflow id.
WORKFLOW_ID_METADATA_KEY = "pbkv_workflow_id"
#: Agent name for LLM calls made outside any LangGraph node.
DEFAULT_AGENT = "llm"
#: Paused (interrupted) workflows kept for a resume; beyond this the oldest is forgotten (the
#: server retires it when idle), so an app that never resumes cannot grow the handler.
MAX_PAUSED = 10_000


class PBKVCallbackHandler(BaseCallbackHandler):
    """Sets workflow/agent context for LLM calls of LangChain runs and ends workflows at root end.

    Args:
        args, kwargs: the fields of :class:`~pbkv_sdk.integrations.base.Options` (``app``,
            ``server_url``, ``trace_path``, ``end_timeout_s``, ``body_hints``, ``kv_hints``).
        options: an :class:`~pbkv_sdk.integrations.base.Options` instead.

    Thread-safe; one handler serves any number of concurrent workflows.
    """

    run_inline = True
    raise_error = False

    def __init__(self, *args: Any, options: Options | None = None, **kwargs: Any):
        super().__init__()
        #: What this handler's workflows are made with.
        self.options = options if options is not None else Options(*args, **kwargs)
        self._lock = threading.Lock()
        self._root_of: dict[UUID, UUID] = {}  # run id -> root run id (live runs only)
        self._workflows: dict[UUID, Workflow] = {}  # root run id -> workflow
        self._tokens: dict[UUID, tuple[contextvars.Token, contextvars.Token]] = {}  # LLM run -> var tokens
        self._thread_of: dict[UUID, str] = {}  # root run id -> LangGraph thread id
        self._interrupted: set[UUID] = set()  # root runs in which a node called interrupt()
        self._paused: collections.OrderedDict[str, Workflow] = collections.OrderedDict()  # thread id -> workflow
        self._http_llm: set[UUID] = set()  # LLM runs of models that send HTTP requests
        #: False once ``uninstrument()`` could not detach the handler: new runs are then ignored.
        self.enabled = True

    # ----------------------------------------------------------------- public helpers

    def workflow_of(self, run_id: UUID) -> Workflow | None:
        """The workflow a live run belongs to, or ``None``."""
        with self._lock:
            root = self._root_of.get(run_id)
            return self._workflows.get(root) if root is not None else None

    @property
    def active_workflows(self) -> int:
        """Number of workflows running now (paused ones not included)."""
        with self._lock:
            return len(self._workflows) - len(self._paused_live())

    @property
    def paused_workflows(self) -> dict[str, Workflow]:
        """Interrupted workflows waiting for a resume, by LangGraph ``thread_id`` (a copy); this
        includes a root run paused at its interrupt whose async stream is not closed yet."""
        with self._lock:
            return {**self._paused, **self._paused_live()}

    def _paused_live(self) -> dict[str, Workflow]:
        """Thread id -> workflow of root runs still open but paused at an interrupt (lock held)."""
        return {self._thread_of[root]: self._workflows[root] for root in self._interrupted
                if root in self._workflows and root in self._thread_of}

    # ----------------------------------------------------------------- run tree

    def on_chain_start(self, serialized, inputs, *, run_id, parent_run_id=None, metadata=None, **kwargs) -> None:
        self._enter(run_id, parent_run_id, metadata, inputs)

    def on_tool_start(self, serialized, input_str, *, run_id, parent_run_id=None, metadata=None, **kwargs) -> None:
        self._enter(run_id, parent_run_id, metadata)

    def on_retriever_start(self, serialized, query, *, run_id, parent_run_id=None, metadata=None, **kwargs) -> None:
        self._enter(run_id, parent_run_id, metadata)

    def on_chain_end(self, outputs, *, run_id, parent_run_id=None, **kwargs) -> None:
        self._exit(run_id, "completed")

    def on_chain_error(self, error, *, run_id, parent_run_id=None, **kwargs) -> None:
        if _GraphInterrupt is not None and isinstance(error, _GraphInterrupt):
            # A node paused the graph; LangGraph catches this and the root run returns normally.
            with self._lock:
                root = self._root_of.get(run_id)
                if root is not None:
                    self._interrupted.add(root)
            self._exit(run_id, "completed")
            return
        self._exit(run_id, end_status(error))

    def on_tool_end(self, output, *, run_id, **kwargs) -> None:
        self._exit(run_id, "completed")

    def on_tool_error(self, error, *, run_id, **kwargs) -> None:
        self._exit(run_id, end_status(error))

    def on_retriever_end(self, documents, *, run_id, **kwargs) -> None:
        self._exit(run_id, "completed")

    def on_retriever_error(self, error, *, run_id, **kwargs) -> None:
        self._exit(run_id, end_status(error))

    # ----------------------------------------------------------------- LLM calls

    def on_chat_model_start(self, serialized, messages, *, run_id, parent_run_id=None, metadata=None, **kwargs) -> None:
        self._llm_start(run_id, parent_run_id, metadata, kwargs)

    def on_llm_start(self, serialized, prompts, *, run_id, parent_run_id=None, metadata=None, **kwargs) -> None:
        self._llm_start(run_id, parent_run_id, metadata, kwargs)

    def on_llm_end(self, response, *, run_id, **kwargs) -> None:
        if run_id in self._http_llm:
            wf = self.workflow_of(run_id)
            if wf is not None:  # checked at the workflow's end: did this call go out stamped?
                wf.expect_llm_call()
        self._llm_stop(run_id, "completed")

    def on_llm_error(self, error, *, run_id, **kwargs) -> None:
        self._llm_stop(run_id, end_status(error))

    # ----------------------------------------------------------------- internals

    def _enter(self, run_id: UUID, parent_run_id: UUID | None, metadata: dict | None, inputs: Any = None) -> Workflow | None:
        if not self.enabled:
            return None
        with self._lock:
            root = self._root_of.get(parent_run_id) if parent_run_id is not None else None
            if root is not None:
                self._root_of[run_id] = root
                return self._workflows.get(root)
        # A run whose parent we do not track (none, or a LangSmith parent) is a workflow root.
        metadata = metadata or {}
        thread = metadata.get("thread_id")
        thread = str(thread) if thread is not None else None
        wf = self._resume(thread, inputs) if thread is not None else None
        if wf is None:
            wf = self.options.workflow(metadata.get(WORKFLOW_ID_METADATA_KEY))
        with self._lock:
            self._root_of[run_id] = run_id
            self._workflows[run_id] = wf
            if thread is not None:
                self._thread_of[run_id] = thread
        return wf

    def _resume(self, thread: str, inputs: Any) -> Workflow | None:
        """The paused workflow of ``thread`` if this run resumes it; a new input cancels it."""
        with self._lock:
            paused = self._paused.pop(thread, None)
        if paused is None:
            paused = self._take_over_interrupted(thread)
        if paused is None:
            return None
        if inputs is None or (_Command is not None and isinstance(inputs, _Command)):
            return paused
        paused.end("cancelled")  # the thread starts over: the interrupted run will never finish
        return None

    def _take_over_interrupted(self, thread: str) -> Workflow | None:
        """The workflow of a root run on ``thread`` that paused at an interrupt but has not ended.

        A caller that breaks out of ``async for chunk in graph.astream(...)`` at the
        ``__interrupt__`` event leaves the async generator open: LangGraph's root run ends only
        when the generator is finalized (garbage collection, or the event loop's shutdown),
        which may come after the resume. The resume takes the workflow over; the old root's
        late end then finds no workflow and sends nothing.
        """
        with self._lock:
            for root in list(self._interrupted):
                if self._thread_of.get(root) == thread and root in self._workflows:
                    self._interrupted.discard(root)
                    del self._thread_of[root]
                    return self._workflows.pop(root)
        return None

    def _exit(self, run_id: UUID, status: str) -> None:
        with self._lock:
            root = self._root_of.pop(run_id, None)
            if root != run_id:
                return
            wf = self._workflows.pop(run_id, None)
            thread = self._thread_of.pop(run_id, None)
            interrupted = run_id in self._interrupted
            self._interrupted.discard(run_id)
            # A run that paused at an interrupt is paused however the caller leaves it: the
            # stream read to its end ("completed"), or closed at the ``__interrupt__`` event
            # (``break`` out of ``for chunk in graph.stream(...)``: GeneratorExit, "cancelled").
            # The checkpoint holds the state, so a resume continues the workflow.
            if wf is not None and interrupted and status in ("completed", "cancelled") and thread is not None:
                self._paused[thread] = wf  # paused, not finished: no end signal
                while len(self._paused) > MAX_PAUSED:
                    self._paused.popitem(last=False)
                return
        if wf is not None:
            wf.end(status)

    def _llm_start(self, run_id: UUID, parent_run_id: UUID | None, metadata: dict | None, kwargs: dict) -> None:
        wf = self._enter(run_id, parent_run_id, metadata)
        if wf is None:  # disabled handler
            return
        agent = (metadata or {}).get("langgraph_node") or kwargs.get("name") or DEFAULT_AGENT
        if "fake" not in str((metadata or {}).get("ls_provider", "")).lower():  # test models send nothing
            self._http_llm.add(run_id)
        # Set in the LLM run's own context: the HTTP request is sent from this same context.
        self._tokens[run_id] = (set_workflow(wf), set_agent(str(agent)))

    def _llm_stop(self, run_id: UUID, status: str) -> None:
        self._http_llm.discard(run_id)
        tokens = self._tokens.pop(run_id, None)
        if tokens is not None:
            for token in reversed(tokens):
                try:
                    token.var.reset(token)
                except ValueError:  # ended from another context (rare executor hop): clear instead
                    token.var.set(None)
        self._exit(run_id, status)
