"""AutoGen AgentChat integration: wrap a team so each run is one PBKV workflow.

Add to an existing app::

    from pbkv_sdk.integrations.autogen import instrument_team

    team = instrument_team(team, app="swe", server_url="http://127.0.0.1:30000")
    result = await team.run(task="...")          # or: async for msg in team.run_stream(task=...)

Mapping: workflow = one ``run``/``run_stream`` call; agent = the participant whose model client
makes the call (its ``name``); the speaker-selection calls of ``SelectorGroupChat`` are named
:data:`SELECTOR_AGENT`; step = the workflow's LLM requests in send order. The workflow ends when
the run yields its ``TaskResult`` (``completed``), raises (``failed``) or is cancelled / closed
early (``cancelled``).

How: each participant's model client (and the selector's) is replaced by a thin proxy that sets
the agent context variable around ``create``/``create_stream``; the OpenAI client's httpx
transport is wrapped so its requests are stamped (or pass ``http_client=pbkv_sdk.async_http_client()``
to ``OpenAIChatCompletionClient`` yourself). The run is driven in a copied context holding the
workflow, so the team's runtime tasks, created inside the run, inherit it. Instrument a team
before its first run (the selector's client is bound at first run).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
from typing import Any, AsyncGenerator, Mapping, Sequence

from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.base import TaskResult
from autogen_core.models import ChatCompletionClient

from pbkv_sdk.context import Workflow, resolve_app, resolve_trace_path, set_agent, set_workflow
from pbkv_sdk.stamping import wrap_client

log = logging.getLogger(__name__)

#: Agent name of SelectorGroupChat's speaker-selection LLM calls.
SELECTOR_AGENT = "speaker_selector"


def instrument_team(
    team: Any,
    app: str | None = None,
    server_url: str | None = None,
    trace_path: str | os.PathLike[str] | None = None,
    *,
    end_timeout_s: float | None = None,
    body_hints: bool | None = None,
) -> "InstrumentedTeam":
    """Return ``team`` wrapped so every run is a stamped, recorded, ended PBKV workflow.

    Args:
        team: an AgentChat team (``RoundRobinGroupChat``, ``SelectorGroupChat``, ``Swarm``, ...).
        app: application name (``$PBKV_APP`` wins when set).
        server_url: PBKV server base URL for end signals (default ``$PBKV_SERVER_URL``, else the
            LLM's origin).
        trace_path: JSONL trace to record into (default ``$PBKV_TRACE_PATH``; none if unset).
        end_timeout_s: time budget of each end signal, seconds.
        body_hints: also send ``custom_params.pbkv`` (see :func:`pbkv_sdk.http_client`).

    Returns:
        An :class:`InstrumentedTeam` with the team's ``run`` / ``run_stream`` signatures; other
        attributes are the team's own.
    """
    # AgentChat has no public accessor for a team's participants or an agent's model client, so
    # these private attributes are read defensively: if a release renames them, the run still
    # works (workflow ids, steps and ends still flow), its calls are just named "unknown", and
    # one warning says so.
    participants = getattr(team, "_participants", None)
    if participants is None:
        _warn_once(
            "participants",
            "PBKV: cannot list the participants of %s (no _participants attribute in this autogen-agentchat); "
            "its LLM calls are stamped with agent 'unknown'",
            type(team).__name__,
        )
        participants = []
    for participant in participants:
        if not hasattr(participant, "_model_client"):
            if isinstance(participant, AssistantAgent):  # other agent kinds make no LLM calls of their own
                _warn_once(
                    "agent-client",
                    "PBKV: cannot reach the model client of agent %r (no _model_client attribute); "
                    "its LLM calls are stamped with agent 'unknown'",
                    getattr(participant, "name", participant),
                )
            continue
        _name_model_client(participant, "_model_client", getattr(participant, "name", "unknown"), body_hints)
    if hasattr(team, "_model_client"):  # SelectorGroupChat (and MagenticOne's orchestrator client)
        if getattr(team, "_initialized", False):
            log.warning("PBKV: team already ran once; its speaker-selection calls stay unnamed")
        _name_model_client(team, "_model_client", SELECTOR_AGENT, body_hints)
    return InstrumentedTeam(team, app, server_url, trace_path, end_timeout_s)


class InstrumentedTeam:
    """A team whose runs are PBKV workflows; ``run``/``run_stream`` as the wrapped team's."""

    def __init__(self, team: Any, app: str | None, server_url: str | None, trace_path: Any, end_timeout_s: float | None):
        self.team = team
        self.app = app
        self.server_url = server_url
        self.trace_path = trace_path
        self.end_timeout_s = end_timeout_s
        #: The workflow of the current or last run (``None`` before the first run).
        self.last_workflow: Workflow | None = None

    async def run(self, *, task: Any = None, workflow_id: str | None = None, **kwargs: Any) -> TaskResult:
        """Run the team to completion as one workflow; returns its ``TaskResult``.

        Raises whatever the team raises (the workflow then ends ``failed``).
        """
        result: TaskResult | None = None
        async for item in self.run_stream(task=task, workflow_id=workflow_id, **kwargs):
            if isinstance(item, TaskResult):
                result = item
        if result is None:  # the team's own contract: run_stream ends with a TaskResult
            raise RuntimeError("team run ended without a TaskResult")
        return result

    async def run_stream(self, *, task: Any = None, workflow_id: str | None = None, **kwargs: Any) -> AsyncGenerator[Any, None]:
        """Yield the team's messages and final ``TaskResult`` as ``team.run_stream`` does."""
        wf = Workflow(
            resolve_app(self.app),
            workflow_id,
            server_url=self.server_url,
            trace_path=resolve_trace_path(self.trace_path),
            end_timeout_s=self.end_timeout_s,
        )
        self.last_workflow = wf
        ctx = contextvars.copy_context()
        ctx.run(set_workflow, wf)
        inner = self.team.run_stream(task=task, **kwargs)
        status = "failed"
        try:
            while True:
                try:
                    # Each step runs as a task created inside ctx, so it (and the runtime tasks the
                    # team starts in it) sees the workflow; the caller's context stays untouched.
                    item = await ctx.run(asyncio.ensure_future, inner.__anext__())
                except StopAsyncIteration:
                    break
                if isinstance(item, TaskResult):
                    status = "completed"
                yield item
        except (asyncio.CancelledError, GeneratorExit, KeyboardInterrupt):
            status = "cancelled"
            raise
        finally:
            try:
                await inner.aclose()
            finally:
                wf.end(status)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.team, name)


