"""What the HTTP routes do, without HTTP: validate, read hints, tokenize, answer, drive the engine.

:class:`PbkvService` ties together the workflow table, the sim engine driver, the scenario that
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
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from pbkv_sdk.protocol import END_STATUSES, Hints, parse_hints
from pbkv_sdk.trace import (
    InvocationRecord,
    TraceWriter,
    WorkflowEndRecord,
    canonical_prompt,
    prefix_hashes,
    request_features,
)
from pbkv_server.engine import EngineConfig, EngineRequest
from pbkv_server.http.config import ServerConfig
from pbkv_server.http.driver import SimDriver, Submission
from pbkv_server.http.errors import ApiError
from pbkv_server.http.metrics import ServerMetrics
from pbkv_server.http.workflows import RETIRED_IDLE, WorkflowTable
from pbkv_server.scenario import Scenario, ScenarioRequest, get_scenario, load_scenario
from pbkv_server.scenarios.default import DefaultScenario
from pbkv_server.tokenizer import block_tokens, count_tokens, truncate_to_tokens

__all__ = ["PbkvService", "Prepared", "Completion", "engine_config_from", "figure_headers"]

log = logging.getLogger(__name__)

#: Header names of the per-request figures the server reports.
HEADER_PROMPT_TOKENS = "X-PBKV-Prompt-Tokens"
HEADER_CACHED_TOKENS = "X-PBKV-Cached-Tokens"
HEADER_HOST_CACHED_TOKENS = "X-PBKV-Host-Cached-Tokens"
HEADER_TTFT = "X-PBKV-TTFT-S"
HEADER_HINTS = "X-PBKV-Hints"
#: Headers accepted for the hint-endpoint secret (besides ``Authorization: Bearer``).
HEADER_HINT_TOKEN = "X-PBKV-Hint-Token"

# Distinct malformed-hint reasons logged at warning level (later repeats only counted).
_LOGGED_REASONS_MAX = 64


@dataclass(slots=True)
class Prepared:
    """A validated LLM request, ready for the engine.

    Attributes:
        kind: ``"chat"`` or ``"completion"``.
        request_id: id of the response (``chatcmpl-...`` / ``cmpl-...``).
        model: model name echoed back.
        stream: answer as server-sent events.
        include_usage: streaming only: send a final usage chunk.
        hints: the request's valid hints, or ``None`` (anonymous or malformed).
        hint_status: ``"ok"``, ``"anonymous"`` or ``"ignored"`` (malformed).
        engine_request: blocks, block tokens, output tokens, hints, features.
        text: the reply the scenario wrote (already cut to ``max_tokens``).
        completion_tokens: tokens of ``text``.
        finish_reason: ``"stop"`` or ``"length"``.
        arrival: wall time (monotonic seconds) the request arrived.
    """

    kind: str
    request_id: str
    model: str
    stream: bool
    include_usage: bool
    hints: Hints | None
    hint_status: str
    engine_request: EngineRequest
    text: str
    completion_tokens: int
    finish_reason: str
    arrival: float


@dataclass(slots=True)
class Completion:
    """The outcome of one request, in tokens and engine seconds."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    device_cached_tokens: int
    host_cached_tokens: int
    ttft_s: float

    def usage(self) -> dict[str, Any]:
        """OpenAI ``usage`` object; ``cached_tokens`` counts device and host prefix hits."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": self.cached_tokens},
        }

    def headers(self, hint_status: str) -> dict[str, str]:
        """Response headers reporting this request's figures (:func:`figure_headers`)."""
        return figure_headers(
            self.prompt_tokens, self.device_cached_tokens, self.host_cached_tokens, self.ttft_s, hint_status
        )


def figure_headers(prompt_tokens: int, device_cached: int, host_cached: int, ttft_s: float,
                   hint_status: str) -> dict[str, str]:
    """Response headers of one request: prompt tokens, cached tokens (device + host), host part,
    simulated TTFT in engine seconds, and how its hints were treated (ok | anonymous | ignored)."""
    return {
        HEADER_PROMPT_TOKENS: str(int(prompt_tokens)),
        HEADER_CACHED_TOKENS: str(int(device_cached) + int(host_cached)),
        HEADER_HOST_CACHED_TOKENS: str(int(host_cached)),
        HEADER_TTFT: f"{ttft_s:.6f}",
        HEADER_HINTS: hint_status,
    }


