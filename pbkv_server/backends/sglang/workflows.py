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
"""

from __future__ import annotations

import time
from typing import Any

from pbkv_contract.hints import BODY_KEY, HintError, Hints, parse_hints, validate_workflow_id
from pbkv_contract.prediction import Predictor
from pbkv_server.backends.book import WorkflowBook, predictor_or_none

from .settings import PluginSettings

__all__ = ["SGLangWorkflowBook", "hints_of_request"]

#: Attribute under which a parsed hint is cached on SGLang's ``Req`` (parse once per request).
_REQ_ATTR = "_pbkv_hints"
_NO_HINTS = (None, None)


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
    """

    def __init__(self, settings: PluginSettings, predictor: Predictor | None = None, clock=time.monotonic,
                 predict: bool = True):
        if predictor is None:
            predictor = predictor_or_none(settings.predictor, settings.horizon)
        super().__init__(settings.gamma, settings.horizon, predictor, settings.idle_retire_s, clock, predict)
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
                self.invocation(session)
                return session
        return self.request(hints, reason)

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