class NamedModelClient(ChatCompletionClient):
    """A ``ChatCompletionClient`` proxy that makes its calls as agent ``agent_name``.

    Every method delegates to ``inner``; ``create`` and ``create_stream`` set the agent context
    variable for the duration of the call, so the stamping transport names the right agent even
    when several agents share one model client.
    """

    def __init__(self, inner: ChatCompletionClient, agent_name: str):
        self.inner = inner
        self.agent_name = agent_name

    async def create(self, messages: Sequence[Any], **kwargs: Any) -> Any:
        """``inner.create`` with the agent context variable set to :attr:`agent_name`."""
        token = set_agent(self.agent_name)
        try:
            return await self.inner.create(messages, **kwargs)
        finally:
            _reset(token)

    async def create_stream(self, messages: Sequence[Any], **kwargs: Any) -> AsyncGenerator[Any, None]:
        """``inner.create_stream`` with the agent context variable set while it streams."""
        token = set_agent(self.agent_name)
        try:
            async for chunk in self.inner.create_stream(messages, **kwargs):
                yield chunk
        finally:
            _reset(token)

    async def close(self) -> None:
        await self.inner.close()

    def actual_usage(self) -> Any:
        return self.inner.actual_usage()

    def total_usage(self) -> Any:
        return self.inner.total_usage()

    def count_tokens(self, messages: Sequence[Any], **kwargs: Any) -> int:
        return self.inner.count_tokens(messages, **kwargs)

    def remaining_tokens(self, messages: Sequence[Any], **kwargs: Any) -> int:
        return self.inner.remaining_tokens(messages, **kwargs)

    @property
    def capabilities(self) -> Any:  # deprecated in AutoGen, still abstract
        return self.inner.capabilities

    @property
    def model_info(self) -> Mapping[str, Any]:
        return self.inner.model_info

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _name_model_client(holder: Any, attr: str, agent_name: str, body_hints: bool | None) -> None:
    client = getattr(holder, attr, None)
    if client is None:
        return
    if isinstance(client, NamedModelClient):
        client = client.inner
    _stamp_transport(client, body_hints)
    try:
        setattr(holder, attr, NamedModelClient(client, agent_name))
    except Exception as exc:  # a read-only attribute in some release: run on, unnamed
        _warn_once(
            "set-client",
            "PBKV: cannot wrap the model client of %r (%s); its LLM calls are stamped with agent 'unknown'",
            agent_name,
            exc,
        )


def _stamp_transport(client: Any, body_hints: bool | None) -> None:
    """Wrap the httpx client under an autogen-ext OpenAI model client (``client._client._client``)."""
    httpx_client = getattr(getattr(client, "_client", None), "_client", None)
    try:
        wrap_client(httpx_client, body_hints=body_hints)
    except TypeError:
        _warn_once(
            "transport",
            "PBKV: cannot reach the HTTP client of %s; pass http_client=pbkv_sdk.async_http_client() to it "
            "(until then its requests go out without hints)",
            type(client).__name__,
        )


_WARNED: set[str] = set()


def _warn_once(kind: str, msg: str, *args: Any) -> None:
    """One warning per kind of trouble per process (every team of an app would repeat it)."""
    if kind in _WARNED:
        log.debug(msg, *args)
    else:
        _WARNED.add(kind)
        log.warning(msg, *args)


def _reset(token: contextvars.Token) -> None:
    try:
        token.var.reset(token)
    except ValueError:  # a generator finished from another context: nothing of ours to restore there
        pass
