"""Trace format v1: records, reader and writer.

A trace is a JSONL file with one object per line; every line carries ``"v": 1`` and a ``type``:

``invocation``: one LLM call of a workflow.

* Required: ``app`` (str), ``workflow_id`` (str), ``step`` (int >= 0, the call's index in its
  workflow), ``agent`` (non-empty str), ``t_start`` and ``t_end`` (numbers, Unix seconds),
  ``prompt_tokens`` and ``completion_tokens`` (ints >= 0), ``prefix_hashes`` (list of str: the
  chained block hashes of the prompt, :mod:`pbkv_contract.blocks`).
* Optional; absent or ``null`` means *unknown*, and the record then holds the value given here:

  ===================  =====================================  ====================================
  field                when known                             unknown
  ===================  =====================================  ====================================
  ``ttft_s``           time to first token, seconds (>= 0)    ``None``
  ``cached_tokens``    prompt tokens the serving run reused    ``None`` (not 0: "nothing reused" is
                       from its prefix cache (int >= 0)        a measurement, unknown is not)
  ``block_chars``      characters per hashed block (>= 1)     ``None``
  ``features``         ``FEATURE_DIM`` finite numbers, the    ``[]`` (no semantic signal: the
                       request's semantic signal              predictor reads zeros)
                       (:mod:`pbkv_contract.features`)
  ``text``             the raw canonical prompt (str)         ``None`` (not recorded)
  ``block_tokens``     tokens of each hashed block (ints      ``None`` (replay spreads
                       >= 0, one per hash)                    ``prompt_tokens`` evenly)
  ``session_id``       the session (chat conversation, SGLang ``None`` (the workflow is its own
                       session) several workflows belong to   session)
                       (non-empty str)
  ``internal``         ``true``: a call the framework makes   ``None`` (an agent step)
                       for itself (AutoGen speaker
                       selection); replay keeps it,
                       predictor training skips it
  ``priority``         the request priority the client sent   ``None``
                       (SGLang ``priority``, Dynamo
                       ``nvext.agent_hints.priority``; int)
  ``cache_ttl_s``      the cache TTL the client asked for     ``None``
                       (Dynamo ``nvext.cache_control``),
                       seconds (>= 0)
  ``served_by``        the engine that answered, when it      ``None`` (not said: a real server,
                       said so: ``"sim"`` = pbkv-server's     as far as the writer knows)
                       simulator, whose replies (and so
                       ``completion_tokens``) a scenario
                       made up (non-empty str)
  ===================  =====================================  ====================================

``workflow_end``: the end of a workflow. Required ``app``, ``workflow_id``, ``t`` (number, Unix
seconds); optional ``status`` (str; absent or ``null``: ``"completed"``, the v1 default).

``meta``: how the trace was made, written once, as the first line, by a writer that converts
other data (``pbkv-sdk import``). Required ``writer`` (str: the command that wrote it); optional
``source`` (str: what it read), ``options`` (object: the options that shaped the trace, name ->
JSON value) and ``note`` (str: those options in one line, for a replay to print). It is not a
record of the workload: :func:`iter_trace` and :func:`read_trace` do not return it (their
consumers only ever see invocations and workflow ends); :func:`trace_meta` reads it. A reader
written before this type existed skips the line as one of an unknown type, and reads the rest.

Reading is graded by what a consumer (replay, predictor training, ``pbkv-sdk validate``; all of
them parse lines with :func:`parse_line`) can still use:

* a line it cannot use (not JSON, not an object, no ``v``, unknown ``type``, a required field
  missing, ``null`` or invalid) is skipped;
* an optional field that is present but invalid (``features`` of the wrong length, a negative
  ``cached_tokens``, ...) is read as unknown and the line kept;
* inconsistent values are mended and the line kept: ``t_end`` before ``t_start`` reads as
  ``t_start``, ``cached_tokens`` above ``prompt_tokens`` as unknown, and text with lone surrogates
  (a JSON ``"\ud800"`` escape, not valid Unicode) gets U+FFFD in their place, as do bytes that
  are not UTF-8 (counted under ``utf-8``);
* a field this reader does not know is ignored (other tools may add their own);
* integral floats (``3.0``) are read as ints;
* a line with a ``v`` other than 1 stops the whole file with :class:`TraceFormatError` (the file is
  of another format version), and a trace without any usable invocation is a
  :class:`TraceFormatError` that says what was skipped.

Each file's problems are summed up in at most two warnings (skipped lines; fields read as unknown,
mended or ignored), each with its count and the first line concerned, however many lines are affected.
Writers append whole lines and flush (:class:`TraceWriter`, in :mod:`pbkv_contract.trace_writer`), and leave
unknown optional fields out.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any, Callable, Iterable, Iterator

from .blocks import block_token_counts
from .collector import quiet_collector
from .features import FEATURE_DIM
from .trace_writer import TraceWriter

log = logging.getLogger(__name__)

__all__ = ["TRACE_VERSION", "TraceFormatError", "InvocationRecord", "WorkflowEndRecord", "TraceRecord", "TraceMeta",
           "TraceFileReport", "parse_line", "parse_record", "iter_trace", "read_trace", "trace_meta", "group_workflows",
           "TraceWriter", "looks_like_trace", "SERVED_BY_SIM"]

TRACE_VERSION = 1
#: ``served_by`` of a call pbkv-server's simulator answered (its header ``X-PBKV-Engine: sim``).
SERVED_BY_SIM = "sim"

#: Bytes that were not UTF-8, as ``errors="surrogateescape"`` decodes them.
_ESCAPED_BYTES = re.compile("[\udc80-\udcff]")


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
        prompt_tokens: prompt length in tokens.
        completion_tokens: output length in tokens.
        prefix_hashes: chained block hashes of the canonical prompt (:func:`prefix_hashes`).
        ttft_s: time to first token, seconds; ``None`` if unknown.
        cached_tokens: prompt tokens served from the prefix cache in the recorded run; ``None``
            if unknown (0 means the run reported that nothing was reused).
        block_chars: characters per hashed block; ``None`` if unknown.
        features: L2-normalised feature vector of the newest non-system message
            (:func:`pbkv_contract.features.request_features`), length ``FEATURE_DIM``; empty if
            unknown.
        text: raw prompt text, only when the user asked for it (``None`` otherwise).
        block_tokens: tokens of each prefix-hash block when the writer knew them (the live server
            does); ``None`` (unknown) means replay spreads ``prompt_tokens`` with :func:`block_token_counts`.
        session_id: the session (a chat conversation, an SGLang session) the workflow belongs to,
            when several workflows form one user's sequence, such as a chat whose turns are each a
            workflow; ``None``: the workflow is its own session. Replay runs a session's
            workflows one after the other.
        internal: ``True`` for a call the framework makes for itself rather than as an agent step
            (AutoGen's speaker selection): cache replay keeps it, predictor training skips it.
            ``None`` (the default, and every trace written before this field) means an agent step;
            the key is only written when set.
        priority: the request priority the client sent (SGLang ``priority``, Dynamo
            ``nvext.agent_hints.priority``), when known.
        cache_ttl_s: the cache TTL the client asked for (Dynamo ``nvext.cache_control``),
            seconds, when known.
        served_by: the engine that answered, when it said so (:data:`SERVED_BY_SIM`: pbkv-server's
            simulator, whose reply lengths are made up); ``None`` in traces written before the field.
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
    ttft_s: float | None = None
    cached_tokens: int | None = None
    block_chars: int | None = None
    features: list[float] = field(default_factory=list)
    text: str | None = None
    block_tokens: list[int] | None = None
    session_id: str | None = None
    internal: bool | None = None
    priority: int | None = None
    cache_ttl_s: float | None = None
    served_by: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON object of this record (``type`` and ``v`` included; unknown optional fields left out)."""
        data = {"type": "invocation", "v": TRACE_VERSION, **asdict(self)}
        for optional in _NULLABLE:
            if data[optional] is None:
                del data[optional]
        return data

    def tokens_per_block(self) -> list[int]:
        """Tokens of each prefix-hash block: ``block_tokens`` if recorded, else an even spread."""
        if self.block_tokens is not None and len(self.block_tokens) == len(self.prefix_hashes):
            return list(self.block_tokens)
        return block_token_counts(self.prompt_tokens, len(self.prefix_hashes))


