"""Import the GitHub Copilot coding-agent traces (Azure Public Dataset, June 2026) as v1 traces.

The release (Azure/AzurePublicDataset, ``GitHubCopilotCodingAgentDataset2026.md``; field
reference ``analysis/GitHubCopilotCodingAgents/schema.json``) is gzip-compressed JSONL, one
session per line, partitioned as ``date=YYYY-MM-DD/shard-NNNN.jsonl.gz``::

    {"session_id", "date", "turns": [{"turn_id",
        "llm_calls": [{"message_id", "timestamp", "duration_ms", "initiator_type", "model", "result",
                       "status_code", "tokens": {"total", "prompt", "completion", "cached", "cached_pct"},
                       "message_metadata": [{"type", "role", "sequenceId", "token_len"}]}],
        "tool_batches": [{"timestamp", "duration_ms", "auto_continue", "result", "request_id",
                          "function_calls": [{"name", "status", "duration_ms"}]}]}]}

Mapping: a session is a session (``session_id``), each turn a workflow (``<session>-t<i>``), each
LLM call an invocation in time order (agent = ``initiator_type``: ``user`` opens a turn, ``agent``
follows up), with the real prompt, completion and ``cached`` token counts. Times come from the
calls' timestamps and durations; a call without a usable timestamp starts after the previous
call's end plus the duration of the tool batch that call requested (``request_id`` =
``message_id``), so the replay's gaps are the tool time.

Block identity (the release holds no text): a prompt is its ``message_metadata`` segments in
``sequenceId`` order; a segment's identity is (session, ``sequenceId``, ``type``, ``role``,
``token_len``), so a segment a later call of the same session repeats at the same position with
the same length is the same content, and the calls' shared prefixes are the leading runs of equal
segments (:func:`pbkv_contract.blocks.segment_prefix_hashes`). Tokens the segments do not account
for (``tokens.prompt`` minus their sum) are a trailing segment of the call's own; when the
segments sum to more, the block token counts are scaled to ``tokens.prompt``.

Bad input loses nothing else: an unreadable line, a session without turns, a call without token
counts are skipped and counted (the first reason kept), a damaged shard keeps the sessions read
before the damage.
"""

from __future__ import annotations

import errno
import json
import logging
import math
import os
import zlib
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Iterator

from pbkv_contract.blocks import segment_prefix_hashes
from pbkv_contract.files import special_file, write_target
from pbkv_contract.hints import workflow_id_from
from pbkv_contract.marginals import trace_marginals
from pbkv_contract.trace import InvocationRecord, TraceWriter, WorkflowEndRecord, iter_trace

log = logging.getLogger(__name__)

APP_NAME = "ghcp"
#: Tokens per hashed block: 1,024 (prompts average ~68k tokens, so ~66 hashes per call).
DEFAULT_BLOCK_TOKENS = 1024
#: Files read from a directory (shards, gzip-compressed or plain).
SHARD_SUFFIXES = (".jsonl.gz", ".jsonl")


@dataclass
class GhcpImportSummary:
    """What :func:`import_ghcp` did.

    Attributes:
        files: shard files read.
        sessions / workflows / invocations: written.
        tool_batches: tool batches read (with ``function_calls``), and ``tool_batch_ms`` their
            summed ``duration_ms``.
        prompt_tokens / cached_tokens: sums over the written calls (``cached`` of the release;
            ``cached_known`` calls reported it).
        trace_cached_share: the written trace's own repeated-prefix share
            (:func:`pbkv_contract.marginals.trace_marginals`); ``None`` before the trace is read back.
        skipped: reason -> count of what was not imported; ``first`` the first such
            ``(where, reason)``.
        no_segments: calls without ``message_metadata`` (imported as one segment of their own).
        agents: invocations per agent name.
    """

    files: int = 0
    sessions: int = 0
    workflows: int = 0
    invocations: int = 0
    tool_batches: int = 0
    tool_batch_ms: float = 0.0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    cached_known: int = 0
    trace_cached_share: float | None = None
    skipped: Counter = field(default_factory=Counter)
    first: tuple[str, str] | None = None
    no_segments: int = 0
    agents: Counter = field(default_factory=Counter)

    @property
    def recorded_cached_share(self) -> float | None:
        """Sum of the calls' ``cached`` over their prompt tokens (calls that report it)."""
        return self.cached_tokens / self.prompt_tokens if self.cached_known and self.prompt_tokens else None

    def skip(self, where: str, reason: str, n: int = 1) -> None:
        self.skipped[reason] += n
        if self.first is None:
            self.first = (where, reason)


