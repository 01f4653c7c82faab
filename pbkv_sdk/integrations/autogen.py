"""AutoGen AgentChat integration: each run of a wrapped team is one PBKV workflow.

Add to an existing app (the model clients need no ``http_client=``)::

    from pbkv_sdk.integrations.autogen import instrument, instrument_team

    instrument(app="swe", server_url="http://127.0.0.1:30000")   # once: options and stamping
    team = instrument_team(team)                                 # each team, before its first run
    result = await team.run(task="...")          # or: async for msg in team.run_stream(task=...)

AgentChat has no process-wide hook to attach to (no callback registry, no tracing processor), so
unlike the other integrations a team is wrapped one by one: :func:`instrument_team` is the
AutoGen-only step. It is also the one-line form: ``instrument_team(team, app=..., server_url=...)``
instruments the process first if nothing has (as before the shared instrumentor existed), and its
own arguments win over :func:`instrument`'s for that team. After :func:`uninstrument`, wrapped
teams run as the team's own (no workflow, no hints); :func:`instrument` again turns them back on.

The mapping (workflow, agent, step), the run control (completed, failed, cancelled, paused on a
handoff) and how it works: :mod:`pbkv_sdk.integrations.autogen_team`.
"""

from __future__ import annotations

from typing import Any

from pbkv_sdk.integrations.base import Instrumentor, Options

__all__ = ["AutoGenInstrumentor", "INSTRUMENTOR", "instrument", "uninstrument", "instrument_team", "InstrumentedTeam",
           "NamedModelClient", "SELECTOR_AGENT"]


class AutoGenInstrumentor(Instrumentor):
    """The AutoGen instrumentor; its handle is the :class:`Options` that teams are wrapped with."""

    name = "autogen"
    extra = "autogen"
    dependencies = (("autogen-agentchat>=0.4", "autogen_agentchat"), ("autogen-core>=0.4", "autogen_core"))
    implementation = "pbkv_sdk.integrations.autogen_team"

    def _install(self, options: Options, **extra: Any) -> Any:
        return options  # nothing process-wide beyond the stamping: teams are wrapped by instrument_team

    def _uninstall(self, handle: Any) -> None:
        """Nothing to remove: wrapped teams check :attr:`is_instrumented` at each run."""


INSTRUMENTOR = AutoGenInstrumentor()
instrument, uninstrument, __getattr__ = INSTRUMENTOR.exports()  # __getattr__: the framework-facing names
_WARNED = INSTRUMENTOR.warn


def instrument_team(team: Any, *args: Any, **kwargs: Any) -> Any:
    """Return ``team`` wrapped so every run is a stamped, recorded, ended PBKV workflow.

    Args:
        team: an AgentChat team (``RoundRobinGroupChat``, ``SelectorGroupChat``, ``Swarm``, ...);
            an already wrapped one is re-wrapped, not wrapped twice.
        args, kwargs: the fields of :class:`~pbkv_sdk.integrations.base.Options` for this team
            (``app``, ``server_url``, ``trace_path``, ``end_timeout_s``, ``body_hints``,
            ``kv_hints``); each one not given is :func:`instrument`'s (else the environment's default).

    Returns:
        An :class:`~pbkv_sdk.integrations.autogen_team.InstrumentedTeam` with the team's ``run`` /
        ``run_stream`` / ``reset`` signatures (other attributes are the team's own); ``team``
        itself, unwrapped, if AutoGen is missing (one warning: the app runs, unstamped).
    """
    own = Options(*args, **kwargs)
    with INSTRUMENTOR._lock:
        # Not instrumented yet: instrument with no defaults, so this team's options stay its own.
        defaults = INSTRUMENTOR.instrument(options=INSTRUMENTOR.options or Options())
    if defaults is None:  # the framework is missing (warned once)
        return team
    return INSTRUMENTOR.implementation_module().wrap_team(team, own.over(defaults), INSTRUMENTOR)