#: Optional invocation fields whose unknown value is ``None`` (left out when writing).
_NULLABLE = ("ttft_s", "cached_tokens", "block_chars", "text", "block_tokens", "session_id", "internal", "priority",
             "cache_ttl_s", "served_by")


@dataclass(slots=True)
class WorkflowEndRecord:
    """The end of a workflow (trace type ``workflow_end``).

    Attributes:
        app: application name.
        workflow_id: the workflow that ended.
        t: end time, Unix seconds.
        status: ``"completed"``, ``"failed"`` or ``"cancelled"`` (any string is kept); absent or
            ``null`` in a file reads as ``"completed"``.
    """

    app: str
    workflow_id: str
    t: float
    status: str = "completed"

    def to_json(self) -> dict[str, Any]:
        """The JSON object of this record."""
        return {"type": "workflow_end", "v": TRACE_VERSION, **asdict(self)}


TraceRecord = InvocationRecord | WorkflowEndRecord


@dataclass(slots=True)
class TraceMeta:
    """How a trace was made (trace type ``meta``; first line of a converted trace).

    Not a workload record: :func:`iter_trace` and :func:`read_trace` leave it out, :func:`trace_meta`
    returns it.

    Attributes:
        writer: the command or tool that wrote the trace (``"pbkv-sdk import kv-cache-tester"``).
        source: what it read (a file name); ``""`` if not said.
        options: the options that shaped the trace (name -> JSON value).
        note: the options in one line, as a replay prints them; ``""`` if not said.
    """

    writer: str
    source: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        """The JSON object of this record."""
        return {"type": "meta", "v": TRACE_VERSION, **asdict(self)}


