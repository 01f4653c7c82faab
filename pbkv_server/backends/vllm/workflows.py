"""Workflows, predictions and request hints of one vLLM engine-core process.

The engine core runs vLLM's scheduler, so its ``BlockPool`` (GPU prefix cache) and its CPU
offload manager live in one process; both PBKV tiers share one :class:`VLLMRuntime` there: the
backends' shared :class:`~pbkv_server.backends.book.WorkflowBook` (the engine core's workflow
table and score board), the engine-core policy, the request ticks that stand for ``last_access``,
and the inbox of workflow ends (:mod:`.control`).

Hints reach a vLLM ``Request`` through ``sampling_params.extra_args`` (what the OpenAI server's
``vllm_xargs`` body field fills; :mod:`.http` copies ``X-PBKV-*`` headers and
``custom_params.pbkv`` there):

- ``extra_args["pbkv"]``: the body form, an object ``{workflow_id, agent, step, app}`` (Python
  API, ``LLM.generate(..., SamplingParams(extra_args=...))``);
- ``extra_args["pbkv_workflow_id"]``, ``pbkv_agent``, ``pbkv_step``, ``pbkv_app``: the same fields
  flat, as ``vllm_xargs`` carries only strings and numbers;
- ``extra_args["pbkv_malformed"]``: the reason the API server found a hint malformed.

The engines' KV-hint envelope (:func:`pbkv_contract.hints.parse_kv_hints`) comes from vLLM's own
``Request.kv_hints`` (vllm-project/vllm#53423; Python API) or, from HTTP, ``extra_args
["pbkv_kv_hints"]``. A ``demote`` or ``evict`` action retires its trajectory: another workflow
at once, the request's own when the request finished (:meth:`VLLMRuntime.request_done`; its
final turn, as vLLM's ``execute_at: request_completion``): its cache becomes the first to go, as
after a workflow end.
A ``retain`` or ``fetch`` of another active workflow restarts its idle clock
(:meth:`~pbkv_server.backends.book.WorkflowBook.keep`), so its cache keeps its lookahead rank
instead of retiring; a fetch loads nothing ahead of the request (vLLM's offload API loads KV only
for a request being scheduled, :mod:`.offload_policy`). Every action is counted by kind, unknown
types and versions as ignored; a malformed envelope is counted as a malformed hint, and the
request's other hints still apply.

A request without PBKV hints that carries vLLM's own ``session_id`` (``Request.session_id``, body
field or ``X-Session-ID`` header) belongs to the workflow of that id
(:meth:`~pbkv_server.engine.workflows.WorkflowTable.session_hints`). A malformed hint is counted,
logged once, and the request is served anonymously.

A policy with lifecycle hooks (``pbkv``: :mod:`pbkv_server.backends.lifecycle`) hears of each
request's arrival (:meth:`VLLMRuntime.begin_request`, the connector's ``on_new_request``), its
admission (:meth:`VLLMRuntime.admitted`: the connector's ``update_state_after_alloc``, or the
block pool caching its blocks) and its finish (:meth:`VLLMRuntime.request_done`), named by its
``request_id`` as an :class:`~pbkv_server.engine.types.EngineRequest` whose ``blocks`` are
vLLM's block hashes.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import OrderedDict
from typing import Any, Callable

from pbkv_contract.hints import (
    BODY_KEY, KV_HINTS_KEY, HintError, Hints, parse_hints, validate_workflow_id,
)
from pbkv_contract.prediction import Predictor
from pbkv_server.backends.book import WorkflowBook, predictor_or_none
from pbkv_server.backends.lifecycle import BackendContext
from pbkv_server.engine.policies import make_policy
from pbkv_server.engine.scoring import ScoreBoard
from pbkv_server.engine.types import EngineRequest

from .settings import PluginSettings, engine_policy_name

log = logging.getLogger(__name__)

__all__ = ["VLLMRuntime", "hints_of_request", "FLAT_KEYS", "MALFORMED_KEY", "KV_HINTS_XARG", "runtime",
           "set_runtime"]

#: ``extra_args`` keys of the flat form (``vllm_xargs``), by body field.
FLAT_KEYS = {"workflow_id": "pbkv_workflow_id", "agent": "pbkv_agent", "step": "pbkv_step", "app": "pbkv_app"}
#: ``extra_args`` key of a hint the API server found malformed (value: the reason).
MALFORMED_KEY = "pbkv_malformed"
#: ``extra_args`` key of the body's KV-hint envelope, JSON-encoded (``vllm_xargs`` takes strings).
KV_HINTS_XARG = "pbkv_kv_hints"
_NO_HINTS = (None, None)
#: Requests whose hints and tick are remembered by id (the CPU tier sees only request ids).
MAX_REMEMBERED_REQUESTS = 65536


def hints_of_request(request: Any) -> tuple[Hints | None, str | None]:
    """Hints of a vLLM ``Request`` (or any object with ``sampling_params.extra_args``).

    Returns:
        ``(hints, None)``, ``(None, None)`` for an anonymous request, or ``(None, reason)`` for a
        malformed hint. Never raises.
    """
    try:
        extra = getattr(getattr(request, "sampling_params", None), "extra_args", None)
        if not isinstance(extra, dict):
            return _NO_HINTS
        if MALFORMED_KEY in extra:
            return None, str(extra[MALFORMED_KEY])[:200] or "malformed hint"
        if BODY_KEY in extra:
            return parse_hints(None, {"custom_params": {BODY_KEY: extra[BODY_KEY]}})
        if FLAT_KEYS["workflow_id"] in extra:
            body = {field: extra[key] for field, key in FLAT_KEYS.items() if key in extra}
            if isinstance(body.get("step"), float) and body["step"].is_integer():
                body["step"] = int(body["step"])  # JSON numbers may arrive as floats
            return parse_hints(None, {"custom_params": {BODY_KEY: body}})
        if any(key in extra for key in FLAT_KEYS.values()):
            return None, f"{FLAT_KEYS['workflow_id']} missing while other pbkv_* extra args are present"
        return _NO_HINTS
    except Exception as exc:  # defensive: never fail a request over hints
        return None, f"malformed hint: {type(exc).__name__}"


class VLLMRuntime:
    """Everything PBKV keeps in one vLLM engine-core process.

    Args:
        policy: plugin policy name (``pbkv``, ``pbkv-he``, ``pbkv-lae``, or an engine name).
        settings: plugin settings; ``None`` = defaults.
        predictor: a ready predictor; ``None`` builds ``settings.predictor`` (a failure is logged
            and leaves every score 0, so ``pbkv-he`` orders like ``pbkv-lae``).
        clock: time source for idle retirement, seconds.
        inbox: the control inbox of workflow ends, or ``None``.

    Raises:
        ValueError: ``policy`` is not a plugin policy.
    """

    def __init__(self, policy: str, settings: PluginSettings | None = None, predictor: Predictor | None = None,
                 clock: Callable[[], float] = time.monotonic, inbox: Any = None) -> None:
        self.settings = settings or PluginSettings()
        self.policy_name = policy
        # the policy's context reads the book once the book attaches it (backends/lifecycle.py)
        self.context = BackendContext(ScoreBoard(self.settings.gamma, self.settings.horizon), clock,
                                      self.settings.horizon)
        self.policy = make_policy(engine_policy_name(policy), self.context)
        if predictor is None and self.policy.uses_predictions:
            predictor = predictor_or_none(self.settings.predictor, self.settings.horizon)
        self.book = WorkflowBook(self.settings.gamma, self.settings.horizon, predictor,
                                 self.settings.idle_retire_s, clock,
                                 predict=bool(self.policy.uses_predictions), policy=self.policy)
        self.inbox = inbox
        self._ticks = itertools.count(1)
        #: Request id -> its own workflow, retired when the request finished (its final turn).
        self._end_after: dict[str, str] = {}
        self._requests: "OrderedDict[str, tuple[Hints | None, int]]" = OrderedDict()
        #: Request id -> deepest block node it was seen to use (the ``end`` of its ``on_finish``).
        self._ends: "OrderedDict[str, Any]" = OrderedDict()

    # ------------------------------------------------------------------ requests
    def begin_request(self, request: Any) -> tuple[Hints | None, int]:
        """``(hints, tick)`` of ``request``; its first call registers the invocation and gives it
        the next tick (the ``last_access`` of every block it uses). Never raises."""
        rid = getattr(request, "request_id", None)
        known = self._requests.get(rid) if rid is not None else None
        if known is not None:
            return known
        hints: Hints | None = None
        try:
            hints, reason = hints_of_request(request)
            session = self._session_hints(request) if hints is None and reason is None else None
            if session is not None:
                self.book.invocation(session, request=self._engine_request(request, session))
                hints = session
            else:  # counts anonymous and malformed ones
                hints = self.book.request(hints, reason, request=self._engine_request(request, hints))
        except Exception:  # bookkeeping must never fail a request
            log.exception("PBKV: hint bookkeeping failed for request %s", rid)
            hints = None
        self._kv_hints(request, hints)
        state = (hints, next(self._ticks))
        if rid is not None:
            self._requests[rid] = state
            if len(self._requests) > MAX_REMEMBERED_REQUESTS:
                self._requests.popitem(last=False)
        return state

    def _engine_request(self, request: Any, hints: Hints | None) -> EngineRequest | None:
        """``request`` as the policy's hooks see it (``None`` without hooks or without an id)."""
        rid = getattr(request, "request_id", None)
        if self.book.feed is None or rid is None:
            return None
        blocks = tuple(getattr(request, "block_hashes", None) or ())
        max_tokens = getattr(getattr(request, "sampling_params", None), "max_tokens", None)
        sid = getattr(request, "session_id", None)
        priority = getattr(request, "priority", None)
        return EngineRequest(str(rid), blocks, (), max_tokens if isinstance(max_tokens, int) else 1, hints,
                             session_id=sid if isinstance(sid, str) else None,
                             priority=priority if isinstance(priority, int) else None)

    def admitted(self, request: Any, path: Any = ()) -> None:
        """vLLM scheduled ``request`` (its blocks are allocated; ``path``: its block nodes, root
        first): the policy's ``on_admit``, first report only. Never raises."""
        try:
            rid = getattr(request, "request_id", None)
            if rid is None:
                return
            if path:
                self._ends[rid] = path[-1]
                self._ends.move_to_end(rid)
                if len(self._ends) > MAX_REMEMBERED_REQUESTS:
                    self._ends.popitem(last=False)
            self.book.admitted(str(rid), path)
        except Exception:
            log.exception("PBKV: admission bookkeeping failed for request %s", getattr(request, "request_id", "?"))

    def _kv_hints(self, request: Any, hints: Hints | None) -> None:
        """Apply the request's KV-hint envelope, if any (module docstring), through the backends'
        one reader (:meth:`~pbkv_server.backends.book.WorkflowBook.kv_hints`). Never raises."""
        try:
            body = None
            native = getattr(request, "kv_hints", None)
            if native is not None:
                import msgspec

                body = {KV_HINTS_KEY: msgspec.to_builtins(native)}
            else:
                extra = getattr(getattr(request, "sampling_params", None), "extra_args", None)
                if isinstance(extra, dict) and isinstance(extra.get(KV_HINTS_XARG), str):
                    import json

                    body = {KV_HINTS_KEY: json.loads(extra[KV_HINTS_XARG])}
            if body is None:
                return
            _, end_after = self.book.kv_hints(body, hints)
            rid = getattr(request, "request_id", None)
            if end_after is not None and rid is not None:
                self._end_after[rid] = end_after
                if len(self._end_after) > MAX_REMEMBERED_REQUESTS:  # aborted requests never finish
                    self._end_after.pop(next(iter(self._end_after)))
        except Exception:
            self.book.request(None, "kv_hints: unreadable")

    @property
    def kv_hint_counts(self) -> dict[str, int]:
        """KV-hint actions seen, by kind (retain, demote, evict, fetch), and ignored ones."""
        return self.book.kv_hint_counts

    def request_state(self, request_id: str) -> tuple[Hints | None, int]:
        """``(hints, tick)`` of a request seen by :meth:`begin_request`; an unknown id gets no
        hints and a fresh tick (a use now)."""
        known = self._requests.get(request_id)
        return known if known is not None else (None, next(self._ticks))

    def finish_request(self, request_id: str) -> None:
        """Forget a finished request's state (its blocks keep their ticks and records)."""
        self._requests.pop(request_id, None)

    def request_done(self, request_id: str) -> bool:
        """The request finished (the connector's ``request_finished``): the policy's ``on_finish``,
        then retire its workflow if its envelope asked so (a demote/evict of its own trajectory).
        Returns whether one was retired."""
        self.book.finished(str(request_id), self._ends.pop(request_id, None))
        workflow_id = self._end_after.pop(request_id, None)
        return workflow_id is not None and self.end_workflow(workflow_id, "completed")

    def _session_hints(self, request: Any) -> Hints | None:
        sid = getattr(request, "session_id", None)
        if not isinstance(sid, str):
            return None
        try:
            validate_workflow_id(sid)
        except HintError:
            return None
        return self.book.table.session_hints(sid)

    # ------------------------------------------------------------------ lifecycle
    def end_workflow(self, workflow_id: str, status: str = "completed") -> bool:
        """Retire ``workflow_id`` (idempotent); its private blocks become the first victims."""
        return self.book.end_workflow(workflow_id, status)

    def poll(self) -> int:
        """Apply the workflow ends received on the control inbox; returns how many."""
        if self.inbox is None:
            return 0
        n = 0
        for workflow_id, status in self.inbox.drain():
            self.end_workflow(workflow_id, status)
            n += 1
        return n


