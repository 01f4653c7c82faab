"""What the HTTP routes do, without HTTP: validate, read hints, tokenize, answer, drive the engine.

:class:`PbkvService` ties together the sim engine driver (whose engine keeps the workflow table), the scenario that
writes replies, the metrics and the optional server-side trace. Routes in
:mod:`pbkv_server.http.app` only translate between HTTP and these calls.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import logging
import random
import time
import uuid
from typing import TYPE_CHECKING, Any, Callable, Mapping

from pbkv_contract.hints import (
    END_STATUSES,
    HEADER_HINT_TOKEN,
    HintError,
    Hints,
    name_problem,
    parse_hints,
    parse_kv_hints,
    validate_workflow_id,
)
from pbkv_contract.blocks import canonical_prompt, prefix_hashes
from pbkv_contract.features import request_features
from pbkv_server.engine import EngineConfig, EngineRequest, Workflow, WorkflowTable
from pbkv_server.http.config import ServerConfig
from pbkv_server.http.driver import SimDriver, Submission
from pbkv_server.http.errors import ApiError
from pbkv_server.http.exchange import Completion, Prepared, request_extras, request_max_tokens, request_messages
from pbkv_server.http.kv_hints import KvPlan, plan_kv_hints
from pbkv_server.http.metrics import ServerMetrics
from pbkv_server.http.served_trace import ServedTrace, trace_workflow_id
from pbkv_server.scenarios.base import Scenario, ScenarioRequest, get_scenario, load_scenario
from pbkv_server.scenarios.tool_calls import ToolCall
from pbkv_server.scenarios.default import DefaultScenario, answers_selection, selection_candidates
from pbkv_server.http.validation import validate_request
from pbkv_server.scenarios.tokenizer import TokenBudgetExceeded, block_tokens, count_tokens, truncate_to_tokens

if TYPE_CHECKING:
    from pbkv_server.engine.policies import PolicyInfo

__all__ = ["PbkvService", "engine_config_from", "HEADER_HINT_TOKEN"]

log = logging.getLogger(__name__)

# Distinct malformed-hint reasons logged at warning level (later repeats only counted).
_LOGGED_REASONS_MAX = 64


def engine_config_from(config: ServerConfig, info: PolicyInfo | None = None) -> EngineConfig:
    """The :class:`EngineConfig` a server config describes (profile, policy, predictor, sizes).

    Args:
        config: the server's settings.
        info: ``config.policy``'s registry entry when the caller has looked it up already
            (:class:`PbkvService` does, once, and passes it here); ``None`` looks it up.

    Raises:
        ValueError: unknown profile, policy or predictor spec, or a policy the server cannot run.
    """
    from pbkv_server.engine.policies import SERVER, available_policies, policy_info
    from pbkv_server.predictors.per_app import build_predictor
    from pbkv_server.hardware.profiles import DEFAULT_PROFILE, get_profile

    if info is None:
        info = server_policy_info(config.policy)
    if SERVER not in info.backends:
        why = "it needs the whole future and exists in the simulator only" if info.offline else "not a server policy"
        raise ValueError(f"policy {config.policy!r}: {why}; the server runs {', '.join(available_policies(SERVER))}")
    try:
        profile = get_profile(config.profile or DEFAULT_PROFILE)
    except KeyError as exc:  # get_profile's message lists the known names
        raise ValueError(exc.args[0]) from None
    return EngineConfig(
        policy=config.policy,
        profile=profile,
        device_tokens=config.device_tokens,
        host_tokens=config.host_tokens,
        horizon=config.horizon,
        gamma=config.gamma,
        rho=config.rho,
        predictor=build_predictor(config.predictors, config.horizon),
        max_batch=config.max_batch,
        page_size=config.page_size,
        # workflow lifecycle on the wall clock: a client that crashed is idle in real seconds
        idle_retire_s=config.idle_retire_s,
        lifecycle_clock=time.monotonic,
        max_active_workflows=config.max_active_workflows,
        max_ended_ids=config.max_ended_ids,
        lru_guard=config.lru_guard,
        prefill_cost=config.prefill_cost,
        engine_model=config.engine_model,
    )


class PbkvService:
    """The server's state and request logic (event-loop thread only).

    Args:
        config: server settings.
        make_engine_config: override of :func:`engine_config_from` (tests, simulator parity).

    Raises:
        ValueError: invalid policy, profile, predictor or scenario spec.
    """

    def __init__(self, config: ServerConfig, make_engine_config: Callable[[], EngineConfig] | None = None):
        self.config = config
        # the server's one registry lookup of its policy (raises for an unknown name, listing the
        # ones the server runs); the engine config (at start and at every reset) and the request
        # path reuse it
        info = server_policy_info(config.policy)
        self.driver = SimDriver(make_engine_config or (lambda: engine_config_from(config, info)), pace=config.pace,
                                on_workflow_end=self._workflow_ended)
        self.fallback_scenario: Scenario = load_scenario(config.scenario) if config.scenario else DefaultScenario()
        self._scenarios: dict[str, Scenario] = {}
        #: the predictor of each app (``app=spec``, ``*`` for the rest), as /health and /metrics name it
        self.predictor_label = ",".join(f"{a}={s}" for a, s in config.predictors.items()) or "none"
        self.metrics = ServerMetrics(
            self.driver.stats,
            {
                "engine": config.engine,
                "policy": config.policy,
                "profile": self.driver.engine_config.profile.name,
                "predictor": self.predictor_label,
                "device_tokens": str(self.driver.device_capacity),
            },
        )
        self.trace = ServedTrace(config.trace_out) if config.trace_out else None
        self._logged_reasons: set[str] = set()
        self._id_base = uuid.uuid4().hex[:12]
        self._ids = itertools.count()
        self._sweeper: asyncio.Task[None] | None = None
        # a speculative-prefill policy: every chat request carries its next-turn prefix
        self._speculative_prefill = info.speculative_prefill

    # ------------------------------------------------------------------ lifecycle

    async def startup(self) -> None:
        """Start the engine task and the idle-workflow sweeper."""
        await self.driver.start()
        if self.config.idle_retire_s is not None:
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep(), name="pbkv-idle-sweeper")

    async def shutdown(self) -> None:
        """Stop the tasks and close the trace."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            try:
                await self._sweeper
            except asyncio.CancelledError:
                pass
        await self.driver.stop()
        if self.trace is not None:
            self.trace.close()

    # ------------------------------------------------------------------ LLM requests

    def prepare(self, body: Any, headers: Mapping[str, str], kind: str) -> Prepared:
        """Validate an OpenAI chat/completions body and build the engine request and reply.

        Order matters for cost: the body is validated first (field types and ranges, as OpenAI
        does), then the prompt is tokenized under a budget (``max_prompt_tokens``, else the device
        capacity minus one output token), so an over-long prompt is refused after tokenizing at
        most about 7 characters per budget token, before hashing or writing a reply.

        Raises:
            ApiError: 400 for a body of the wrong shape or value
                (:func:`pbkv_server.http.validation.validate_request`), or a prompt beyond the
                budget or the device capacity (``context_length_exceeded``).
        """
        arrival = time.monotonic()
        request = validate_request(body, kind)
        messages = request_messages(body, request, kind)
        max_tokens = request_max_tokens(request, kind)
        stream = bool(request.stream)
        include_usage = bool(stream and request.stream_options and request.stream_options.include_usage)

        hints, reason = parse_hints(headers, body)  # names checked there (contract rule)
        hint_status = "ok" if hints else "anonymous"
        if reason is not None:
            hint_status = "ignored"
            self._malformed(reason, "request served anonymously")
        extras = request_extras(body)
        for problem in extras.problems:
            # a bad cache hint (priority, TTL, session id) leaves the workflow hints in force
            self._malformed(problem, "the workflow hints still apply" if hints else "request served anonymously")
        if extras.problems and hints is None:
            hint_status = "ignored"  # what the client sent (a bad session_id, say) was not taken
        if hints is None and reason is None and extras.session_id is not None:
            # an app that uses SGLang sessions gets PBKV's lifecycle without the SDK: the session
            # is the workflow, ``/close_session`` its end signal
            hints, hint_status = self.workflows.session_hints(extras.session_id), "session"
        kv, kv_malformed = self._kv_plan(body, hints)
        if hints is None and (kv_malformed or kv is not None and not kv.taken):
            hint_status = "ignored"  # an envelope of which nothing was taken (malformed, unknown actions)

        prompt: Any = messages if kind == "chat" else messages[0]["content"]
        prompt_param = "messages" if kind == "chat" else "prompt"
        capacity = self.driver.device_capacity
        budget = min(self.config.max_prompt_tokens or capacity, capacity - 1)
        try:
            tokens = block_tokens(prompt, self.config.block_chars, budget=budget)
        except TokenBudgetExceeded as exc:
            raise ApiError(
                400,
                f"prompt has at least {exc.at_least} tokens, over the limit of {budget} tokens "
                f"(the device KV capacity of {capacity} tokens less one output token, or --max-prompt-tokens)",
                "context_length_exceeded",
                prompt_param,
            ) from None
        keys = prefix_hashes(prompt, self.config.block_chars)
        text, tool_calls, completion_tokens = self._reply(hints, messages, max_tokens, body, prompt, kind)
        # The engine emits the first token after prefill, so even an empty reply costs one token.
        output_tokens = max(1, completion_tokens)
        prompt_tokens = sum(tokens)
        if prompt_tokens + output_tokens > self.driver.device_capacity:
            raise ApiError(
                400,
                f"prompt of {prompt_tokens} tokens plus {output_tokens} output tokens exceeds the device "
                f"KV capacity of {self.driver.device_capacity} tokens",
                "context_length_exceeded",
                prompt_param,
            )
        prefix = "chatcmpl-" if kind == "chat" else "cmpl-"
        # A per-server random part plus a counter: unique without an os.urandom call per request.
        request_id = f"{prefix}{self._id_base}{next(self._ids):x}"
        speculative = None
        if kind == "chat" and (extras.speculative_prefill or self._speculative_prefill):
            # Dynamo's frontend: the conversation plus this reply, as the next turn will start
            answer = {"role": "assistant", "content": None, "tool_calls": tool_calls} if tool_calls else {
                "role": "assistant", "content": text}
            turn = [*messages, answer]
            speculative = (prefix_hashes(turn, self.config.block_chars), block_tokens(turn, self.config.block_chars))
        engine_request = EngineRequest(
            request_id=request_id,
            blocks=keys,
            block_tokens=tokens,
            output_tokens=output_tokens,
            hints=hints,
            features=tuple(request_features(prompt)),
            session_id=extras.session_id,
            # a retain pins as the request's own priority / TTL would; those the request sent win
            priority=extras.priority if extras.priority is not None or kv is None else kv.priority,
            cache_ttl_s=extras.cache_ttl_s if extras.cache_ttl_s is not None or kv is None else kv.cache_ttl_s,
            last_step=extras.last_step,
            speculative_next=speculative,
        )
        finish = "length" if max_tokens is not None and completion_tokens >= max_tokens else "stop"
        if tool_calls and finish == "stop":
            finish = "tool_calls"  # a call cut by max_tokens ends with "length", as OpenAI's does
        model = body.get("model") if isinstance(body.get("model"), str) else self.config.model_name
        return Prepared(kind, request_id, model, stream, include_usage, hints, hint_status,
                        engine_request, text, completion_tokens, finish, arrival, self.config.block_chars,
                        tool_calls=tool_calls, kv_actions=tuple(kv.now) if kv else (),
                        kv_end_after=kv.end_after if kv else None)

    def submit(self, prep: Prepared) -> Submission:
        """Queue the prepared request in the engine.

        Raises:
            ApiError: 400 when the engine rejects the request (its message says why).
        """
        for kind, target, keep in prep.kv_actions:  # before the request is queued: it may use what a fetch loads
            self._kv_apply(kind, target, keep)
        try:
            sub = self.driver.submit(prep.engine_request)
        except ValueError as exc:
            raise ApiError(400, str(exc), "invalid_request") from None
        if prep.hints is not None:
            wf = self.workflows.get(prep.hints.workflow_id)
            prep.incarnation = wf.incarnation if wf is not None else 1
        return sub

    async def first_token(self, sub: Submission) -> float:
        """Wait for the first token; returns the simulated TTFT in seconds."""
        event = await sub.first_token
        return event.time - sub.submit_time

    async def finish(self, prep: Prepared, sub: Submission) -> Completion:
        """Wait until the request finishes; record metrics and the trace line.

        Raises:
            EngineFailure: the engine failed while serving the request.
        """
        first = await sub.first_token
        done = await sub.finished
        host = int(getattr(first, "host_cached_tokens", 0) or 0)
        device = int(first.device_cached_tokens)
        result = Completion(
            prompt_tokens=int(first.prompt_tokens),
            completion_tokens=prep.completion_tokens,
            cached_tokens=device + host,
            device_cached_tokens=device,
            host_cached_tokens=host,
            ttft_s=first.time - sub.submit_time,
        )
        if prep.kv_end_after is not None:  # the trajectory's final turn is served: retire it now
            self._kv_apply(*prep.kv_end_after)
        self.metrics.ttft.observe(result.ttft_s)
        self.metrics.cached_tokens.inc(result.cached_tokens)
        if self.trace is not None:
            self.trace.invocation(prep, sub, result, done.time)
        return result

    # ------------------------------------------------------------------ hint endpoints

    def check_hint_token(self, headers: Mapping[str, str]) -> None:
        """Raise 401 unless the configured hint secret was sent (no-op without one).

        The secret comes from ``X-PBKV-Hint-Token`` or ``Authorization: Bearer``. The comparison
        takes the same time whatever was sent: both sides are hashed to 32-byte SHA-256 digests
        and compared with :func:`hmac.compare_digest`, whose time does not depend on where the
        bytes differ (Python docs), and equal-length digests hide the secret's length too, which
        comparing the raw strings would not. A missing token is compared like a wrong one.

        Raises:
            ApiError: 401 (``invalid_hint_token``).
        """
        secret = self.config.hint_token
        if secret is None:
            return
        sent = headers.get(HEADER_HINT_TOKEN)
        auth = headers.get("authorization", "")
        if sent is None and auth[:7].lower() == "bearer ":
            sent = auth[7:].strip()
        # Header values arrive as latin-1 text; surrogateescape keeps any str encodable.
        sent_digest = hashlib.sha256((sent or "").encode("utf-8", "surrogateescape")).digest()
        secret_digest = hashlib.sha256(secret.encode("utf-8", "surrogateescape")).digest()
        if not hmac.compare_digest(sent_digest, secret_digest) or sent is None:
            raise ApiError(401, "missing or wrong hint token", "invalid_hint_token")

    def end_workflow(self, workflow_id: str, body: Any) -> bool:
        """Handle ``POST .../workflows/{id}/end``; returns whether the workflow was active.

        Raises:
            ApiError: 400 for an id the protocol calls invalid (``validate_workflow_id``: 1-128 of
                ``[A-Za-z0-9._:-]``), a body that is not an object, or a status outside
                ``END_STATUSES``. A valid id the server never saw is fine (idempotent end).
        """
        try:
            validate_workflow_id(workflow_id)
        except HintError as exc:
            raise ApiError(400, str(exc), "invalid_workflow_id", "workflow_id") from None
        status = "completed"
        if body is not None:
            if not isinstance(body, dict):
                raise ApiError(400, "body must be a JSON object", "invalid_request")
            status = body.get("status", "completed")
            if status not in END_STATUSES:
                raise ApiError(400, f"status must be one of {', '.join(END_STATUSES)}", "invalid_value", "status")
        return self.driver.end_workflow(workflow_id, status)

    def close_session(self, body: Any) -> None:
        """Handle SGLang's ``POST /close_session`` (``{"session_id": ...}``): the policy drops the
        session's tags and the PBKV workflow of the same id ends (``completed``). Idempotent; an
        unknown session is fine.

        Raises:
            ApiError: 400 for a body that is not an object or a ``session_id`` outside the
                workflow-id rule (1-128 of ``[A-Za-z0-9._:-]``).
        """
        sid = body.get("session_id") if isinstance(body, dict) else None
        try:
            validate_workflow_id(sid)
        except (HintError, TypeError):
            raise ApiError(400, "body must be {\"session_id\": \"...\"} with 1-128 characters of [A-Za-z0-9._:-]",
                           "invalid_session_id", "session_id") from None
        self.driver.close_session(sid)

    @property
    def workflows(self) -> WorkflowTable:
        """The engine's workflow table (active workflows, remembered ends)."""
        return self.driver.engine.workflows

    def set_app_graph(self, app: str, body: Any) -> None:
        """Handle ``PUT .../apps/{app}/graph``: ``{"edges": {agent: [next agents]}}`` (or the map itself).

        Raises:
            ApiError: 400 for an invalid app name (empty, over 128 encoded characters, control
                characters, or bytes that are not UTF-8 in the path), or a graph that is not a
                non-empty map of agent name to list of agent names.
        """
        _check_app_name(app)
        edges = body.get("edges", body) if isinstance(body, dict) else None
        if isinstance(edges, dict) and not edges:
            raise ApiError(400, "graph has no edges: expected {\"edges\": {agent: [next agent, ...]}}",
                           "invalid_graph", "edges")
        if not isinstance(edges, dict) or not all(
            isinstance(k, str) and isinstance(v, list) and all(isinstance(x, str) for x in v)
            for k, v in edges.items()
        ):
            raise ApiError(400, "graph must be {\"edges\": {agent: [next agent, ...]}}", "invalid_graph", "edges")
        self.driver.set_app_graph(app, {k: list(v) for k, v in edges.items()})

    # ------------------------------------------------------------------ helpers

    def _reply(self, hints: Hints | None, messages: list[dict[str, Any]], max_tokens: int | None,
               body: Mapping[str, Any], prompt: Any, kind: str) -> tuple[str, list[dict[str, Any]] | None, int]:
        """The answer: ``(text, tool_calls, completion_tokens)``; ``tool_calls`` is ``None`` for a
        text answer, else ``text`` is empty and the tokens are those of the call's name and arguments."""
        app = hints.app if hints else None
        scenario = self._scenario(app)
        if hints is not None:
            seed = f"{self.config.seed}:{hints.workflow_id}:{hints.step}:{hints.agent}"
        else:
            seed = f"{self.config.seed}:anon:" + hashlib.sha256(canonical_prompt(prompt).encode()).hexdigest()
        extra = {k: v for k, v in body.items() if k not in ("messages", "prompt")}
        request = ScenarioRequest(
            app=app,
            agent=hints.agent if hints else None,
            workflow_id=hints.workflow_id if hints else None,
            step=hints.step if hints else 0,
            messages=messages,
            max_tokens=max_tokens,
            extra=extra,
        )
        if kind == "chat" and body.get("tools") and body.get("tool_choice") != "none":
            call = self._tool_call(scenario, request, seed)
            if call is not None:
                return "", *self._cut_tool_call(call, max_tokens)
        try:
            text = scenario.reply(request, random.Random(seed))
        except Exception:  # a broken app scenario must not fail the request: fall back
            log.exception("scenario %s failed; using the default scenario", type(scenario).__name__)
            text = DefaultScenario().reply(request, random.Random(seed))
        if not isinstance(text, str):
            text = str(text)
        candidates = selection_candidates(messages)
        if candidates and not answers_selection(text, candidates):
            # A speaker-selection call (AutoGen SelectorGroupChat) the app's scenario did not answer
            # with one listed name alone: the framework would retry and then give up, so the
            # default scenario's answer (one listed name) keeps the app's run going.
            text = DefaultScenario().reply(request, random.Random(seed))
        # App scenarios may ignore max_tokens: the cap is enforced here, as a real server would.
        if max_tokens is not None:
            text, tokens = truncate_to_tokens(text, max_tokens)
            return text, None, tokens
        return text, None, count_tokens(text)

    def _tool_call(self, scenario: Scenario, request: ScenarioRequest, seed: str) -> ToolCall | None:
        # A source of its own: the text reply's draws stay what they are without tools.
        try:
            call = scenario.tool_call(request, random.Random(seed + ":tools"))
        except Exception:  # a broken app scenario must not fail the request: the base rule decides
            log.exception("scenario %s failed to write a tool call; using the default rule", type(scenario).__name__)
            return Scenario.tool_call(DefaultScenario(), request, random.Random(seed + ":tools"))
        choice = request.extra.get("tool_choice")
        if call is None and (choice == "required" or isinstance(choice, dict) and choice.get("type") == "function"):
            # OpenAI guarantees a call here; an app scenario that declined is overruled by the base rule
            call = Scenario.tool_call(DefaultScenario(), request, random.Random(seed + ":tools"))
        return call

    @staticmethod
    def _cut_tool_call(call: ToolCall, max_tokens: int | None) -> tuple[list[dict[str, Any]], int]:
        """The call's OpenAI form and its completion tokens (name + arguments, counted like text);
        arguments beyond ``max_tokens`` are cut, as a real model's output is (then not valid JSON)."""
        name_tokens = count_tokens(call.name)
        arguments, arg_tokens = call.arguments, count_tokens(call.arguments)
        if max_tokens is not None and name_tokens + arg_tokens > max_tokens:
            arguments, arg_tokens = truncate_to_tokens(call.arguments, max(0, max_tokens - name_tokens))
        cut = ToolCall(call.id, call.name, arguments)
        return [cut.as_openai()], name_tokens + arg_tokens

    def _scenario(self, app: str | None) -> Scenario:
        if app is None:
            return self.fallback_scenario
        found = self._scenarios.get(app)
        if found is None:
            found = get_scenario(app)
            if found is None:
                return self.fallback_scenario
            self._scenarios[app] = found  # only registered apps are cached: the map stays small
        return found

    def _kv_plan(self, body: Any, hints: Hints | None) -> tuple[KvPlan | None, bool]:
        """``(plan, malformed)``: the request's ``kv_hints`` plan (:mod:`pbkv_server.http.kv_hints`),
        ``None`` without a usable envelope; a malformed one is counted as a malformed hint. Never raises."""
        envelope, reason = parse_kv_hints(body)
        if reason is not None:
            self._malformed(reason, "the workflow hints still apply" if hints else "request served anonymously")
        if envelope is None:
            return None, reason is not None
        plan = plan_kv_hints(envelope, hints.workflow_id if hints is not None else None)
        for action, outcome in plan.counted:
            self.metrics.kv_hint_actions.labels(action, outcome).inc()
        return plan, False

    def _kv_apply(self, kind: str, workflow_id: str, keep: bool = False) -> None:
        """Apply one planned action and count it: ``keep`` restarts the workflow's idle clock (a
        retain or fetch of another workflow, as the backends' book does); a fetch then loads its
        host-tier cache; a demote/evict ends it, as the end route. Applied: the workflow was kept,
        tokens were loaded, or it was ended."""
        try:
            done = keep and self.driver.keep_workflow(workflow_id)
            if kind == "fetch":
                done = self.driver.prefetch_workflow(workflow_id) > 0 or done
            elif kind != "retain":
                done = self.driver.end_workflow(workflow_id, "completed")
        except Exception:  # an advisory hint must never fail the request
            log.exception("kv_hints: %s of workflow %s failed", kind, workflow_id)
            done = False
        self.metrics.kv_hint_actions.labels(kind, "applied" if done else "no_effect").inc()

    def _malformed(self, reason: str, outcome: str) -> None:
        """Count one ignored hint; log each distinct ``reason`` once, with what became of the request."""
        self.metrics.malformed_hints.inc()
        if reason not in self._logged_reasons and len(self._logged_reasons) < _LOGGED_REASONS_MAX:
            self._logged_reasons.add(reason)
            log.warning("malformed hint ignored (%s): %s", outcome, reason)

    def _workflow_ended(self, wf: Workflow, status: str, reason: str) -> None:
        """Engine end listener: every end (client signal, idleness, table bound) is counted with its
        reason and written to the served trace."""
        self.metrics.workflow_ends.labels(status, reason).inc()
        if self.trace is not None:
            self.trace.workflow_end(wf.app, trace_workflow_id(wf.workflow_id, wf.incarnation),
                                    self.driver.engine.clock, status)

    async def _sweep(self) -> None:
        assert self.config.idle_retire_s is not None
        period = min(5.0, max(0.05, self.config.idle_retire_s / 4))
        while True:
            await asyncio.sleep(period)
            self.driver.retire_idle()


def server_policy_info(name: str) -> PolicyInfo:
    """The registry entry of policy ``name``.

    Raises:
        ValueError: an unknown name, listing the policies the server runs (the registry's own
            message lists the simulator's offline references too, which the server refuses).
    """
    from pbkv_server.engine.policies import SERVER, available_policies, policy_info

    try:
        return policy_info(name)
    except ValueError:
        raise ValueError(f"unknown policy {name!r}; the server runs {', '.join(available_policies(SERVER))}") from None


def _check_app_name(app: str) -> None:
    """Raise a 400 :class:`ApiError` unless ``app`` is a name the hint protocol can carry
    (:func:`pbkv_contract.hints.name_problem`, the rule hints are checked with)."""
    # The path is percent-decoded with replacement: U+FFFD marks bytes that were not UTF-8 (%FF).
    if "\ufffd" in app:
        raise ApiError(400, "app name must be UTF-8 text (the path holds bytes that are not)", "invalid_app", "app")
    problem = name_problem(app)
    if problem is not None:
        raise ApiError(400, f"invalid app name: it {problem}", "invalid_app", "app")