# --------------------------------------------------------------------------- reading


@dataclass
class TraceFileReport:
    """What reading one trace file found (filled by :func:`iter_trace`).

    Attributes:
        path: the file.
        lines: non-blank lines read.
        records: records returned.
        skipped: ``(line number, reason)`` of every line that could not be used (1-based numbers).
        fields: per field name, ``[lines, first line number, reason]`` of optional fields read as
            unknown because they were invalid, and of unknown fields (ignored).
        meta: the file's first ``meta`` line (how the trace was made), or ``None``; not counted
            in ``records``.
    """

    path: str
    lines: int = 0
    records: int = 0
    skipped: list[tuple[int, str]] = field(default_factory=list)
    fields: dict[str, list[Any]] = field(default_factory=dict)
    meta: TraceMeta | None = None

    def warnings(self) -> list[str]:
        """At most two one-line summaries: skipped lines, then fields read as unknown, mended or ignored."""
        out = []
        if self.skipped:
            lineno, reason = self.skipped[0]
            # "path:line:" first, as compilers do: editors and terminals jump to the first one.
            n = len(self.skipped)
            out.append(f"{self.path}:{lineno}: skipped {n} of {self.lines} lines that cannot be used; "
                       f"{'the first' if n > 1 else 'it'}: {reason}")
        if self.fields:
            parts = [f"{name} on {n} line{'s' if n != 1 else ''} (first: line {first}: {reason})"
                     for name, (n, first, reason) in self.fields.items()]
            out.append(f"{self.path}: fields read as unknown, mended or ignored: " + "; ".join(parts))
        return out

    def _note(self, lineno: int, notes: list[tuple[str, str]]) -> None:
        for name, reason in notes:
            entry = self.fields.get(name)
            if entry is None:
                self.fields[name] = [1, lineno, reason]
            else:
                entry[0] += 1


