"""Workflows, predictions and node scores of one SGLang scheduler process.

Each scheduler process owns one :class:`SGLangWorkflowBook` (held by its PBKV tree core): the
backends' shared :class:`~pbkv_server.backends.book.WorkflowBook` (the engine core's workflow
table and score board) plus what is SGLang's own: hints arrive as
``req.sampling_params.custom_params["pbkv"]`` (hint protocol v1, body form), parsed once per
``Req``, and a request's first sight by the cache is its invocation. A malformed hint is counted,
logged once, and the request is served anonymously. A request without PBKV hints that carries
SGLang's own top-level ``session_id`` (``Req.session_id``) belongs to the workflow of that id
(:meth:`~pbkv_server.engine.workflows.WorkflowTable.session_hints`), and SGLang's
``/close_session`` ends it (:func:`~pbkv_server.backends.sglang.ipc.end_session_workflow`).

The engines' KV-hint envelope comes from SGLang's own ``Req.kv_hints`` (sgl-project/sglang#38891:
native ``/generate`` and the Engine API) or, from the OpenAI routes, which do not carry that field,
``custom_params["kv_hints"]``; it is read by :func:`pbkv_contract.hints.parse_kv_hints` through
:meth:`~pbkv_server.backends.book.WorkflowBook.kv_hints`. A demote/evict (SGLang's
``kv.demote`` of ``payload.session_id``) of another workflow retires it at once; one of the
request's own (``kv.deref``, a final turn) when the request finished
(:meth:`SGLangWorkflowBook.finish_request`, from the cache's checkpoint of the finished request).
A retain with ``payload.priority`` becomes the ``Req.priority`` that SGLang's priority eviction
reads, when the request set none. A retain or fetch of another active workflow restarts its idle
clock (:meth:`~pbkv_server.backends.book.WorkflowBook.keep`); a fetch loads nothing itself: SGLang
loads a request's host-tier hits back at admission, and the plugin's prefetch rounds run by value. A malformed envelope is
counted as a malformed hint; unknown actions as ignored.

For a policy with lifecycle hooks (``pbkv``: :mod:`pbkv_server.backends.lifecycle`) the request
is named by its ``rid`` as an :class:`~pbkv_server.engine.types.EngineRequest` whose ``blocks``
are its prompt's keys, one per token (:class:`~pbkv_server.backends.lifecycle.PrefixKeys` of
``Req.origin_input_ids``: ``pbkv``'s rule 7 learns from them whether an app's calls extend their
conversation's previous prompt); the cache reports its admission, its prompt's inserts and its
finish (:mod:`.cache`, :mod:`.admission`).
"""

from __future__ import annotations

import time
from typing import Any

import logging

from pbkv_contract.hints import BODY_KEY, KV_HINTS_KEY, HintError, Hints, parse_hints, validate_workflow_id
from pbkv_contract.prediction import Predictor
from pbkv_server.backends.book import WorkflowBook, predictor_or_none
from pbkv_server.backends.lifecycle import PrefixKeys
from pbkv_server.engine.policies.base import Policy
from pbkv_server.engine.types import EngineRequest

from .settings import PluginSettings

log = logging.getLogger(__name__)

__all__ = ["SGLangWorkflowBook", "hints_of_request", "END_AFTER_ATTR"]

#: Attribute under which a parsed hint is cached on SGLang's ``Req`` (parse once per request).
_REQ_ATTR = "_pbkv_hints"
_NO_HINTS = (None, None)
#: Attribute of a ``Req`` whose workflow is retired once it finished (its own demote/evict).
END_AFTER_ATTR = "_pbkv_end_after"


def hints_of_request(req: Any) -> tuple[Hints | None, str | None]:
    """Hints of an SGLang ``Req`` (or any object with ``sampling_params.custom_params``).

    Returns:
        ``(hints, None)``, ``(None, None)`` for an anonymous request, or ``(None, reason)`` for a
        malformed hint. Never raises. The result is cached on the request object.
    """
    cached = getattr(req, _REQ_ATTR, None)
    if cached is not None:
        return cached
    try:
        custom = getattr(getattr(req, "sampling_params", None), "custom_params", None)
        if not isinstance(custom, dict) or BODY_KEY not in custom:
            result = _NO_HINTS
        else:
            result = parse_hints(None, {"custom_params": custom})
    except Exception as exc:  # defensive: never fail a request over hints
        result = (None, f"malformed hint: {type(exc).__name__}")
    try:
        setattr(req, _REQ_ATTR, result)
    except Exception:
        pass
    return result


