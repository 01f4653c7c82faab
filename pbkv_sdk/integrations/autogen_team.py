"""AutoGen AgentChat: the team wrapper and model-client proxy behind
:func:`pbkv_sdk.integrations.autogen.instrument_team` (this module imports AutoGen; the
instrumentor there checks for it first).

Mapping: workflow = one ``run``/``run_stream`` call; agent = the participant whose model client
makes the call (its ``name``); the speaker-selection calls of ``SelectorGroupChat`` (every
attempt, retries included) are named :data:`SELECTOR_AGENT` and flagged ``internal`` in the trace
(predictor training skips them); step = the workflow's LLM requests in send order.

Run control (each path is one workflow id and at most one end):

* the run yields its ``TaskResult`` (a termination condition or ``max_turns`` stopped it):
  ``completed``; it raises: ``failed``; its task is cancelled, its ``CancellationToken`` fires,
  or the caller closes ``run_stream`` early: ``cancelled``;
* the run stops because an agent handed off to someone outside the team (``HandoffTermination``,
  human in the loop): the workflow is *paused*; the next run of the same team without a
  ``reset()`` in between continues it (same id, steps go on); ``reset()`` ends it ``cancelled``;
* ``reset()`` then ``run`` again: a new workflow; a run without reset after a completed one is a
  new workflow too (the team's history makes its prompts share the cached prefix anyway).

How: each participant's model client (and the selector's) is replaced by a thin proxy that sets
the agent context variable around ``create``/``create_stream``; the model clients' HTTP requests
are stamped by the process-wide transport stamping of :mod:`pbkv_sdk.autopatch`. The run is
driven in a copied context holding the workflow, so the team's runtime tasks, created inside the
run, inherit it. Instrument a team before its first run (the selector's client is bound at first
run).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from typing import Any, AsyncGenerator, Mapping, Sequence

from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.base import TaskResult
from autogen_agentchat.messages import HandoffMessage
from autogen_core.models import ChatCompletionClient

from pbkv_sdk.context import Workflow, current_workflow, set_agent, set_internal, set_workflow
from pbkv_sdk.integrations.base import CANCELLED, Instrumentor, Options
from pbkv_sdk.once import WarnOnce
from pbkv_sdk.stamping import wrap_client

log = logging.getLogger(__name__)

#: Agent name of SelectorGroupChat's speaker-selection LLM calls.
SELECTOR_AGENT = "speaker_selector"


def wrap_team(team: Any, options: Options, instrumentor: Instrumentor) -> "InstrumentedTeam":
    """``team`` wrapped so every run is a PBKV workflow made with ``options``, while
    ``instrumentor`` is instrumented (its warn-once reports trouble). See
    :func:`pbkv_sdk.integrations.autogen.instrument_team`."""
    if isinstance(team, InstrumentedTeam):  # wrapping twice would make two workflows per run
        team = team.team
    _warn_once = instrumentor.warn
    body_hints = options.body_hints
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
        _name_model_client(participant, "_model_client", getattr(participant, "name", "unknown"), body_hints, _warn_once)
    if hasattr(team, "_model_client"):  # SelectorGroupChat (and MagenticOne's orchestrator client)
        if getattr(team, "_initialized", False):
            log.warning("PBKV: team already ran once; its speaker-selection calls stay unnamed")
        _name_model_client(team, "_model_client", SELECTOR_AGENT, body_hints, _warn_once, internal=True)
    return InstrumentedTeam(team, options, instrumentor)


class InstrumentedTeam:
    """A team whose runs are PBKV workflows; ``run``/``run_stream`` as the wrapped team's.

    While ``instrumentor`` is not instrumented (after ``uninstrument()``), runs are the team's own:
    no workflow, no hints, no end.
    """

    def __init__(self, team: Any, options: Options, instrumentor: Instrumentor):
        self.team = team
        #: What this team's workflows are made with.
        self.options = options
        self.instrumentor = instrumentor
        #: The workflow of the current or last run (``None`` before the first run).
        self.last_workflow: Workflow | None = None
        #: The workflow paused by a handoff out of the team, continued by the next run.
        self.paused_workflow: Workflow | None = None

    async def reset(self) -> None:
        """``team.reset()``; a paused workflow will never continue, so it ends ``cancelled``."""
        paused, self.paused_workflow = self.paused_workflow, None
        try:
            await self.team.reset()
        finally:
            if paused is not None:
                paused.end("cancelled")

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
        if not self.instrumentor.is_instrumented:  # uninstrumented: the team's own run, untouched
            async for item in self.team.run_stream(task=task, **kwargs):
                yield item
            return
        wf, self.paused_workflow = self.paused_workflow, None
        if wf is None:  # a malformed user-chosen id is replaced, never raised (the SDK fails open)
            wf = self.options.workflow(workflow_id)
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
                    status = "paused" if self._handed_off(item) else "completed"
                yield item
        except CANCELLED:
            status = "cancelled"
            raise
        finally:
            try:
                await inner.aclose()
            finally:
                if status == "paused":
                    self.paused_workflow = wf  # no end: the next run continues it
                else:
                    wf.end(status)

    def _handed_off(self, result: TaskResult) -> bool:
        """The run stopped on a handoff to someone outside the team (HandoffTermination)."""
        last = result.messages[-1] if result.messages else None
        if not isinstance(last, HandoffMessage):
            return False
        names = {getattr(p, "name", None) for p in getattr(self.team, "_participants", None) or []}
        return last.target not in names

    def __getattr__(self, name: str) -> Any:
        return getattr(self.team, name)


class NamedModelClient(ChatCompletionClient):
    """A ``ChatCompletionClient`` proxy that makes its calls as agent ``agent_name``.

    Every method delegates to ``inner``; ``create`` and ``create_stream`` set the agent context
    variable for the duration of the call, so the stamping transport names the right agent even
    when several agents share one model client.
    """

    def __init__(self, inner: ChatCompletionClient, agent_name: str, internal: bool = False):
        self.inner = inner
        self.agent_name = agent_name
        #: Calls are the framework's own (speaker selection): flagged ``internal`` in the trace.
        self.internal = internal
        # Only clients that send HTTP requests can be checked for missing hints (not replay clients).
        self._sends_http = _sends_http(inner)

    async def create(self, messages: Sequence[Any], **kwargs: Any) -> Any:
        """``inner.create`` with the agent context variable set to :attr:`agent_name`."""
        tokens = (set_agent(self.agent_name), set_internal(self.internal))
        try:
            result = await self.inner.create(messages, **kwargs)
        finally:
            _reset(*tokens)
        self._expect()
        return result

    async def create_stream(self, messages: Sequence[Any], **kwargs: Any) -> AsyncGenerator[Any, None]:
        """``inner.create_stream`` with the agent context variable set while it streams."""
        tokens = (set_agent(self.agent_name), set_internal(self.internal))
        try:
            async for chunk in self.inner.create_stream(messages, **kwargs):
                yield chunk
        finally:
            _reset(*tokens)
        self._expect()

    def _expect(self) -> None:
        wf = current_workflow()
        if wf is not None and self._sends_http:
            wf.expect_llm_call()

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


def _name_model_client(holder: Any, attr: str, agent_name: str, body_hints: bool | None, warn_once: WarnOnce,
                       internal: bool = False) -> None:
    client = getattr(holder, attr, None)
    if client is None:
        return
    if isinstance(client, NamedModelClient):
        client = client.inner
    _stamp_transport(client, body_hints)
    try:
        setattr(holder, attr, NamedModelClient(client, agent_name, internal))
    except Exception as exc:  # a read-only attribute in some release: run on, unnamed
        warn_once(
            "set-client",
            "PBKV: cannot wrap the model client of %r (%s); its LLM calls are stamped with agent 'unknown'",
            agent_name,
            exc,
        )


def _stamp_transport(client: Any, body_hints: bool | None) -> None:
    """Wrap the httpx client under an autogen-ext OpenAI model client (``client._client._client``).

    The process-wide stamping covers httpx's default transport; this also covers a client the
    user built with a custom transport. Clients without an httpx client inside (replay, other
    SDKs) are left alone: if they do send unstamped requests, the workflow's end says so.
    """
    httpx_client = getattr(getattr(client, "_client", None), "_client", None)
    try:
        wrap_client(httpx_client, body_hints=body_hints)
    except TypeError:
        log.debug("PBKV: no httpx client inside %s", type(client).__name__)


def _sends_http(client: Any) -> bool:
    """Whether ``client`` is one of autogen-ext's OpenAI-SDK clients (each call is an HTTP request)."""
    try:
        from autogen_ext.models.openai import BaseOpenAIChatCompletionClient
    except ImportError:  # pragma: no cover - autogen-ext[openai] comes with the extra
        return False
    return isinstance(client, BaseOpenAIChatCompletionClient)


def _reset(*tokens: contextvars.Token) -> None:
    for token in reversed(tokens):
        try:
            token.var.reset(token)
        except ValueError:  # a generator finished from another context: nothing of ours to restore there
            pass