def parse_line(line: str, notes: list[tuple[str, str]] | None = None) -> TraceRecord | TraceMeta:
    """Build a record from one line of a trace file: the parse every trace consumer uses.

    Args:
        line: one line of JSON text.
        notes: if given, receives ``(field, reason)`` for each optional field read as unknown
            because it was invalid, and for each unknown field (ignored).

    Raises:
        TraceFormatError: the line declares a version other than 1 (callers stop: the whole file
            is of another format).
        ValueError: the line cannot be used (not JSON, or see :func:`parse_record`); callers skip it.
    """
    try:
        data = json.loads(line)
    except ValueError as exc:  # json.JSONDecodeError is a ValueError
        raise ValueError(f"not valid JSON ({exc})") from None
    return parse_record(data, notes)


def parse_record(data: Any, notes: list[tuple[str, str]] | None = None) -> TraceRecord | TraceMeta:
    """Build a record from one decoded JSON line (the field rules are in the module docstring).

    Raises:
        TraceFormatError: the version is not 1.
        ValueError: not an object, no ``v``, an unknown type, or a required field missing, null or
            invalid.
    """
    if not isinstance(data, dict):
        raise ValueError("line is not a JSON object")
    version = data.get("v")
    if version is None:
        raise ValueError("no trace version 'v'")
    if version != TRACE_VERSION or isinstance(version, bool):
        raise TraceFormatError(f"unsupported trace version {version!r} (this reader knows v{TRACE_VERSION})")
    kind = data.get("type")
    if kind == "invocation":
        spec, make = _INVOCATION, InvocationRecord
    elif kind == "workflow_end":
        spec, make = _WORKFLOW_END, WorkflowEndRecord
    elif kind == "meta":
        spec, make = _META, TraceMeta
    else:
        raise ValueError(f"unknown record type {kind!r}")
    values: dict[str, Any] = {}
    for name, (required, check) in spec.items():
        raw = data.get(name)
        if raw is None:
            if required:
                raise ValueError(f"{kind} field {name} is {'null' if name in data else 'missing'}")
            continue  # unknown: the dataclass default
        try:
            values[name] = check(raw)
        except ValueError as exc:
            if required:
                raise ValueError(f"{kind} field {name} {exc}") from None
            if notes is not None:
                notes.append((name, f"{exc}; read as unknown"))
    if notes is not None:
        notes.extend((name, "unknown field, ignored") for name in data if name not in spec and name not in ("v", "type"))
    found: list[tuple[str, str]] = []
    for name, value in values.items():
        if isinstance(value, str) and not _is_unicode(value):
            # a JSON "\ud800" escape decodes to a lone surrogate, which no UTF-8 output can carry
            values[name] = value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
            found.append((name, "lone surrogate(s), replaced by U+FFFD"))
    if kind == "invocation":
        _reconcile(values, found)
    if notes is not None:
        notes.extend(found)
    return make(**values)


def _reconcile(values: dict[str, Any], found: list[tuple[str, str]]) -> None:
    """Cross-field rules of an invocation: each fix keeps the line and is reported in ``found``."""
    if "block_tokens" in values and len(values["block_tokens"]) != len(values["prefix_hashes"]):
        del values["block_tokens"]
        found.append(("block_tokens", "not one count per prefix hash; read as unknown"))
    if values["t_end"] < values["t_start"]:
        values["t_end"] = values["t_start"]  # a latency below 0 would poison every mean it enters
        found.append(("t_end", "before t_start; read as t_start"))
    if values.get("cached_tokens", 0) > values["prompt_tokens"]:
        del values["cached_tokens"]
        found.append(("cached_tokens", "more than prompt_tokens; read as unknown"))


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("must be a string")
    return value


def _name(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError("must be a non-empty string")
    return value


def _integer(value: Any, minimum: int = 0) -> int:
    """An int >= ``minimum``; integral floats (other tools' JSON writers) are accepted."""
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or (isinstance(value, float) and not value.is_integer()) or value < minimum):
        raise ValueError(f"must be an integer >= {minimum}")
    return int(value)


