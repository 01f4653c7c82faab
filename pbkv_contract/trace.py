"""Trace format v1: records, reader and writer (see ``docs/architecture.md``, "Trace format").

A trace is a JSONL file with one object per line, of two types:

``invocation``: one LLM call (app, workflow_id, step, agent, t_start/t_end in Unix seconds,
ttft_s, prompt/completion/cached tokens, ``prefix_hashes`` of the prompt, ``block_chars``, and
``features``, the request's semantic signal).

``workflow_end``: the end of a workflow (app, workflow_id, t, status).

Block hashes come from :mod:`pbkv_contract.blocks`, features from :mod:`pbkv_contract.features`.
Writers append whole lines and flush; readers skip a malformed or truncated line with a warning
and stop with :class:`TraceFormatError` on an unknown version.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from dataclasses import asdict, dataclass, field
from typing import IO, Any, Iterable, Iterator

from .blocks import DEFAULT_BLOCK_CHARS, block_token_counts

log = logging.getLogger(__name__)

__all__ = ["TRACE_VERSION", "TraceFormatError", "InvocationRecord", "WorkflowEndRecord", "TraceRecord",
           "parse_record", "iter_trace", "read_trace", "group_workflows", "TraceWriter"]

TRACE_VERSION = 1


class TraceFormatError(ValueError):
    """A trace cannot be read: unknown version, no records of the needed type, or bad file."""


@dataclass(slots=True)
class InvocationRecord:
    """One LLM invocation of a workflow (trace type ``invocation``).

    Attributes:
        app: application name.
        workflow_id: workflow the call belongs to.
        step: 0-based index of this call within its workflow.
        agent: agent name (LangGraph node, AutoGen participant, CrewAI role).
        t_start: request start, Unix seconds.
        t_end: request end (last token), Unix seconds.
        ttft_s: time to first token, seconds (0.0 if unknown).
        prompt_tokens: prompt length in tokens.
        completion_tokens: output length in tokens.
        cached_tokens: prompt tokens served from the prefix cache (0 if unknown).
        prefix_hashes: chained block hashes of the canonical prompt (:func:`prefix_hashes`).
        block_chars: characters per hashed block.
        features: L2-normalised feature vector of the newest non-system message
            (:func:`pbkv_contract.features.request_features`), length ``FEATURE_DIM``; may be empty.
        text: raw prompt text, only when the user asked for it.
        block_tokens: tokens of each prefix-hash block when the writer knew them (the live server
            does); ``None`` means replay spreads ``prompt_tokens`` with :func:`block_token_counts`.
        session_id: the session (a chat conversation, an SGLang session) the workflow belongs to,
            when several workflows form one user's sequence, such as a chat whose turns are each a
            workflow; ``None``: the workflow is its own session. Replay runs a session's
            workflows one after the other.
        priority: the request priority the client sent (SGLang ``priority``, Dynamo
            ``nvext.agent_hints.priority``), when known.
        cache_ttl_s: the cache TTL the client asked for (Dynamo ``nvext.cache_control``),
            seconds, when known.
    """

    app: str
    workflow_id: str
    step: int
    agent: str
    t_start: float
    t_end: float
    prompt_tokens: int
    completion_tokens: int
    prefix_hashes: list[str]
    ttft_s: float = 0.0
    cached_tokens: int = 0
    block_chars: int = DEFAULT_BLOCK_CHARS
    features: list[float] = field(default_factory=list)
    text: str | None = None
    block_tokens: list[int] | None = None
    session_id: str | None = None
    priority: int | None = None
    cache_ttl_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON object of this record (``type`` and ``v`` included; optional fields only if set)."""
        data = {"type": "invocation", "v": TRACE_VERSION, **asdict(self)}
        for optional in ("text", "block_tokens", "session_id", "priority", "cache_ttl_s"):
            if data[optional] is None:
                del data[optional]
        return data

    def tokens_per_block(self) -> list[int]:
        """Tokens of each prefix-hash block: ``block_tokens`` if recorded, else an even spread."""
        if self.block_tokens is not None and len(self.block_tokens) == len(self.prefix_hashes):
            return list(self.block_tokens)
        return block_token_counts(self.prompt_tokens, len(self.prefix_hashes))


@dataclass(slots=True)
class WorkflowEndRecord:
    """The end of a workflow (trace type ``workflow_end``); ``t`` in Unix seconds."""

    app: str
    workflow_id: str
    t: float
    status: str = "completed"

    def to_json(self) -> dict[str, Any]:
        """The JSON object of this record."""
        return {"type": "workflow_end", "v": TRACE_VERSION, **asdict(self)}


TraceRecord = InvocationRecord | WorkflowEndRecord


# --------------------------------------------------------------------------- reading


def parse_record(data: Any) -> TraceRecord:
    """Build a record from one decoded JSON line.

    Raises:
        TraceFormatError: the version is not 1 (callers stop: the whole file is of another format).
        ValueError: the object is not a valid v1 record (callers skip the line with a warning).
    """
    if not isinstance(data, dict):
        raise ValueError("line is not a JSON object")
    if data.get("v") != TRACE_VERSION:
        raise TraceFormatError(f"unsupported trace version {data.get('v')!r} (this reader knows v{TRACE_VERSION})")
    kind = data.get("type")
    fields = {k: v for k, v in data.items() if k not in ("type", "v")}
    try:
        if kind == "invocation":
            rec = InvocationRecord(**fields)
            _check_invocation(rec)
            return rec
        if kind == "workflow_end":
            rec_end = WorkflowEndRecord(**fields)
            if not isinstance(rec_end.workflow_id, str) or not isinstance(rec_end.t, (int, float)):
                raise ValueError("workflow_end needs workflow_id (str) and t (number)")
            return rec_end
    except TypeError as exc:
        raise ValueError(f"bad fields for {kind}: {exc}") from None
    raise ValueError(f"unknown record type {kind!r}")