def engine_config_from(config: ServerConfig) -> EngineConfig:
    """The :class:`EngineConfig` a server config describes (profile, policy, predictor, sizes).

    Raises:
        ValueError: unknown profile, policy or predictor spec.
    """
    from pbkv_server.engine import available_policies
    from pbkv_server.http.routing import build_predictor
    from pbkv_server.sim.profiles import DEFAULT_PROFILE, get_profile

    if config.policy not in available_policies():
        raise ValueError(f"unknown policy {config.policy!r}; available: {', '.join(available_policies())}")
    if config.policy == "belady":
        raise ValueError("policy 'belady' needs the whole future; it exists in the simulator only")
    profile = get_profile(config.profile or DEFAULT_PROFILE)
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
        self.driver = SimDriver(make_engine_config or (lambda: engine_config_from(config)), pace=config.pace)
        self.table = WorkflowTable(config.idle_retire_s, config.max_active_workflows, config.max_ended_ids)
        self.fallback_scenario: Scenario = load_scenario(config.scenario) if config.scenario else DefaultScenario()
        self._scenarios: dict[str, Scenario] = {}
        self.metrics = ServerMetrics(
            self.driver.stats,
            {
                "engine": config.engine,
                "policy": config.policy,
                "profile": self.driver.engine_config.profile.name,
                "predictor": ",".join(f"{a}={s}" for a, s in config.predictors.items()) or "none",
                "device_tokens": str(self.driver.device_capacity),
            },
        )
        self.trace = TraceWriter(config.trace_out) if config.trace_out else None
        # Unix time of engine clock 0: trace times are epoch + engine seconds (see README).
        self.epoch = time.time()
        self._logged_reasons: set[str] = set()
        self._id_base = uuid.uuid4().hex[:12]
        self._ids = itertools.count()
        self._sweeper: asyncio.Task[None] | None = None

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

        Raises:
            ApiError: 400 for a body of the wrong shape or a prompt beyond the device capacity.
        """
        arrival = time.monotonic()
        if not isinstance(body, dict):
            raise ApiError(400, "request body must be a JSON object", "invalid_request")
        messages = _messages(body, kind)
        max_tokens = _max_tokens(body)
        n = body.get("n", 1)
        if n not in (1, None):
            raise ApiError(400, "only n=1 is supported", "unsupported_value", "n")
        stream = body.get("stream", False)
        if not isinstance(stream, bool):
            raise ApiError(400, "stream must be a boolean", "invalid_type", "stream")
        stream_options = body.get("stream_options") or {}
        include_usage = bool(isinstance(stream_options, dict) and stream_options.get("include_usage"))

        hints, reason = parse_hints(headers, body)
        hint_status = "ok" if hints else "anonymous"
        if reason is not None:
            hint_status = "ignored"
            self._malformed(reason)
        if hints is not None:
            for old in self.table.touch(hints, arrival):
                self._end(old, "cancelled", source="table_full")

        prompt: Any = messages if kind == "chat" else messages[0]["content"]
        keys = prefix_hashes(prompt, self.config.block_chars)
        tokens = block_tokens(prompt, self.config.block_chars)
        text, completion_tokens = self._reply(hints, messages, max_tokens, body, prompt)
        # The engine emits the first token after prefill, so even an empty reply costs one token.
        output_tokens = max(1, completion_tokens)
        prompt_tokens = sum(tokens)
        if prompt_tokens + output_tokens > self.driver.device_capacity:
            raise ApiError(
                400,
                f"prompt of {prompt_tokens} tokens plus {output_tokens} output tokens exceeds the device "
                f"KV capacity of {self.driver.device_capacity} tokens",
                "context_length_exceeded",
                "messages",
            )
        prefix = "chatcmpl-" if kind == "chat" else "cmpl-"
        # A per-server random part plus a counter: unique without an os.urandom call per request.
        request_id = f"{prefix}{self._id_base}{next(self._ids):x}"
        engine_request = EngineRequest(
            request_id=request_id,
            blocks=keys,
            block_tokens=tokens,
            output_tokens=output_tokens,
            hints=hints,
            features=tuple(request_features(prompt)),
        )
        finish = "length" if max_tokens is not None and completion_tokens >= max_tokens else "stop"
        model = body.get("model") if isinstance(body.get("model"), str) else self.config.model_name
        return Prepared(kind, request_id, model, stream, include_usage, hints, hint_status,
                        engine_request, text, completion_tokens, finish, arrival)

    def submit(self, prep: Prepared) -> Submission:
        """Queue the prepared request in the engine."""
        return self.driver.submit(prep.engine_request)

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
        self.metrics.ttft.observe(result.ttft_s)
        self.metrics.cached_tokens.inc(result.cached_tokens)
        if self.trace is not None and prep.hints is not None:
            self._trace_invocation(prep, sub, result, done.time)
        return result

    # ------------------------------------------------------------------ hint endpoints

    def check_hint_token(self, headers: Mapping[str, str]) -> None:
        """Raise 401 unless the configured hint secret was sent (no-op without one)."""
        secret = self.config.hint_token
        if secret is None:
            return
        sent = headers.get(HEADER_HINT_TOKEN)
        auth = headers.get("authorization", "")
        if sent is None and auth.lower().startswith("bearer "):
            sent = auth[7:].strip()
        if sent is None or not hmac.compare_digest(sent.encode(), secret.encode()):
            raise ApiError(401, "missing or wrong hint token", "invalid_hint_token")

    def end_workflow(self, workflow_id: str, body: Any) -> bool:
        """Handle ``POST .../workflows/{id}/end``; returns whether the workflow was active.

        Raises:
            ApiError: 400 for a body that is not an object or a status outside ``END_STATUSES``.
        """
        status = "completed"
        if body is not None:
            if not isinstance(body, dict):
                raise ApiError(400, "body must be a JSON object", "invalid_request")
            status = body.get("status", "completed")
            if status not in END_STATUSES:
                raise ApiError(400, f"status must be one of {', '.join(END_STATUSES)}", "invalid_value", "status")
        return self._end(workflow_id, status, source="client")

    def set_app_graph(self, app: str, body: Any) -> None:
        """Handle ``PUT .../apps/{app}/graph``: ``{"edges": {agent: [next agents]}}`` (or the map itself).

        Raises:
            ApiError: 400 for a graph that is not a map of agent name to list of agent names.
        """
        edges = body.get("edges", body) if isinstance(body, dict) else None
        if not isinstance(edges, dict) or not all(
            isinstance(k, str) and isinstance(v, list) and all(isinstance(x, str) for x in v)
            for k, v in edges.items()
        ):
            raise ApiError(400, "graph must be {\"edges\": {agent: [next agent, ...]}}", "invalid_graph", "edges")
        self.driver.set_app_graph(app, {k: list(v) for k, v in edges.items()})

    # ------------------------------------------------------------------ helpers

    def _reply(self, hints: Hints | None, messages: list[dict[str, Any]], max_tokens: int | None,
               body: Mapping[str, Any], prompt: Any) -> tuple[str, int]:
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
        try:
            text = scenario.reply(request, random.Random(seed))
        except Exception:  # a broken app scenario must not fail the request: fall back
            log.exception("scenario %s failed; using the default scenario", type(scenario).__name__)
            text = DefaultScenario().reply(request, random.Random(seed))
        if not isinstance(text, str):
            text = str(text)
        # App scenarios may ignore max_tokens: the cap is enforced here, as a real server would.
        if max_tokens is not None:
            return truncate_to_tokens(text, max_tokens)
        return text, count_tokens(text)

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

    def _malformed(self, reason: str) -> None:
        self.metrics.malformed_hints.inc()
        if reason not in self._logged_reasons and len(self._logged_reasons) < _LOGGED_REASONS_MAX:
            self._logged_reasons.add(reason)
            log.warning("malformed PBKV hints ignored (request served anonymously): %s", reason)

    def _end(self, workflow_id: str, status: str, source: str) -> bool:
        state = self.table.get(workflow_id)
        was_active = self.table.end(workflow_id, status) if source != "table_full" else True
        self.driver.end_workflow(workflow_id, status)
        if was_active:
            self.metrics.workflow_ends.labels(status, source).inc()
            if self.trace is not None:
                app = state.app if state is not None and state.app else "unknown"
                self.trace.write(WorkflowEndRecord(app, workflow_id, self.epoch + self.driver.engine.clock, status))
        return was_active

    async def _sweep(self) -> None:
        assert self.config.idle_retire_s is not None
        period = min(5.0, max(0.05, self.config.idle_retire_s / 4))
        while True:
            await asyncio.sleep(period)
            for wid in self.table.retire_idle(time.monotonic()):
                self._end_retired(wid)

    def _end_retired(self, workflow_id: str) -> None:
        # The table already moved it to the ended map; tell the engine and record it.
        self.driver.end_workflow(workflow_id, RETIRED_IDLE)
        self.metrics.workflow_ends.labels(RETIRED_IDLE, "idle").inc()
        if self.trace is not None:
            self.trace.write(WorkflowEndRecord("unknown", workflow_id, self.epoch + self.driver.engine.clock, RETIRED_IDLE))

    def _trace_invocation(self, prep: Prepared, sub: Submission, result: Completion, t_end: float) -> None:
        assert prep.hints is not None
        req = prep.engine_request
        assert self.trace is not None
        self.trace.write(
            InvocationRecord(
                app=prep.hints.app or "unknown",
                workflow_id=prep.hints.workflow_id,
                step=prep.hints.step,
                agent=prep.hints.agent,
                t_start=self.epoch + sub.submit_time,
                t_end=self.epoch + t_end,
                prompt_tokens=result.prompt_tokens,
                completion_tokens=result.completion_tokens,
                prefix_hashes=list(req.blocks),
                ttft_s=result.ttft_s,
                cached_tokens=result.cached_tokens,
                block_chars=self.config.block_chars,
                features=list(req.features),
                block_tokens=list(req.block_tokens),
            )
        )


def _messages(body: Mapping[str, Any], kind: str) -> list[dict[str, Any]]:
    if kind == "chat":
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ApiError(400, "messages must be a non-empty array", "invalid_type", "messages")
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or not isinstance(m.get("role"), str):
                raise ApiError(400, f"messages[{i}] must be an object with a role", "invalid_type", f"messages[{i}]")
        return messages
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise ApiError(400, "prompt must be a string (batched prompts are not supported)", "invalid_type", "prompt")
    return [{"role": "user", "content": prompt}]


def _max_tokens(body: Mapping[str, Any]) -> int | None:
    for name in ("max_completion_tokens", "max_tokens"):
        value = body.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ApiError(400, f"{name} must be a positive integer", "invalid_value", name)
        return value
    return None