def _number(value: Any, minimum: float = -math.inf) -> float:
    """A finite number >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < minimum:
        raise ValueError("must be a finite number" + (f" >= {minimum:g}" if minimum > -math.inf else ""))
    return value


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError("must be true or false")
    return value


def _hashes(value: Any) -> list[str]:
    # the type set is found in C: a long prompt holds thousands of hashes
    if not isinstance(value, list) or (set(map(type, value)) - {str} and not all(isinstance(h, str) for h in value)):
        raise ValueError("must be a list of strings")
    return value


def _object(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError("must be a JSON object")
    return value


def _counts(value: Any) -> list[int]:
    if not isinstance(value, list):
        raise ValueError("must be a list of integers >= 0")
    if value and set(map(type, value)) == {int} and min(value) >= 0:  # the usual list, checked in C
        return value
    return [_integer(v) for v in value]


def _features(value: Any) -> list[float]:
    if not isinstance(value, list):
        raise ValueError("must be a list of numbers")
    if value and len(value) != FEATURE_DIM:
        raise ValueError(f"has {len(value)} numbers, not {FEATURE_DIM}")
    return [_number(v) for v in value]


#: Field name -> (required, check); a check returns the value to keep or raises ValueError(reason).
_INVOCATION: dict[str, tuple[bool, Callable[[Any], Any]]] = {
    "app": (True, _string), "workflow_id": (True, _string), "step": (True, _integer), "agent": (True, _name),
    "t_start": (True, _number), "t_end": (True, _number), "prompt_tokens": (True, _integer),
    "completion_tokens": (True, _integer), "prefix_hashes": (True, _hashes),
    "ttft_s": (False, partial(_number, minimum=0.0)), "cached_tokens": (False, _integer),
    "block_chars": (False, partial(_integer, minimum=1)), "features": (False, _features), "text": (False, _string),
    "block_tokens": (False, _counts), "session_id": (False, _name), "internal": (False, _flag),
    "priority": (False, partial(_integer, minimum=-(2**63))), "cache_ttl_s": (False, partial(_number, minimum=0.0)),
    "served_by": (False, _name),
}
_WORKFLOW_END: dict[str, tuple[bool, Callable[[Any], Any]]] = {
    "app": (True, _string), "workflow_id": (True, _string), "t": (True, _number), "status": (False, _string),
}
_META: dict[str, tuple[bool, Callable[[Any], Any]]] = {
    "writer": (True, _name), "source": (False, _string), "options": (False, _object), "note": (False, _string),
}


def iter_trace(
    path: str | os.PathLike[str], *, strict: bool = False, report: TraceFileReport | None = None,
    warn: bool = True,
) -> Iterator[TraceRecord]:
    """Yield the records of one trace file in file order.

    Lines are parsed with :func:`parse_line`. Unusable lines are skipped and invalid optional
    fields read as unknown; when the file is done, its problems are logged as at most two
    warnings with counts (:meth:`TraceFileReport.warnings`). Blank lines are ignored, and ``meta``
    lines are not records of the workload: the first goes to ``report.meta``.

    Args:
        path: the file.
        strict: raise ``ValueError`` (with file and line number) at the first problem of any kind
            instead: for checking that a writer produces exact v1.
        report: filled with what was read and skipped, if given.
        warn: log the file's warnings when it is done (``False``: the caller logs
            ``report.warnings()`` itself, or says the same in its error).

    Raises:
        TraceFormatError: a line declares a version other than 1.
        OSError: the file cannot be opened.
    """
    report = report if report is not None else TraceFileReport(os.fspath(path))
    notes: list[tuple[str, str]] = []
    # surrogateescape keeps invalid UTF-8 bytes visible (as lone surrogates U+DC80-U+DCFF, which a
    # JSON "\udc80" escape never produces: that stays six ASCII characters until parsed), so a line
    # whose bytes had to be replaced is counted as mended instead of passing unnoticed
    with open(path, encoding="utf-8", errors="surrogateescape") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            report.lines += 1
            # an ASCII line (nearly every line: hashes and numbers) holds no escaped byte
            bad_bytes = not line.isascii() and _ESCAPED_BYTES.search(line) is not None
            if bad_bytes:
                line = _ESCAPED_BYTES.sub("\ufffd", line)
            try:
                record = parse_line(line, notes)
                if bad_bytes:
                    notes.append(("utf-8", "invalid UTF-8 bytes replaced by U+FFFD"))
            except TraceFormatError as exc:
                raise TraceFormatError(f"{path}:{lineno}: {exc}") from None
            except ValueError as exc:
                if strict:
                    raise ValueError(f"{path}:{lineno}: {exc}") from None
                report.skipped.append((lineno, str(exc)))
                notes.clear()
                continue
            if notes:
                if strict:
                    name, reason = notes[0]
                    raise ValueError(f"{path}:{lineno}: field {name}: {reason}")
                report._note(lineno, notes)
                notes.clear()
            if isinstance(record, TraceMeta):  # how the trace was made, not part of the workload
                if report.meta is None:
                    report.meta = record
                continue
            report.records += 1
            yield record
    if warn:
        for message in report.warnings():
            log.warning("%s", message)


def read_trace(paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> list[TraceRecord]:
    """Read one or more trace files into a list of records (file order, files in given order).

    Raises:
        TraceFormatError: unknown version, or the files hold no usable invocation at all (the
            message then says how many lines were skipped, and why the first one was).
        OSError: a file cannot be opened.

    The files' warnings are logged once all are read, and only when the error is not raised: a
    file of garbage is then one line (the error names the skipped lines), not a warning and an
    error saying the same.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    records: list[TraceRecord] = []
    reports = []
    with quiet_collector():  # a record per line, each with its lists of block hashes: no cycles
        for path in paths:
            reports.append(TraceFileReport(os.fspath(path)))
            records.extend(iter_trace(path, report=reports[-1], warn=False))
    if any(isinstance(r, InvocationRecord) for r in records):
        for report in reports:
            for message in report.warnings():
                log.warning("%s", message)
    else:
        skipped = [r for r in reports if r.skipped]
        why = ""
        if skipped:
            lineno, reason = skipped[0].skipped[0]
            total = sum(len(r.skipped) for r in reports)
            why = f" ({total} unusable line{'s' if total != 1 else ''} skipped; first: {skipped[0].path}:{lineno}: {reason})"
        raise TraceFormatError(f"trace holds no invocation records{why}")
    return records