_RUNTIME: VLLMRuntime | None = None


def runtime() -> VLLMRuntime:
    """The process's runtime, built from the environment at first use
    (:mod:`~pbkv_server.backends.vllm.settings`; ``DEFAULT_PLUGIN_POLICY`` when ``PBKV_VLLM_POLICY`` is unset).

    Raises:
        ValueError: a bad ``PBKV_VLLM_POLICY`` or ``PBKV_VLLM_CONFIG`` (vLLM reports it at start).
    """
    global _RUNTIME
    if _RUNTIME is None:
        import os

        from .control import ControlInbox
        from .settings import DEFAULT_PLUGIN_POLICY, ENV_CONTROL, policy_from_env, settings_from_env

        policy = policy_from_env() or DEFAULT_PLUGIN_POLICY
        settings = settings_from_env(policy)
        path = os.environ.get(ENV_CONTROL, "").strip()
        inbox = None
        if path:
            try:
                inbox = ControlInbox(path)
            except OSError as exc:
                log.warning("PBKV: cannot bind control socket %s (%s); workflow ends over HTTP are lost, "
                            "idle retirement still applies", path, exc)
        _RUNTIME = VLLMRuntime(policy, settings, inbox=inbox)
        log.info("PBKV vLLM runtime: policy %s, control socket %s", policy, path or "none")
    return _RUNTIME


def set_runtime(rt: VLLMRuntime | None) -> None:
    """Install ``rt`` as the process's runtime (tests; ``None`` = build from the environment)."""
    global _RUNTIME
    _RUNTIME = rt