def import_ghcp(src_path: str | os.PathLike[str], out_path: str | os.PathLike[str], *,
                block_tokens: int = DEFAULT_BLOCK_TOKENS, max_sessions: int | None = None) -> GhcpImportSummary:
    """Convert the release's shards under ``src_path`` into one v1 trace (``app = "ghcp"``).

    Args:
        src_path: a directory (searched recursively for ``*.jsonl.gz`` and ``*.jsonl``, in path
            order), or one shard file.
        out_path: trace to write, through ``out_path + ".partial"`` which replaces it when the
            import is done and is removed on any failure; when no session could be imported,
            nothing is written and an existing ``out_path`` stays as it was.
        block_tokens: tokens per hashed block.
        max_sessions: stop after this many imported sessions (``None``: all).

    Raises:
        ValueError: ``block_tokens`` < 1 or ``max_sessions`` < 1.
        FileNotFoundError: ``src_path`` does not exist.
        IsADirectoryError: ``out_path`` is a directory.
        OSError: the output cannot be written.
    """
    if block_tokens < 1:
        raise ValueError("block_tokens must be >= 1")
    if max_sessions is not None and max_sessions < 1:
        raise ValueError("max_sessions must be >= 1")
    if not os.path.exists(src_path):
        raise FileNotFoundError(errno.ENOENT, "no such file or directory", os.fspath(src_path))
    out = os.fspath(write_target(out_path))  # a link is written through; a device or fifo refused below
    if (kind := special_file(out)) is not None:
        raise OSError(errno.EINVAL, f"is {kind}, not a regular file; give a trace file path", out)
    tmp = out + ".partial"
    for path in (out, tmp):
        if os.path.isdir(path):
            raise IsADirectoryError(errno.EISDIR, "is a directory; give a trace file path", path)
    summary = GhcpImportSummary()
    try:
        with TraceWriter(tmp) as writer:
            used: set[str] = set()
            for where, session in _iter_sessions(src_path, summary):
                if max_sessions is not None and summary.sessions >= max_sessions:
                    break
                _write_session(where, session, writer, summary, block_tokens, used)
        if summary.sessions:
            summary.trace_cached_share = trace_marginals(iter_trace(tmp))["repeated_prefix_share"]
            os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return summary


# --------------------------------------------------------------------------- reading


def _shards(src: str) -> list[str]:
    if os.path.isdir(src):
        return sorted(os.path.join(d, f) for d, _, fs in os.walk(src) for f in fs
                      if f.endswith(SHARD_SUFFIXES))
    return [src]


def _iter_sessions(src: str | os.PathLike[str], summary: GhcpImportSummary) -> Iterator[tuple[str, dict]]:
    """``("file:line", session object)`` of every usable line of every shard."""
    for path in _shards(os.fspath(src)):
        summary.files += 1
        name = os.path.basename(path)
        lineno = 0
        try:
            for lineno, line in enumerate(_lines(path), start=1):
                if not line.strip():
                    continue
                try:
                    session = json.loads(line)
                except ValueError as exc:  # also UnicodeDecodeError
                    summary.skip(f"{name}:{lineno}", f"line is not JSON ({exc})")
                    continue
                if not isinstance(session, dict):
                    summary.skip(f"{name}:{lineno}", "line is not a JSON object")
                    continue
                yield f"{name}:{lineno}", session
        except (OSError, EOFError, zlib.error) as exc:  # truncated gzip: keep the sessions read so far
            summary.skip(f"{name}:{lineno + 1}", f"shard damaged or unreadable, rest of file not read ({exc})")


#: Bytes read from a shard at a time.
_CHUNK = 1 << 20


def _lines(path: str) -> Iterator[bytes]:
    """The lines of a shard, gzip (multi-member too) or plain. Decompressed incrementally, so a
    damaged or cut-off gzip stream still yields every whole line before the damage, then raises
    ``EOFError`` (cut off) or ``zlib.error`` (corrupt)."""
    with open(path, "rb") as fh:
        gz = fh.read(2) == b"\x1f\x8b"
        fh.seek(0)
        d = zlib.decompressobj(16 + zlib.MAX_WBITS) if gz else None
        pending = b""
        while True:
            chunk = fh.read(_CHUNK)
            if not chunk:
                break
            if d is not None:
                data = d.decompress(chunk)
                while d.eof and d.unused_data:  # next gzip member
                    rest = d.unused_data
                    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
                    data += d.decompress(rest)
                chunk = data
            pending += chunk
            *whole, pending = pending.split(b"\n")
            yield from whole
        if d is not None and not d.eof:
            raise EOFError("compressed file ended before the end-of-stream marker")
        if pending:
            yield pending


def _time(value: Any) -> float | None:
    """Unix seconds of an ISO-8601 timestamp (naive: UTC), or ``None``."""
    if not isinstance(value, str) or not value:
        return None
    text = value.strip().replace("Z", "+00:00").replace(" ", "T", 1)
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    return t.timestamp()


def _int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return None
    return int(value)