class SGLangWorkflowBook(WorkflowBook):
    """The shared backend book, configured from the plugin settings, seeing SGLang ``Req`` objects.

    Args:
        settings: plugin settings (gamma, horizon, predictor spec, idle retirement).
        predictor: a ready :class:`~pbkv_contract.prediction.Predictor`; ``None`` builds one from
            ``settings.predictor`` (a build failure is logged and leaves every score 0, so
            ``pbkv-he`` degrades to the ``pbkv-lae`` order).
        clock: time source in seconds (tests pass a fake one).
        predict: ask the predictor for predictions (``False`` for policies that read no score).
        policy: the eviction strategy's engine-core policy, whose lifecycle hooks this book feeds.
    """

    def __init__(self, settings: PluginSettings, predictor: Predictor | None = None, clock=time.monotonic,
                 predict: bool = True, policy: Policy | None = None):
        if predictor is None:
            predictor = predictor_or_none(settings.predictor, settings.horizon)
        super().__init__(settings.gamma, settings.horizon, predictor, settings.idle_retire_s, clock, predict, policy)
        self.settings = settings

    def begin_request(self, req: Any) -> Hints | None:
        """Register ``req``'s invocation the first time the cache sees it; return its hints.

        Later calls for the same request only return the cached hints. Anonymous and malformed
        requests return ``None`` (malformed ones are counted and logged once).
        """
        hints, reason = hints_of_request(req)
        if getattr(req, "_pbkv_begun", False):
            return hints
        try:
            req._pbkv_begun = True
        except Exception:
            pass
        if hints is None and reason is None:
            session = self._session_hints(req)
            if session is not None:
                self.invocation(session, request=self._engine_request(req, session))
                self._kv_hints(req, session)
                return session
        hints = self.request(hints, reason, request=self._engine_request(req, hints))
        self._kv_hints(req, hints)
        return hints

    def _engine_request(self, req: Any, hints: Hints | None) -> EngineRequest | None:
        """``req`` as the policy's hooks see it (``None`` without hooks or without an ``rid``):
        its id, hints, output budget, session and priority."""
        rid = getattr(req, "rid", None)
        if self.feed is None or rid is None:
            return None
        sid = getattr(req, "session_id", None)
        priority = getattr(req, "priority", None)
        max_new = getattr(getattr(req, "sampling_params", None), "max_new_tokens", None)
        tokens = getattr(req, "origin_input_ids", None)
        blocks = PrefixKeys(tokens) if tokens is not None else ()
        return EngineRequest(str(rid), blocks, (), max_new if isinstance(max_new, int) else 1, hints,
                             session_id=sid if isinstance(sid, str) else None,
                             priority=priority if isinstance(priority, int) else None)

    def _kv_hints(self, req: Any, hints: Hints | None) -> None:
        """Apply ``req``'s KV-hint envelope (module docstring); never raises."""
        try:
            value = getattr(req, "kv_hints", None)
            if value is not None and not isinstance(value, dict):
                import msgspec  # SGLang's own KvHintsEnvelope struct (sglang.srt.managers.kv_hints)

                value = msgspec.to_builtins(value)
            if value is None:
                custom = getattr(getattr(req, "sampling_params", None), "custom_params", None)
                value = custom.get(KV_HINTS_KEY) if isinstance(custom, dict) else None
            if value is None:
                return
            envelope, end_after = self.kv_hints({KV_HINTS_KEY: value}, hints)
            if end_after is not None:
                setattr(req, END_AFTER_ATTR, end_after)
            own = hints.workflow_id if hints is not None else None
            for action in envelope.actions if envelope is not None else ():
                priority = action.payload.get("priority")
                if (action.kind == "retain" and action.target(own) == own and isinstance(priority, int)
                        and not isinstance(priority, bool) and getattr(req, "priority", 0) is None):
                    req.priority = priority  # what SGLang's priority eviction reads, unless the request set one
        except Exception:
            log.exception("PBKV: kv_hints bookkeeping failed for request %s", getattr(req, "rid", "?"))

    def finish_request(self, req: Any) -> bool:
        """``req`` finished: retire its workflow if its envelope asked so (a demote/evict/deref of
        its own trajectory). Returns whether a workflow was retired; idempotent, never raises."""
        workflow_id = getattr(req, END_AFTER_ATTR, None)
        if workflow_id is None:
            return False
        try:
            setattr(req, END_AFTER_ATTR, None)
            return self.end_workflow(workflow_id, "completed")
        except Exception:
            log.exception("PBKV: ending workflow %s failed", workflow_id)
            return False

    def _session_hints(self, req: Any) -> Hints | None:
        """Hints of a request that names only an SGLang session (cached on the request like parsed
        hints), or ``None``; an id outside the workflow-id rule is left anonymous."""
        sid = getattr(req, "session_id", None)
        if not isinstance(sid, str):
            return None
        try:
            validate_workflow_id(sid)
        except HintError:
            return None
        hints = self.table.session_hints(sid)
        try:
            setattr(req, _REQ_ATTR, (hints, None))
        except Exception:
            pass
        return hints
