"""Runs of the OpenAI Agents SDK with tracing disabled, seen by the PBKV processor all the same.

With tracing disabled (``agents.set_tracing_disabled(True)``, ``RunConfig(tracing_disabled=True)``,
``OPENAI_AGENTS_DISABLE_TRACING=1``) the Agents SDK's trace provider hands out ``NoOpTrace`` /
``NoOpSpan`` objects and calls no processor, so :class:`~pbkv_sdk.integrations.openai_agents_processor.
PBKVTracingProcessor` would see no run, and every LLM request would leave without hints.

:class:`ShadowProvider` wraps the installed trace provider (the Agents SDK's public
``set_trace_provider``) and delegates everything to it. Where it returns a no-op trace, or a
no-op span inside a run, the wrapper returns a *shadow*: a ``NoOpTrace`` / ``NoOpSpan`` subclass,
so the Agents SDK and the app's other processors see exactly the no-op object they would have
got (ids ``"no-op"``, nothing exported), that also tells the PBKV processor, and only it, when it
starts and finishes, under an id of its own (``trace_<32 hex>`` like a real trace). The
processor then maps runs, agent spans (handoffs included) and model calls to workflows, agents
and steps exactly as with tracing on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agents.tracing import TraceProvider
from agents.tracing.spans import NoOpSpan, Span
from agents.tracing.traces import NoOpTrace, Trace

if TYPE_CHECKING:
    from pbkv_sdk.integrations.openai_agents_processor import PBKVTracingProcessor

__all__ = ["ShadowProvider", "ShadowTrace", "ShadowSpan", "shadow_key"]


class ShadowTrace(NoOpTrace):
    """A no-op trace that reports its start and finish to one PBKV processor.

    Args:
        processor: the processor to tell.
        pbkv_id: the id the processor knows the trace by (a valid workflow id).
    """

    def __init__(self, processor: "PBKVTracingProcessor", pbkv_id: str):
        super().__init__()
        self.pbkv_id = pbkv_id
        self._pbkv = processor
        self._pbkv_state = 0  # 0 new, 1 started, 2 finished

    def start(self, mark_as_current: bool = False):
        if self._pbkv_state == 0:
            self._pbkv_state = 1
            self._pbkv.trace_started(self.pbkv_id)
        super().start(mark_as_current)

    def finish(self, reset_current: bool = False):
        if self._pbkv_state == 1:  # as TraceImpl: the processor hears of the end before the reset
            self._pbkv_state = 2
            self._pbkv.trace_ended(self.pbkv_id)
        super().finish(reset_current)


class ShadowSpan(NoOpSpan):
    """A no-op span that reports its start and finish (and its error) to one PBKV processor.

    Args:
        span_data: the span's data (``AgentSpanData`` names the agent).
        processor: the processor to tell.
        pbkv_id: the id the processor knows the span by.
        pbkv_parent: the processor's id of the parent span, or of the trace.
    """

    __slots__ = ("pbkv_id", "pbkv_parent", "_pbkv", "_pbkv_state", "_pbkv_error")

    def __init__(self, span_data: Any, processor: "PBKVTracingProcessor", pbkv_id: str, pbkv_parent: str):
        super().__init__(span_data)
        self.pbkv_id, self.pbkv_parent, self._pbkv = pbkv_id, pbkv_parent, processor
        self._pbkv_state = 0
        self._pbkv_error: Any = None

    def start(self, mark_as_current: bool = False):
        if self._pbkv_state == 0:
            self._pbkv_state = 1
            self._pbkv.span_started(self.pbkv_id, self.pbkv_parent, self.span_data)
        super().start(mark_as_current)

    def finish(self, reset_current: bool = False) -> None:
        if self._pbkv_state == 1:
            self._pbkv_state = 2
            self._pbkv.span_ended(self.pbkv_id, self.span_data, self._pbkv_error)
        super().finish(reset_current)

    def set_error(self, error: Any) -> None:
        # Kept for the processor only: ``error`` stays None, as for any no-op span.
        self._pbkv_error = error


def shadow_key(obj: Trace | Span[Any] | None) -> str | None:
    """The processor's id of a shadow trace or span; ``None`` for anything else."""
    return obj.pbkv_id if isinstance(obj, (ShadowTrace, ShadowSpan)) else None


class ShadowProvider(TraceProvider):
    """Wraps the Agents SDK's trace provider ``inner``: shadows instead of its no-op objects.

    Everything else (processors, the disabled flag, ids, flush, shutdown) is ``inner``'s.
    :attr:`processor` is the PBKV processor that shadows report to; ``None`` passes through.
    """

    def __init__(self, inner: TraceProvider, processor: "PBKVTracingProcessor | None" = None):
        self.inner = inner
        self.processor = processor

    # ------------------------------------------------------------ the two that shadow

    def create_trace(self, name: str, trace_id: str | None = None, group_id: str | None = None,
                     metadata: dict[str, Any] | None = None, disabled: bool = False, tracing: Any = None) -> Trace:
        """``inner``'s trace; a :class:`ShadowTrace` where that is a plain no-op trace."""
        trace = self.inner.create_trace(name, trace_id=trace_id, group_id=group_id, metadata=metadata,
                                        disabled=disabled, tracing=tracing)
        processor = self.processor
        if processor is None or type(trace) is not NoOpTrace:
            return trace
        return ShadowTrace(processor, trace_id or self.inner.gen_trace_id())

    def create_span(self, span_data: Any, span_id: str | None = None, parent: Trace | Span[Any] | None = None,
                    disabled: bool = False) -> Span[Any]:
        """``inner``'s span; a :class:`ShadowSpan` where that is a plain no-op span inside a shadow run."""
        span = self.inner.create_span(span_data, span_id=span_id, parent=parent, disabled=disabled)
        processor = self.processor
        if processor is None or type(span) is not NoOpSpan:
            return span
        if parent is not None:
            parent_key = shadow_key(parent)
        else:  # the rule of the default provider: the current span, else the current trace
            current = self.inner.get_current_span()
            parent_key = shadow_key(current) if current is not None else shadow_key(self.inner.get_current_trace())
        if parent_key is None:  # outside any run PBKV sees: stays a plain no-op span
            return span
        return ShadowSpan(span_data, processor, self.inner.gen_span_id(), parent_key)

    # ------------------------------------------------------------ delegated

    def register_processor(self, processor: Any) -> None:
        self.inner.register_processor(processor)

    def set_processors(self, processors: list[Any]) -> None:
        self.inner.set_processors(processors)

    def get_current_trace(self) -> Trace | None:
        return self.inner.get_current_trace()

    def get_current_span(self) -> Span[Any] | None:
        return self.inner.get_current_span()

    def set_disabled(self, disabled: bool) -> None:
        self.inner.set_disabled(disabled)

    def time_iso(self) -> str:
        return self.inner.time_iso()

    def gen_trace_id(self) -> str:
        return self.inner.gen_trace_id()

    def gen_span_id(self) -> str:
        return self.inner.gen_span_id()

    def gen_group_id(self) -> str:
        return self.inner.gen_group_id()

    def force_flush(self) -> None:
        self.inner.force_flush()

    def shutdown(self, *args: Any, **kwargs: Any) -> None:
        self.inner.shutdown(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:  # anything a newer provider adds
        return getattr(self.inner, name)
