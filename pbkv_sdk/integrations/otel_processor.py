"""OpenTelemetry: the span processor that :mod:`pbkv_sdk.integrations.otel` installs (this module
imports OpenTelemetry and OpenInference's conventions; the instrumentor there checks for them first).

Mapping, from the span attributes present when a span starts:

* workflow = the outermost span that stands for an agent run: OpenTelemetry GenAI
  ``gen_ai.operation.name`` = ``invoke_agent`` / ``invoke_workflow``, or any span carrying
  ``gen_ai.agent.name`` or ``gen_ai.conversation.id``; OpenInference
  ``openinference.span.kind`` = ``AGENT``, or ``agent.name`` / ``session.id``. Its id is
  ``<trace id>.<span id>`` in hex. It ends when that span ends: ``completed``; ``failed`` if
  the span's status is ERROR; ``cancelled`` if it recorded a ``CancelledError``,
  ``GeneratorExit`` or ``KeyboardInterrupt``.
* agent = the nearest ``gen_ai.agent.name`` / ``agent.name`` on the way up from the span that
  is current when the LLM request is sent; step = the workflow's requests in send order.
* hints reach the request through the process-wide httpx stamping (:mod:`pbkv_sdk.autopatch`),
  which asks this processor for the current span's workflow. A GenAI ``chat`` /
  ``text_completion`` or OpenInference ``LLM`` span that ends without a stamped request is
  reported once at the workflow's end.

The OpenTelemetry SDK must be on: with ``OTEL_SDK_DISABLED=true`` there are no spans and so no
hints (one warning says so).
"""

from __future__ import annotations

from typing import Any, Mapping

from openinference.semconv.trace import OpenInferenceSpanKindValues, SpanAttributes
from opentelemetry import trace as otel_trace
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.trace import StatusCode

from pbkv_sdk.context import Workflow
from pbkv_sdk.integrations.base import CANCELLED_NAMES
from pbkv_sdk.integrations.spantree import SpanIntegration

__all__ = ["PBKVSpanProcessor"]

# OpenTelemetry semantic conventions for generative AI (gen-ai spans, agent spans); written out
# because the Python package ships them only in its private ``_incubating`` module.
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_AGENT_NAME = "gen_ai.agent.name"
GEN_AI_CONVERSATION_ID = "gen_ai.conversation.id"
_AGENT_OPERATIONS = ("invoke_agent", "invoke_workflow")
_LLM_OPERATIONS = ("chat", "text_completion", "generate_content")


class PBKVSpanProcessor(SpanIntegration, SpanProcessor):
    """Span processor that turns agent spans into PBKV workflows and names the LLM calls inside.

    Arguments as :class:`pbkv_sdk.integrations.spantree.SpanIntegration` (the fields of
    :class:`~pbkv_sdk.integrations.base.Options`).
    """

    def on_start(self, span: Span, parent_context: Any = None) -> None:
        """Register the span: it inherits its parent's workflow and agent, or starts a workflow."""
        if not self.enabled:
            return
        attrs = span.attributes or {}
        ctx = span.get_span_context()
        parent = span.parent
        root_id = f"{ctx.trace_id:032x}.{ctx.span_id:016x}" if _starts_workflow(attrs) else None
        if root_id is not None:
            self.start_root(ctx.span_id)
        self.spans.start(ctx.span_id, parent.span_id if parent is not None else None, root_id=root_id, agent=_agent(attrs))

    def on_end(self, span: ReadableSpan) -> None:
        """End the workflow of a root span; count finished LLM spans for the unstamped check."""
        span_id = span.get_span_context().span_id
        # OpenTelemetry records Exceptions only; a cancellation is seen unwinding through the span's exit.
        status = _status(span)
        leaving = self.root_status(span_id)
        if status == "completed" and leaving is not None:
            status = leaving
        wf = self.spans.end(span_id, status)
        if wf is not None and status == "completed" and _is_llm_span(span.attributes or {}):
            wf.expect_llm_call()

    def shutdown(self) -> None:
        """Nothing to flush: end signals and trace lines have their own background senders."""

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Nothing buffered here."""
        return True

    def resolve(self) -> tuple[Workflow, str | None] | None:
        """``(workflow, agent)`` of the OpenTelemetry span current in this context, or ``None``."""
        ctx = otel_trace.get_current_span().get_span_context()
        return self.spans.lookup(ctx.span_id) if ctx.is_valid else None


# --------------------------------------------------------------------------- attribute rules


def _starts_workflow(attrs: Mapping[str, Any]) -> bool:
    return (
        attrs.get(GEN_AI_OPERATION_NAME) in _AGENT_OPERATIONS
        or GEN_AI_AGENT_NAME in attrs
        or GEN_AI_CONVERSATION_ID in attrs
        or attrs.get(SpanAttributes.OPENINFERENCE_SPAN_KIND) == OpenInferenceSpanKindValues.AGENT.value
        or SpanAttributes.AGENT_NAME in attrs
        or SpanAttributes.SESSION_ID in attrs
    )


def _agent(attrs: Mapping[str, Any]) -> str | None:
    name = attrs.get(GEN_AI_AGENT_NAME) or attrs.get(SpanAttributes.AGENT_NAME)
    return str(name) if name else None


def _is_llm_span(attrs: Mapping[str, Any]) -> bool:
    return (attrs.get(GEN_AI_OPERATION_NAME) in _LLM_OPERATIONS
            or attrs.get(SpanAttributes.OPENINFERENCE_SPAN_KIND) == OpenInferenceSpanKindValues.LLM.value)


def _status(span: ReadableSpan) -> str:
    for event in span.events:
        if event.name == "exception" and (event.attributes or {}).get("exception.type") in CANCELLED_NAMES:
            return "cancelled"
    return "failed" if span.status.status_code == StatusCode.ERROR else "completed"
