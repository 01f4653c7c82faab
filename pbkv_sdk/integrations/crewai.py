"""CrewAI integration: each crew kickoff is one PBKV workflow, each agent role one PBKV agent.

Add to an existing app (the only line; ``LLM(...)`` needs no ``interceptor=``)::

    from pbkv_sdk.integrations.crewai import instrument

    instrument(app="finance", server_url="http://127.0.0.1:30000")

``instrument(...)`` registers PBKV's CrewAI hooks and kickoff listener for every crew of the
process and returns the :class:`~pbkv_sdk.integrations.crewai_hooks.CrewAIInstrumentation`
(its ``interceptor`` is for apps that pass ``LLM(interceptor=...)``; its ``uninstrument()`` is
this module's). The mapping and the CrewAI APIs used: :mod:`pbkv_sdk.integrations.crewai_hooks`.
"""

from __future__ import annotations

from typing import Any

from pbkv_sdk.integrations.base import Instrumentor, Options

__all__ = ["CrewAIInstrumentor", "INSTRUMENTOR", "instrument", "uninstrument", "CrewAIInstrumentation",
           "PBKVInterceptor", "WORKFLOW_ID_INPUT_KEY"]


class CrewAIInstrumentor(Instrumentor):
    """The CrewAI instrumentor; its handle is the installed ``CrewAIInstrumentation``."""

    name = "crewai"
    extra = "crewai"
    dependencies = (("crewai>=0.100", "crewai"),)
    implementation = "pbkv_sdk.integrations.crewai_hooks"

    def _install(self, options: Options, **extra: Any) -> Any:
        inst = self.implementation_module().CrewAIInstrumentation(options, self)
        inst.install()
        return inst

    def _uninstall(self, handle: Any) -> None:
        handle.remove()


INSTRUMENTOR = CrewAIInstrumentor()
instrument, uninstrument, __getattr__ = INSTRUMENTOR.exports()  # __getattr__: the framework-facing names
_WARNED = INSTRUMENTOR.warn