def trace_meta(path: str | os.PathLike[str]) -> TraceMeta | None:
    """The ``meta`` record of a trace (how it was made), or ``None`` when its first non-blank line
    is not a valid one; only that line is read.

    Raises:
        OSError: the file cannot be opened.
    """
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if line.strip():
                try:
                    record = parse_line(line)
                except ValueError:  # TraceFormatError too: another version's meta is not ours to read
                    return None
                return record if isinstance(record, TraceMeta) else None
    return None


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


def looks_like_trace(path: str | os.PathLike[str]) -> bool:
    """Whether a writer may add v1 records to the existing file ``path`` (or replace it).

    True when the file is empty (or blank), or its first non-blank line is a JSON object with the
    keys ``type`` and ``v`` = :data:`TRACE_VERSION`; only that line is read. Commands that write
    traces (``pbkv-sdk record --out``, ``pbkv-server --trace-out``) refuse any other file: a typo
    in the path must not append JSON to, or delete, a file that is not a trace, and records of
    another version would make the whole file unreadable.

    Raises:
        OSError: the file cannot be read (missing, a directory, no permission).
    """
    with open(path, "rb") as fh:
        for line in fh:
            if line.strip():
                try:
                    first = json.loads(line)
                except ValueError:  # also UnicodeDecodeError: binary files
                    return False
                return isinstance(first, dict) and "type" in first and first.get("v") == TRACE_VERSION
    return True