def _check_invocation(rec: InvocationRecord) -> None:
    if not isinstance(rec.workflow_id, str) or not isinstance(rec.agent, str) or not rec.agent:
        raise ValueError("invocation needs workflow_id and agent strings")
    if rec.session_id is not None and (not isinstance(rec.session_id, str) or not rec.session_id):
        raise ValueError("session_id must be a non-empty string or null")
    if rec.priority is not None and (not isinstance(rec.priority, int) or isinstance(rec.priority, bool)):
        raise ValueError("priority must be an integer or null")
    if rec.cache_ttl_s is not None and (not isinstance(rec.cache_ttl_s, (int, float))
                                        or isinstance(rec.cache_ttl_s, bool) or not rec.cache_ttl_s >= 0):
        raise ValueError("cache_ttl_s must be a non-negative number or null")
    for name in ("step", "prompt_tokens", "completion_tokens", "cached_tokens", "block_chars"):
        value = getattr(rec, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"invocation field {name} must be a non-negative int")
    if not isinstance(rec.prefix_hashes, list) or not all(isinstance(h, str) for h in rec.prefix_hashes):
        raise ValueError("prefix_hashes must be a list of strings")
    if rec.block_tokens is not None and (
        not isinstance(rec.block_tokens, list)
        or len(rec.block_tokens) != len(rec.prefix_hashes)
        or not all(isinstance(t, int) and t >= 0 for t in rec.block_tokens)
    ):
        raise ValueError("block_tokens must be a list of non-negative ints, one per prefix hash")
    if not isinstance(rec.features, list):
        raise ValueError("features must be a list of numbers")
    for name in ("t_start", "t_end", "ttft_s"):
        if not isinstance(getattr(rec, name), (int, float)):
            raise ValueError(f"invocation field {name} must be a number")


def iter_trace(path: str | os.PathLike[str], *, strict: bool = False) -> Iterator[TraceRecord]:
    """Yield the records of one trace file in file order.

    A malformed or truncated line is skipped with a warning naming the file and line number
    (or raises ``ValueError`` with ``strict=True``). Blank lines are ignored.

    Raises:
        TraceFormatError: a line declares a version other than 1.
        OSError: the file cannot be opened.
    """
    with open(path, encoding="utf-8", errors="replace") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                yield parse_record(json.loads(line))
            except TraceFormatError as exc:
                raise TraceFormatError(f"{path}:{lineno}: {exc}") from None
            except ValueError as exc:  # json.JSONDecodeError is a ValueError
                if strict:
                    raise ValueError(f"{path}:{lineno}: {exc}") from None
                log.warning("%s:%d: skipping malformed trace line (%s)", path, lineno, exc)


def read_trace(paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> list[TraceRecord]:
    """Read one or more trace files into a list of records (file order, files in given order).

    Raises:
        TraceFormatError: unknown version, or the files hold no invocation at all.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    records: list[TraceRecord] = []
    for path in paths:
        records.extend(iter_trace(path))
    if not any(isinstance(r, InvocationRecord) for r in records):
        raise TraceFormatError("trace holds no invocation records")
    return records


def group_workflows(records: Iterable[TraceRecord]) -> dict[str, list[InvocationRecord]]:
    """Invocations per workflow id, sorted by step (ties by start time). Insertion order kept."""
    out: dict[str, list[InvocationRecord]] = {}
    for rec in records:
        if isinstance(rec, InvocationRecord):
            out.setdefault(rec.workflow_id, []).append(rec)
    for invs in out.values():
        invs.sort(key=lambda r: (r.step, r.t_start))
    return out


# --------------------------------------------------------------------------- writing


class TraceWriter:
    """Append whole JSON lines to a trace file; safe to share between threads.

    Each record is written as one ``write`` of a complete line followed by ``flush``, under a
    lock, so concurrent writers never interleave partial lines and a crash loses at most the line
    being written. Use as a context manager or call :meth:`close`.
    """

    def __init__(self, path: str | os.PathLike[str]):
        self.path = os.fspath(path)
        parent = os.path.dirname(self.path)
        if parent:
            os.makedirs(parent, exist_ok=True)
        self._fh: IO[str] | None = open(self.path, "a", encoding="utf-8")
        self._lock = threading.Lock()

    def write(self, record: TraceRecord) -> None:
        """Append one record as a line. Raises ``ValueError`` after :meth:`close`."""
        line = json.dumps(record.to_json(), separators=(",", ":"), ensure_ascii=False) + "\n"
        with self._lock:
            if self._fh is None:
                raise ValueError("trace writer is closed")
            self._fh.write(line)
            self._fh.flush()

    def close(self) -> None:
        """Flush and close the file; idempotent."""
        with self._lock:
            if self._fh is not None:
                self._fh.close()
                self._fh = None

    def __enter__(self) -> "TraceWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
