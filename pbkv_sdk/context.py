"""Who is calling the LLM: the workflow, agent and app of the current code path.

The SDK keeps two context variables: the current :class:`Workflow` (one run of a multi-agent
app: id, app name, step counter, where its end signal and trace go) and the current agent name.
Context variables follow ``asyncio`` tasks and LangChain's copied thread contexts, so concurrent
workflows in one process never see each other's values. The stamping transport
(:mod:`pbkv_sdk.stamping`) reads both at request time.

Framework integrations set them for you; any other app can use::

    with pbkv_sdk.workflow(app="myapp"):
        with pbkv_sdk.agent("planner"):
            client.chat.completions.create(...)   # stamped with workflow, "planner", step 0
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import threading
import time
import uuid
from typing import Iterator

from pbkv_contract.hints import END_STATUSES, HintError, validate_workflow_id
from pbkv_contract.trace import WorkflowEndRecord
from pbkv_sdk.env import end_timeout, env_flag
from pbkv_sdk.kv_hints import ENV_KV_HINTS, queue_end
from pbkv_sdk.routing import routing_header
from pbkv_sdk.once import WarnOnce

log = logging.getLogger(__name__)

#: Environment variables the SDK reads (``pbkv-sdk record`` sets them).
ENV_SERVER_URL = "PBKV_SERVER_URL"
ENV_TRACE_PATH = "PBKV_TRACE_PATH"
ENV_APP = "PBKV_APP"
ENV_BODY_HINTS = "PBKV_BODY_HINTS"
ENV_END_TIMEOUT = "PBKV_END_TIMEOUT_S"

#: Said once per process when a workflow's LLM calls left without hints (see ``expect_llm_call``).
UNSTAMPED_WARNING = (
    "PBKV: %d of %d LLM call(s) of workflow %s (app %r) were sent without hints, so the server cannot "
    "tell them apart from anonymous traffic: the model client does not send through httpx's default "
    "transport (a custom transport, an aiohttp client, another HTTP library). Pass "
    "http_client=pbkv_sdk.http_client() (async: pbkv_sdk.async_http_client()) to that client, or wrap "
    "its httpx client with pbkv_sdk.wrap_client(client). Further occurrences are logged at debug level."
)

_workflow_var: contextvars.ContextVar["Workflow | None"] = contextvars.ContextVar("pbkv_workflow", default=None)
_agent_var: contextvars.ContextVar[str | None] = contextvars.ContextVar("pbkv_agent", default=None)
# True while the framework itself (not an agent) calls the LLM, e.g. AutoGen's speaker selection.
_internal_var: contextvars.ContextVar[bool] = contextvars.ContextVar("pbkv_internal", default=False)


class Workflow:
    """One run of a multi-agent app: its id, app, step counter, end signal and trace sink.

    Steps are handed out by :meth:`next_step`, 0-based, one per LLM request of the workflow, in
    the order the requests are sent (thread-safe). :meth:`end` sends the end signal and writes the
    ``workflow_end`` trace record exactly once, however often it is called.

    Args:
        app: application name (selects the server's predictor and call graph).
        workflow_id: 1-128 chars of ``[A-Za-z0-9._:-]``; a random 32-hex-digit id if ``None``.
        server_url: base URL of the PBKV server for the end signal (``http://host:port``); if
            ``None``, ``$PBKV_SERVER_URL``, else the origin of this workflow's first LLM request.
        trace_path: JSONL trace file to record into; ``None`` records nothing.
        end_timeout_s: time budget of the end signal, seconds (``$PBKV_END_TIMEOUT_S``, else 0.5).
        body_hints: also send the hints as ``custom_params.pbkv`` from the process-wide stamping
            of :mod:`pbkv_sdk.autopatch` (``None``: ``$PBKV_BODY_HINTS == "1"``, read now).
        kv_hints: also send PBKV's retain/prefetch intent and end signal as actions of the
            engines' KV-hint envelope (:mod:`pbkv_sdk.kv_hints`; ``None``: ``$PBKV_KV_HINTS == "1"``).

    Raises:
        HintError: ``workflow_id`` is malformed.
    """

    def __init__(
        self,
        app: str,
        workflow_id: str | None = None,
        *,
        server_url: str | None = None,
        trace_path: str | os.PathLike[str] | None = None,
        end_timeout_s: float | None = None,
        body_hints: bool | None = None,
        kv_hints: bool | None = None,
    ):
        self.app = app
        self.body_hints = env_flag(ENV_BODY_HINTS) if body_hints is None else body_hints
        self.kv_hints = env_flag(ENV_KV_HINTS) if kv_hints is None else kv_hints
        #: The next stamped request is the workflow's last (:meth:`mark_final`); once it carried
        #: its end as ``kv.evict``, ``final_sent``.
        self.final_next = False
        self.final_sent = False
        self.workflow_id = validate_workflow_id(workflow_id) if workflow_id is not None else uuid.uuid4().hex
        self.server_url = server_url or os.environ.get(ENV_SERVER_URL) or None
        self.trace_path = os.fspath(trace_path) if trace_path is not None else None
        self.end_timeout_s = end_timeout(end_timeout_s, ENV_END_TIMEOUT)  # a bad value: one warning, 0.5 s
        self.t_start = time.time()
        #: Origin (``scheme://host:port``) of the first stamped request; fallback end-signal target.
        self.llm_origin: str | None = None
        #: Router affinity header stamped with the workflow id (``pbkv_sdk.routing``), or ``None``.
        self.routing_header = routing_header()
        #: Worker URLs a router reported serving this workflow's requests (end-signal targets).
        self.served_by: set[str] = set()
        #: Whether stamping reads the answers' headers: always with a replica list (for
        #: :attr:`served_by`), else the first answer only (``pbkv_sdk.routing.note_response``).
        self.read_answers = True
        self._lock = threading.Lock()
        self._next_step = 0
        self._expected_calls = 0
        self._unhinted = 0
        self._ended: str | None = None

    @property
    def steps(self) -> int:
        """Number of LLM requests stamped so far."""
        return self._next_step

    @property
    def ended(self) -> bool:
        """Whether :meth:`end` has run."""
        return self._ended is not None

    @property
    def recorder(self):  # -> TraceRecorder | None (import kept lazy: recorder starts a thread)
        """The shared :class:`~pbkv_sdk.recorder.TraceRecorder` of ``trace_path``, or ``None``."""
        if self.trace_path is None:
            return None
        from pbkv_sdk.recorder import get_recorder

        try:
            return get_recorder(self.trace_path)
        except OSError as exc:  # fail open: hints and end signals go on without a trace
            log.warning("PBKV: cannot record to %s (%s); recording is off for this workflow", self.trace_path, exc)
            self.trace_path = None
            return None

    def next_step(self) -> int:
        """Reserve the next 0-based step of this workflow (one per LLM request)."""
        with self._lock:
            step = self._next_step
            self._next_step += 1
            return step

    def expect_llm_call(self) -> None:
        """A framework integration saw this workflow start an LLM call that must go out stamped.

        At :meth:`end`, fewer stamped requests than announced calls means some left without
        hints (a client the SDK cannot reach); one warning per process says why and how to fix it.
        """
        with self._lock:
            self._expected_calls += 1

    def sent_without_hints(self) -> None:
        """Stamping sent one of this workflow's LLM calls without hints on purpose (a name the
        server would ignore, already warned about): :meth:`end` does not count it as a call the
        SDK could not reach."""
        with self._lock:
            self._unhinted += 1

    def mark_final(self) -> None:
        """The framework knows its next LLM request is the workflow's last: with ``kv_hints`` on,
        that request carries the workflow's end as a ``kv.evict`` action (applied by the engine
        once it is served). :meth:`end` is still to be called."""
        self.final_next = True

    def end(self, status: str = "completed") -> bool:
        """End the workflow: non-blocking end signal to the server and a ``workflow_end`` record.

        Only the first call acts; later calls return ``False``. Never raises for network trouble
        (the signal is sent in the background, see :func:`pbkv_sdk.ending.end_workflow`).

        Raises:
            ValueError: ``status`` is not one of ``completed``, ``failed``, ``cancelled``.
        """
        if status not in END_STATUSES:
            raise ValueError(f"status must be one of {END_STATUSES}, got {status!r}")
        with self._lock:
            if self._ended is not None:
                return False
            self._ended = status
            missing = self._expected_calls - self._next_step - self._unhinted
        if missing > 0:
            _warn_unstamped(self, missing)
        from pbkv_sdk.ending import end_workflow

        target = self.server_url or self.llm_origin
        if target is not None:
            end_workflow(self.workflow_id, status, server_url=target, timeout_s=self.end_timeout_s,
                         served_by=tuple(self.served_by))
        if self.kv_hints and not self.final_sent:  # the envelope carries the end on the next request
            queue_end(self.llm_origin, self.workflow_id)
        recorder = self.recorder
        if recorder is not None:
            recorder.write(WorkflowEndRecord(app=self.app, workflow_id=self.workflow_id, t=time.time(), status=status))
        return True

    def __repr__(self) -> str:
        return f"Workflow(app={self.app!r}, workflow_id={self.workflow_id!r}, steps={self._next_step})"


def current_workflow() -> Workflow | None:
    """The workflow of the running code path, or ``None`` outside any workflow."""
    return _workflow_var.get()


def current_agent() -> str | None:
    """The agent name of the running code path, or ``None``."""
    return _agent_var.get()


def current_internal() -> bool:
    """Whether the running LLM call is framework-internal (see :func:`set_internal`)."""
    return _internal_var.get()


def set_internal(internal: bool) -> contextvars.Token:
    """Mark this context's LLM calls as framework-internal (speaker selection, routing).

    They are stamped and recorded like any call, with ``internal: true`` in the trace, so that
    predictor training skips them while cache replay keeps them. Returns the token for
    :func:`reset_internal`.
    """
    return _internal_var.set(internal)


def reset_internal(token: contextvars.Token) -> None:
    """Undo :func:`set_internal`."""
    _internal_var.reset(token)


def set_workflow(wf: Workflow | None) -> contextvars.Token:
    """Make ``wf`` the current workflow of this context; returns the token for :func:`reset_workflow`."""
    return _workflow_var.set(wf)


def reset_workflow(token: contextvars.Token) -> None:
    """Undo :func:`set_workflow`."""
    _workflow_var.reset(token)


def set_agent(name: str | None) -> contextvars.Token:
    """Make ``name`` the current agent of this context; returns the token for :func:`reset_agent`."""
    return _agent_var.set(name)


def reset_agent(token: contextvars.Token) -> None:
    """Undo :func:`set_agent`."""
    _agent_var.reset(token)


@contextlib.contextmanager
def workflow(
    app: str | None = None,
    workflow_id: str | None = None,
    *,
    server_url: str | None = None,
    trace_path: str | os.PathLike[str] | None = None,
    end_timeout_s: float | None = None,
    body_hints: bool | None = None,
    kv_hints: bool | None = None,
) -> Iterator[Workflow]:
    """Run the block as one workflow; it ends ``completed`` on exit, ``failed`` on an exception.

    ``app``: ``$PBKV_APP`` wins when set, then ``app``, else ``"default"``; ``trace_path``
    defaults to ``$PBKV_TRACE_PATH``. Other arguments as :class:`Workflow`. The exception, if
    any, propagates unchanged.

    Raises:
        HintError: ``workflow_id`` is malformed (before the block runs).
    """
    wf = Workflow(
        resolve_app(app),
        workflow_id,
        server_url=server_url,
        trace_path=resolve_trace_path(trace_path),
        end_timeout_s=end_timeout_s,
        body_hints=body_hints,
        kv_hints=kv_hints,
    )
    token = _workflow_var.set(wf)
    status = "completed"
    try:
        yield wf
    except BaseException:
        status = "failed"
        raise
    finally:
        _workflow_var.reset(token)
        wf.end(status)


@contextlib.contextmanager
def agent(name: str) -> Iterator[None]:
    """Run the block as agent ``name`` (LLM requests inside are stamped with it)."""
    token = _agent_var.set(name)
    try:
        yield
    finally:
        _agent_var.reset(token)


_UNSTAMPED_WARNED = WarnOnce(log)


def _warn_unstamped(wf: Workflow, missing: int) -> None:
    _UNSTAMPED_WARNED("unstamped", UNSTAMPED_WARNING, missing, wf._expected_calls, wf.workflow_id, wf.app)


def resolve_app(app: str | None) -> str:
    """The app name to use: ``$PBKV_APP`` wins when set (``pbkv-sdk record --app``), then ``app``."""
    return os.environ.get(ENV_APP) or app or "default"


def resolve_trace_path(trace_path: str | os.PathLike[str] | None) -> str | None:
    """``trace_path`` if given, else ``$PBKV_TRACE_PATH``, else ``None`` (no recording)."""
    if trace_path is not None:
        return os.fspath(trace_path)
    return os.environ.get(ENV_TRACE_PATH) or None


def workflow_or_fresh(
    app: str | None,
    workflow_id: object,
    *,
    server_url: str | None = None,
    trace_path: str | os.PathLike[str] | None = None,
    end_timeout_s: float | None = None,
    body_hints: bool | None = None,
    kv_hints: bool | None = None,
) -> Workflow:
    """A :class:`Workflow` with the user-chosen ``workflow_id``, or a fresh random id if it is bad.

    Framework integrations use it: a malformed user-chosen id (not 1-128 chars of
    ``[A-Za-z0-9._:-]``, or not a string) must not break the user's run, so it is replaced (the
    SDK fails open) and logged as a warning once per distinct id (repeats at debug level).

    Args:
        app: app name, resolved with :func:`resolve_app` (``$PBKV_APP`` wins).
        workflow_id: the user's id; ``None`` for a fresh one.
        server_url, end_timeout_s, body_hints, kv_hints: as for :class:`Workflow`.
        trace_path: resolved with :func:`resolve_trace_path` (``$PBKV_TRACE_PATH`` if ``None``).

    Returns:
        The new workflow. Never raises :class:`~pbkv_contract.hints.HintError`.
    """
    kwargs = dict(server_url=server_url, trace_path=resolve_trace_path(trace_path), end_timeout_s=end_timeout_s,
                  body_hints=body_hints, kv_hints=kv_hints)
    try:
        return Workflow(resolve_app(app), workflow_id, **kwargs)  # type: ignore[arg-type]
    except HintError as exc:  # a bad user-chosen id must not break the run: use a fresh one
        _warn_bad_id(workflow_id, exc)
        return Workflow(resolve_app(app), None, **kwargs)


#: One warning per distinct bad workflow id; ids made up per run are capped (beyond, debug level).
_BAD_IDS_WARNED = WarnOnce(log)


def _warn_bad_id(workflow_id: object, exc: HintError) -> None:
    """One warning per distinct bad id (an app passing the same one each run is told once)."""
    _BAD_IDS_WARNED(repr(workflow_id), "PBKV: ignoring workflow id %r (%s); each run with it gets a fresh random id",
                    workflow_id, exc)
