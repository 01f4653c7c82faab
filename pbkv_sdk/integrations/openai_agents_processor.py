"""OpenAI Agents SDK: the tracing processor that :mod:`pbkv_sdk.integrations.openai_agents`
installs (this module imports the Agents SDK; the instrumentor there checks for it first).

Mapping (the Agents SDK's own tracing, on by default, drives it; ``add_trace_processor`` keeps
the app's other processors):

* workflow = one trace, i.e. one ``Runner.run`` / ``run_sync`` / ``run_streamed`` (or one
  ``with trace(...)`` block around several runs); its id is the trace id (``trace_<32 hex>``).
  It ends when the trace ends: ``completed``; ``failed`` if an agent span recorded an error
  (a model error, ``MaxTurnsExceeded``, a guardrail tripwire); ``cancelled`` if the run's task
  was cancelled (``result.cancel()`` on a streamed run, ``task.cancel()``).
* agent = the agent that calls the model: the name of the nearest agent span around the
  model-call span, so after a handoff the new agent's calls carry its name, and an agent used
  as a tool names its own calls; step = the workflow's LLM requests in send order (handoffs
  and tool calls in between add none).
* transport: the model call's span is the current Agents SDK span while the OpenAI client
  sends; the process-wide stamping (:mod:`pbkv_sdk.autopatch`) asks this processor for the
  workflow and agent of that span.
* tracing disabled (``agents.set_tracing_disabled(True)``, ``RunConfig(tracing_disabled=True)``,
  ``OPENAI_AGENTS_DISABLE_TRACING=1``): the Agents SDK calls no processor then, so
  ``instrument()`` wraps its trace provider (:mod:`pbkv_sdk.integrations.openai_agents_untraced`):
  the no-op traces and spans it hands out report to this processor alone, and runs are stamped
  exactly as with tracing on (workflow id ``trace_<32 hex>`` all the same). Nothing is exported.
  If the app replaces the trace provider after ``instrument()``, such runs cannot be seen: one
  warning says so and how to fix it, and their requests go out without hints.
"""

from __future__ import annotations

import asyncio
from typing import Any

from agents.tracing import TracingProcessor, get_current_span, get_current_trace
from agents.tracing.span_data import AgentSpanData, GenerationSpanData, ResponseSpanData
from agents.tracing.spans import NoOpSpan
from agents.tracing.traces import NoOpTrace

from pbkv_sdk.context import Workflow
from pbkv_sdk.integrations.openai_agents_untraced import shadow_key
from pbkv_sdk.once import WarnOnce
from pbkv_sdk.integrations.spantree import SpanIntegration

__all__ = ["PBKVTracingProcessor", "UNSEEN_RUN_WARNING"]

_MODEL_CALL_SPANS = (GenerationSpanData, ResponseSpanData)


class PBKVTracingProcessor(SpanIntegration, TracingProcessor):
    """Agents SDK tracing processor: traces become workflows, agent spans name the model calls.

    Arguments as :class:`pbkv_sdk.integrations.spantree.SpanIntegration` (the fields of
    :class:`~pbkv_sdk.integrations.base.Options`).

    Attributes:
        warn: warn-once for trouble seen at request time (the instrumentor's, once installed).
    """

    warn: WarnOnce | None = None

    # ----------------------------------------------------------------- TracingProcessor

    def on_trace_start(self, trace: Any) -> None:
        """A run starts: a new workflow."""
        self.trace_started(trace.trace_id)

    def on_trace_end(self, trace: Any) -> None:
        """The run's trace ends: end its workflow (see :meth:`trace_ended`)."""
        self.trace_ended(trace.trace_id)

    def on_span_start(self, span: Any) -> None:
        """Agent spans name the calls inside them; every span inherits its parent's workflow."""
        self.span_started(span.span_id, span.parent_id or span.trace_id, span.span_data)

    def on_span_end(self, span: Any) -> None:
        """See :meth:`span_ended`."""
        self.span_ended(span.span_id, span.span_data, span.error)

    # ----------------------------------------------------------------- by id (traced and untraced runs)

    def trace_started(self, trace_id: str) -> None:
        """Trace ``trace_id`` (a real one, or a shadow of an untraced run) starts: a new workflow."""
        if self.enabled:
            self.start_root(trace_id)
            self.spans.start(trace_id, None, root_id=trace_id)

    def trace_ended(self, trace_id: str) -> None:
        """The run's trace ends: end its workflow with the status of the exception leaving it, if any.

        The trace is finished in the run's ``with`` exit, where ``sys.exc_info()`` is the exception
        that ends the run (an exception the caller was already handling at the start is not).
        """
        status = self.root_status(trace_id)
        if status is None:
            status = "cancelled" if _cancelling() else "completed"
        self.spans.end(trace_id, status)

    def span_started(self, span_id: str, parent_id: str, data: Any) -> None:
        """Span ``span_id`` under ``parent_id`` (a span or the trace) starts."""
        agent = data.name if isinstance(data, AgentSpanData) else None
        self.spans.start(span_id, parent_id, agent=agent)

    def span_ended(self, span_id: str, data: Any, error: Any) -> None:
        """Errors of agent spans fail the workflow; finished model calls are counted for the unstamped check."""
        if error is not None and isinstance(data, AgentSpanData):
            self.spans.fail(span_id)
        wf = self.spans.end(span_id)
        if wf is not None and error is None and isinstance(data, _MODEL_CALL_SPANS):
            wf.expect_llm_call()

    def shutdown(self) -> None:
        """Nothing to flush: end signals and trace lines have their own background senders."""

    def force_flush(self) -> None:
        """Nothing buffered here."""

    # ----------------------------------------------------------------- resolver

    def resolve(self) -> tuple[Workflow, str | None] | None:
        """``(workflow, agent)`` of the Agents SDK span (or trace) current in this context."""
        span = get_current_span()
        if span is not None:
            return self._lookup(span, span.span_id)
        trace = get_current_trace()
        return self._lookup(trace, trace.trace_id) if trace is not None else None

    def _lookup(self, obj: Any, real_id: str) -> tuple[Workflow, str | None] | None:
        key = shadow_key(obj)
        if key is not None:
            return self.spans.lookup(key)
        if type(obj) in (NoOpSpan, NoOpTrace):  # a run with tracing disabled that no shadow covers
            if self.warn is not None:
                self.warn("untraced", UNSEEN_RUN_WARNING)
            return None
        return self.spans.lookup(real_id)


def _cancelling() -> bool:
    """Whether the running asyncio task is being cancelled (the trace ends inside its unwinding)."""
    try:
        task = asyncio.current_task()
    except RuntimeError:
        return False
    # Task.cancelling() is Python 3.11+; on 3.10 a cancelled run ends "completed".
    return task is not None and getattr(task, "cancelling", lambda: 0)() > 0


#: Said once per process when an untraced run's request cannot be attributed to a run.
UNSEEN_RUN_WARNING = (
    "PBKV: an OpenAI Agents SDK run with tracing disabled sent an LLM request that PBKV cannot tie to "
    "its run, because the trace provider was replaced after pbkv_sdk.integrations.openai_agents."
    "instrument() (or the run started before it); such requests go out without hints. Call instrument() "
    "after agents.set_trace_provider(...), or leave tracing on."
)
