"""OpenAI Agents SDK integration: a tracing processor that makes each ``Runner.run`` a PBKV workflow.

Add to an existing app (the only line)::

    from pbkv_sdk.integrations.openai_agents import instrument

    instrument(app="support", server_url="http://127.0.0.1:30000")

``instrument(...)`` adds a :class:`~pbkv_sdk.integrations.openai_agents_processor.PBKVTracingProcessor`
with ``add_trace_processor`` (the app's other processors stay) and returns it; it also wraps the
installed trace provider in a :class:`~pbkv_sdk.integrations.openai_agents_untraced.ShadowProvider`
so that runs with tracing disabled are stamped too. The Agents SDK cannot remove a processor, so
``uninstrument()`` switches it off and unwraps the trace provider (one the app installed since
then is left alone). The mapping: :mod:`pbkv_sdk.integrations.openai_agents_processor`.
"""

from __future__ import annotations

from typing import Any

from pbkv_sdk.integrations.base import Instrumentor, Options

__all__ = ["OpenAIAgentsInstrumentor", "INSTRUMENTOR", "instrument", "uninstrument", "PBKVTracingProcessor",
           "UNSEEN_RUN_WARNING"]


class OpenAIAgentsInstrumentor(Instrumentor):
    """The OpenAI Agents SDK instrumentor; its handle is the installed tracing processor."""

    name = "openai-agents"
    extra = "openai-agents"
    dependencies = (("openai-agents>=0.20", "agents"),)
    implementation = "pbkv_sdk.integrations.openai_agents_processor"

    def _install(self, options: Options, **extra: Any) -> Any:
        from agents.tracing import add_trace_processor, get_trace_provider, set_trace_provider

        from pbkv_sdk.integrations.openai_agents_untraced import ShadowProvider

        processor = self.implementation_module().PBKVTracingProcessor(options=options)
        processor.warn = self.warn
        add_trace_processor(processor)
        provider = get_trace_provider()
        if isinstance(provider, ShadowProvider):
            provider.processor = processor
        else:
            set_trace_provider(ShadowProvider(provider, processor))
        processor.activate()
        return processor

    def _uninstall(self, processor: Any) -> None:
        from agents.tracing import get_trace_provider, set_trace_provider

        from pbkv_sdk.integrations.openai_agents_untraced import ShadowProvider

        processor.deactivate()  # the Agents SDK has no public way to remove a processor
        provider = get_trace_provider()
        if isinstance(provider, ShadowProvider):  # one the app installed since then is left alone
            provider.processor = None
            set_trace_provider(provider.inner)


INSTRUMENTOR = OpenAIAgentsInstrumentor()
instrument, uninstrument, __getattr__ = INSTRUMENTOR.exports()  # __getattr__: the framework-facing names
_WARNED = INSTRUMENTOR.warn