def _ms(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
        and value > 0 else 0.0


# --------------------------------------------------------------------------- converting


def _write_session(where: str, session: dict, writer: TraceWriter, summary: GhcpImportSummary, block_tokens: int,
                   used: set[str]) -> None:
    turns = session.get("turns")
    if not isinstance(turns, list) or not turns:
        summary.skip(where, "session has no turns")
        return
    raw_id = session.get("session_id")
    sid = workflow_id_from(str(raw_id) if raw_id else where, max_chars=100, empty="session")
    base, n = sid, 1
    while sid in used:  # two lines with one session id stay two sessions
        n += 1
        sid = f"{base}.{n}"
    used.add(sid)
    clock: float | None = None  # end of the session's previous call (for calls without a timestamp)
    wrote = 0
    for t_index, turn in enumerate(turns):
        if not isinstance(turn, dict):
            summary.skip(where, "turn is not an object")
            continue
        calls = [c for c in (turn.get("llm_calls") or []) if isinstance(c, dict)]
        batches = [b for b in (turn.get("tool_batches") or []) if isinstance(b, dict)]
        tool_ms = {}
        for b in batches:
            if b.get("function_calls"):
                summary.tool_batches += 1
                summary.tool_batch_ms += _ms(b.get("duration_ms"))
            if b.get("request_id") is not None:
                tool_ms[str(b["request_id"])] = tool_ms.get(str(b["request_id"]), 0.0) + _ms(b.get("duration_ms"))
        usable = []
        for order, c in enumerate(calls):
            tokens = c.get("tokens") if isinstance(c.get("tokens"), dict) else {}
            prompt, completion = _int(tokens.get("prompt")), _int(tokens.get("completion"))
            if prompt is None or completion is None:
                summary.skip(where, "LLM call without prompt/completion token counts")
                continue
            usable.append((_time(c.get("timestamp")), order, c, prompt, completion, _int(tokens.get("cached"))))
        if not usable:
            if calls:
                continue  # each call already counted
            summary.skip(where, "turn has no LLM calls")
            continue
        # time order when every call has a timestamp; else the file's order
        if all(u[0] is not None for u in usable):
            usable.sort(key=lambda u: (u[0], u[1]))
        wid = f"{sid}-t{t_index}"
        t_end = None
        for step, (start, _, c, prompt, completion, cached) in enumerate(usable):
            if start is None:
                start = clock if clock is not None else 0.0
            t_end = start + _ms(c.get("duration_ms")) / 1000.0
            hashes, counts = _blocks(sid, c.get("message_metadata"), prompt, block_tokens, summary, wid, step)
            agent = c.get("initiator_type") if isinstance(c.get("initiator_type"), str) and c.get("initiator_type") else "agent"
            if cached is not None and cached > prompt:
                cached = None
            writer.write(InvocationRecord(
                app=APP_NAME, workflow_id=wid, step=step, agent=agent, t_start=round(start, 3),
                t_end=round(t_end, 3), prompt_tokens=prompt, completion_tokens=completion, prefix_hashes=hashes,
                cached_tokens=cached, block_tokens=counts, session_id=sid,
            ))
            summary.invocations += 1
            summary.agents[agent] += 1
            summary.prompt_tokens += prompt
            if cached is not None:
                summary.cached_tokens += cached
                summary.cached_known += 1
            clock = t_end + tool_ms.get(str(c.get("message_id")), 0.0) / 1000.0
        writer.write(WorkflowEndRecord(app=APP_NAME, workflow_id=wid, t=round(max(t_end, clock or t_end), 3),
                                       status="completed"))
        summary.workflows += 1
        wrote += 1
    if wrote:
        summary.sessions += 1


def _blocks(sid: str, metadata: Any, prompt: int, block_tokens: int, summary: GhcpImportSummary, wid: str,
            step: int) -> tuple[list[str], list[int]]:
    """Hashes and tokens per block of one call's prompt (see the module docstring)."""
    segments: list[tuple[int, str, int]] = []
    for i, seg in enumerate(metadata if isinstance(metadata, list) else []):
        if not isinstance(seg, dict):
            continue
        n = _int(seg.get("token_len"))
        if not n:
            continue
        seq = seg.get("sequenceId")
        seq = seq if isinstance(seq, int) and not isinstance(seq, bool) else i
        segments.append((seq, f"{sid}/{seq}/{seg.get('type')}/{seg.get('role')}/{n}", n))
    if not segments:
        summary.no_segments += 1
    segments.sort(key=lambda s: s[0])
    parts = [(key, n) for _, key, n in segments]
    total = sum(n for _, n in parts)
    if prompt > total:
        parts.append((f"{wid}#{step}/unaccounted", prompt - total))
    hashes, counts = segment_prefix_hashes(parts, block_tokens)
    if total > prompt and counts:
        counts = _scale(counts, prompt)
    return hashes, counts


def _scale(counts: list[int], total: int) -> list[int]:
    """``counts`` scaled to sum to ``total`` (largest remainders round up)."""
    s = sum(counts)
    exact = [c * total / s for c in counts]
    out = [int(x) for x in exact]
    for i in sorted(range(len(out)), key=lambda i: exact[i] - out[i], reverse=True)[: total - sum(out)]:
        out[i] += 1
    return out
