"""OpenTelemetry integration: apps that already emit GenAI or OpenInference agent spans get hints.

For frameworks without a native PBKV integration that trace themselves with OpenTelemetry
(PydanticAI, Google ADK, LlamaIndex workflows, Microsoft Agent Framework, or an app's own
spans). Add to the app, after its tracer provider is set up (the only line)::

    from pbkv_sdk.integrations.otel import instrument

    instrument(app="research", server_url="http://127.0.0.1:30000")

``instrument(..., tracer_provider=None)`` adds a
:class:`~pbkv_sdk.integrations.otel_processor.PBKVSpanProcessor` to ``tracer_provider`` (default:
the global one) and returns it. A provider without ``add_span_processor`` (no SDK set up yet) gets
nothing: one warning says to pass ``tracer_provider=`` or set the provider first. The SDK's
``TracerProvider`` cannot remove a processor, so ``uninstrument()`` switches it off. Which spans
become workflows and agents: :mod:`pbkv_sdk.integrations.otel_processor`.
"""

from __future__ import annotations

import os
from typing import Any

from pbkv_sdk.integrations.base import Instrumentor, Options

__all__ = ["OTelInstrumentor", "INSTRUMENTOR", "instrument", "uninstrument", "PBKVSpanProcessor"]


class OTelInstrumentor(Instrumentor):
    """The OpenTelemetry instrumentor; its handle is the installed span processor."""

    name = "otel"
    extra = "otel"
    dependencies = (("opentelemetry-sdk>=1.30", "opentelemetry.sdk"),
                    ("openinference-semantic-conventions>=0.1.20", "openinference.semconv"))
    extra_options = ("tracer_provider",)
    implementation = "pbkv_sdk.integrations.otel_processor"

    def _install(self, options: Options, tracer_provider: Any = None) -> Any:
        from opentelemetry import trace as otel_trace

        processor = self.implementation_module().PBKVSpanProcessor(options=options)
        provider = tracer_provider if tracer_provider is not None else otel_trace.get_tracer_provider()
        if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
            self.warn("disabled", "PBKV: OTEL_SDK_DISABLED=true switches OpenTelemetry spans off, so the "
                      "OpenTelemetry integration sees no agent spans and sends no hints")
        if hasattr(provider, "add_span_processor"):
            provider.add_span_processor(processor)
        else:
            self.warn("provider", "PBKV: the tracer provider %s takes no span processors (is the OpenTelemetry SDK "
                      "set up?); call instrument(tracer_provider=...) with the app's SDK TracerProvider",
                      type(provider).__name__)
        processor.activate()
        return processor

    def _uninstall(self, processor: Any) -> None:
        processor.deactivate()  # the SDK's TracerProvider cannot remove a processor


INSTRUMENTOR = OTelInstrumentor()
instrument, uninstrument, __getattr__ = INSTRUMENTOR.exports()  # __getattr__: the framework-facing names
_WARNED = INSTRUMENTOR.warn
