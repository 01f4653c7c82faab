"""LangChain / LangGraph integration: one callback handler, attached to every run by one call.

Add to an existing app, once, before it runs (nothing else changes: ``ChatOpenAI(...)`` needs no
``http_client=``, because :mod:`pbkv_sdk.autopatch` makes httpx's default transports stamp
while instrumented)::

    from pbkv_sdk.integrations.langchain import instrument

    instrument(app="hover", server_url="http://127.0.0.1:30000")

``instrument(...)`` returns the :class:`~pbkv_sdk.integrations.langchain_handler.PBKVCallbackHandler`
(the mapping of runs to workflows, agents and steps, and the run control, are described there).
It is attached with LangChain's configure hook through a context variable whose *default* is the
handler, so runs started from any thread or task get it without ``callbacks=``. If this
langchain-core has no configure hook, one warning is logged and the handler is returned
unattached: pass it as ``config={"callbacks": [handler]}``.

``uninstrument()``: LangChain offers no public way to unregister a configure hook, so it edits
LangChain's private hook list; should that list be gone in some release, the handler stays
attached but is switched off (runs started afterwards are not workflows) and one warning is logged.
"""

from __future__ import annotations

import contextvars
from typing import Any

from pbkv_sdk.integrations.base import Instrumentor, Options

__all__ = ["LangChainInstrumentor", "INSTRUMENTOR", "instrument", "uninstrument", "PBKVCallbackHandler",
           "WORKFLOW_ID_METADATA_KEY", "DEFAULT_AGENT", "MAX_PAUSED"]


class LangChainInstrumentor(Instrumentor):
    """The LangChain / LangGraph instrumentor; its handle is the installed callback handler."""

    name = "langchain"
    extra = "langgraph"
    dependencies = (("langchain-core>=0.3", "langchain_core"),)
    implementation = "pbkv_sdk.integrations.langchain_handler"

    def _install(self, options: Options, **extra: Any) -> Any:
        handler = self.implementation_module().PBKVCallbackHandler(options=options)
        try:
            from langchain_core.tracers.context import register_configure_hook
        except ImportError as exc:  # fail open: the app runs, unstamped
            self.warn("hook", "PBKV: cannot attach the callback to every run (%s); pass it as "
                      "config={'callbacks': [handler]}", exc)
            return handler
        var: contextvars.ContextVar[Any] = contextvars.ContextVar("pbkv_langchain_handler", default=handler)
        register_configure_hook(var, inheritable=True)
        handler.hook_var = var  # what _uninstall removes from LangChain's hook list
        return handler

    def _uninstall(self, handler: Any) -> None:
        from langchain_core.tracers import context as lc_context

        var = getattr(handler, "hook_var", None)
        if var is None:  # never attached
            return
        hooks = getattr(lc_context, "_configure_hooks", None)
        if isinstance(hooks, list):
            hooks[:] = [hook for hook in hooks if hook[0] is not var]
            return
        handler.enabled = False
        self.warn("uninstrument", "PBKV: cannot detach the LangChain callback in this langchain-core; it is switched "
                  "off instead")


INSTRUMENTOR = LangChainInstrumentor()
instrument, uninstrument, __getattr__ = INSTRUMENTOR.exports()  # __getattr__: the framework-facing names
_WARNED = INSTRUMENTOR.warn
