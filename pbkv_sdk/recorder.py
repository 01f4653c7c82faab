"""Trace recording for apps: LLM calls become trace v1 ``invocation`` records off the hot path.

The stamping transport hands each finished call to :meth:`TraceRecorder.submit` as a
:class:`CallCapture` (raw request body, raw response bytes, timestamps). A background thread
parses it (usage tokens, prefix hashes, features) and appends one whole, flushed line through
:class:`pbkv_contract.trace.TraceWriter`. One recorder per file is shared by every workflow, thread and
event loop of the process (:func:`get_recorder`), so lines never interleave and order is the
order in which calls finished.
"""

from __future__ import annotations

import atexit
import json
import logging
import math
import os
import queue
import re
import threading
import zlib
from dataclasses import dataclass
from typing import Any

from pbkv_sdk.env import env_flag
from pbkv_sdk.queues import wait_done
from pbkv_contract.trace import InvocationRecord, TraceRecord, TraceWriter
from pbkv_contract.blocks import DEFAULT_BLOCK_CHARS, canonical_prompt, prefix_hashes
from pbkv_contract.features import request_features
from pbkv_contract.hints import HEADER_CACHED_TOKENS, HEADER_ENGINE, HEADER_PROMPT_TOKENS

log = logging.getLogger(__name__)

#: Set to 1 to store the raw canonical prompt text in each record (off by default: privacy).
ENV_TRACE_TEXT = "PBKV_TRACE_TEXT"
#: Characters per token used only when the server reports no usage (rough English average).
CHARS_PER_TOKEN_ESTIMATE = 4
#: Response headers in which pbkv-server reports its own prompt and cached token counts on every
#: answer (README "Running pbkv-server"); used when the body carries no usage.
HEADER_SERVER_PROMPT_TOKENS = HEADER_PROMPT_TOKENS.lower()
HEADER_SERVER_CACHED_TOKENS = HEADER_CACHED_TOKENS.lower()


@dataclass(slots=True)
class CallCapture:
    """Everything the transport saw of one LLM call; parsed later on the recorder thread.

    Attributes:
        app, workflow_id, step, agent: the hints the request was stamped with.
        t_start: request sent, Unix seconds. t_first: first output token seen (or first body
            bytes when no token could be recognised), Unix seconds or ``None``. t_end: response
            fully read, Unix seconds.
        request_body: raw JSON body of the request (bytes).
        response_body: raw response body (JSON, or SSE text for streams), possibly compressed.
        content_encoding: the response's ``Content-Encoding`` header ("" if none).
        status_code: HTTP status of the response.
        response_headers: the response's headers (read on the recorder thread, off the hot
            path): pbkv-server's ``X-PBKV-Prompt-Tokens`` / ``X-PBKV-Cached-Tokens`` there are
            the token counts when the body has no usage.
        internal: a framework-internal call (speaker selection), flagged in the trace.
    """

    app: str
    workflow_id: str
    step: int
    agent: str
    t_start: float
    t_first: float | None
    t_end: float
    request_body: bytes
    response_body: bytes
    content_encoding: str = ""
    status_code: int = 200
    response_headers: Any = None
    internal: bool = False


class TraceRecorder:
    """Background writer of one trace file; safe under threads and asyncio (never blocks on I/O).

    Args:
        path: JSONL trace file (appended to; parent directories created).
        block_chars: characters per prefix-hash block (trace v1 ``block_chars``).
        store_text: keep the canonical prompt text in each record (default ``$PBKV_TRACE_TEXT``).

    Raises:
        OSError: the file cannot be created or opened for appending.
    """

    def __init__(self, path: str | os.PathLike[str], *, block_chars: int = DEFAULT_BLOCK_CHARS, store_text: bool | None = None):
        self.path = os.fspath(path)
        self.block_chars = block_chars
        self.store_text = env_flag(ENV_TRACE_TEXT) if store_text is None else store_text
        self._writer = TraceWriter(self.path)
        self._queue: queue.Queue[CallCapture | TraceRecord | None] = queue.Queue()
        self._closed = False
        self._warned = False
        self._thread = threading.Thread(target=self._run, name=f"pbkv-trace-{os.path.basename(self.path)}", daemon=True)
        self._thread.start()

    def submit(self, call: CallCapture) -> None:
        """Queue a finished LLM call for parsing and writing; returns at once."""
        if not self._closed:
            self._queue.put(call)

    def write(self, record: TraceRecord) -> None:
        """Queue a ready record (e.g. ``workflow_end``); written after everything queued before it."""
        if not self._closed:
            self._queue.put(record)

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait until every queued item is on disk; ``True`` if that happened within ``timeout_s``."""
        return wait_done(self._queue, timeout_s)

    def close(self, timeout_s: float = 10.0) -> None:
        """Flush, stop the thread and close the file; idempotent."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(None)
        self._thread.join(timeout_s)
        self._writer.close()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                record = item if not isinstance(item, CallCapture) else self._to_record(item)
                if record is not None:
                    self._writer.write(record)
            except Exception as exc:  # a bad call must not stop recording of the others
                if self._warned:  # one warning per file: a server that always answers oddly would flood the log
                    log.debug("PBKV trace: could not record a call", exc_info=True)
                else:
                    self._warned = True
                    log.warning(
                        "PBKV trace: could not record a call to %s (%s: %s); further failures at debug level",
                        self.path, type(exc).__name__, exc,
                    )
            finally:
                self._queue.task_done()

    def _to_record(self, call: CallCapture) -> InvocationRecord | None:
        if not 200 <= call.status_code < 300:
            return None
        request = json.loads(call.request_body or b"{}")
        prompt = _request_prompt(request)
        usage, completion_chunks, completion_chars = _parse_response(_decode(call.response_body, call.content_encoding))
        text = canonical_prompt(prompt)
        prompt_tokens = _int(usage.get("prompt_tokens"))
        completion_tokens = _int(usage.get("completion_tokens"))
        details = usage.get("prompt_tokens_details") or {}
        cached = _int(details.get("cached_tokens") if isinstance(details, dict) else None)
        # No usage in the body (a stream without include_usage; a backend that reports null
        # cached tokens): the server's headers still carry its real counts.
        server_prompt, server_cached = server_token_counts(call.response_headers or {})
        if prompt_tokens is None:
            prompt_tokens = server_prompt
        if cached is None:
            cached = server_cached
        if prompt_tokens is None:  # no count anywhere: estimate, so replay still has a size
            prompt_tokens = math.ceil(len(text) / CHARS_PER_TOKEN_ESTIMATE)
        if completion_tokens is None:
            completion_tokens = completion_chunks or math.ceil(completion_chars / CHARS_PER_TOKEN_ESTIMATE)
        ttft = (call.t_first - call.t_start) if call.t_first is not None else call.t_end - call.t_start
        return InvocationRecord(
            app=call.app,
            workflow_id=call.workflow_id,
            step=call.step,
            agent=call.agent,
            t_start=call.t_start,
            t_end=call.t_end,
            ttft_s=max(0.0, ttft),
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            cached_tokens=cached,  # None: the server reported none (unknown, not 0: trace format v1)
            prefix_hashes=prefix_hashes(prompt, self.block_chars),
            block_chars=self.block_chars,
            features=request_features(prompt),
            text=text if self.store_text else None,
            internal=True if call.internal else None,
            served_by=_served_by(call.response_headers or {}),
        )


def _served_by(headers: Any) -> str | None:
    """The engine the answer says it came from (``X-PBKV-Engine``; ``sim``: pbkv-server's
    simulator, whose reply lengths are made up); ``None`` when not said, or not a plain name."""
    value = headers.get(HEADER_ENGINE.lower())
    return value if isinstance(value, str) and value.strip() == value and 0 < len(value) <= 32 else None


def server_token_counts(headers: Any) -> tuple[int | None, int | None]:
    """``(prompt, cached)`` tokens from pbkv-server's response headers; ``None`` where absent or not a count.

    Args:
        headers: response headers (``httpx.Headers`` or any mapping with lower-case keys).
    """
    return _header_int(headers.get(HEADER_SERVER_PROMPT_TOKENS)), _header_int(headers.get(HEADER_SERVER_CACHED_TOKENS))


def get_recorder(path: str | os.PathLike[str]) -> TraceRecorder:
    """The process-wide recorder of ``path`` (created on first use, closed at exit).

    Raises:
        OSError: the file cannot be created or opened (callers in the SDK catch it and record nothing).
    """
    key = os.path.abspath(os.fspath(path))
    with _REGISTRY_LOCK:
        recorder = _REGISTRY.get(key)
        if recorder is None or recorder._closed:
            recorder = _REGISTRY[key] = TraceRecorder(key)
        return recorder


def flush_all(timeout_s: float = 10.0) -> bool:
    """Flush every recorder of the process; ``True`` if all finished within ``timeout_s`` each."""
    with _REGISTRY_LOCK:
        recorders = list(_REGISTRY.values())
    return all(r.flush(timeout_s) for r in recorders)


def close_all() -> None:
    """Flush and close every recorder (registered with ``atexit``)."""
    with _REGISTRY_LOCK:
        recorders = list(_REGISTRY.values())
        _REGISTRY.clear()
    for r in recorders:
        r.close()


_REGISTRY: dict[str, TraceRecorder] = {}
_REGISTRY_LOCK = threading.Lock()
atexit.register(close_all)


# --------------------------------------------------------------------------- parsing helpers


def _request_prompt(request: Any) -> list[dict[str, Any]] | str:
    """Messages (chat API), prompt (completions API) or text (SGLang /generate) of a request."""
    if not isinstance(request, dict):
        return ""
    if isinstance(request.get("messages"), list):
        return [m for m in request["messages"] if isinstance(m, dict)]
    for key in ("prompt", "text"):
        value = request.get(key)
        if isinstance(value, str):
            return value
        if isinstance(value, list) and value and isinstance(value[0], str):
            return value[0]
    return ""


def _decode(body: bytes, encoding: str) -> bytes:
    encoding = encoding.lower().strip()
    if encoding in ("gzip", "x-gzip"):
        return zlib.decompress(body, 16 + zlib.MAX_WBITS)
    if encoding == "deflate":
        return zlib.decompress(body)
    return body


def _parse_response(body: bytes) -> tuple[dict[str, Any], int, int]:
    """``(usage, content_chunks, content_chars)`` of a JSON or SSE chat/completions response."""
    text = body.decode("utf-8", errors="replace")
    stripped = text.lstrip()
    if stripped.startswith("{"):
        data = json.loads(stripped)
        chars = sum(len(_choice_text(c, "message")) for c in data.get("choices") or [] if isinstance(c, dict))
        return (data.get("usage") or {}), 0, chars
    usage: dict[str, Any] = {}
    chunks = chars = 0
    for line in text.splitlines():
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if not payload or payload == "[DONE]":
            continue
        try:
            event = json.loads(payload)
        except ValueError:
            continue
        if isinstance(event.get("usage"), dict):
            usage = event["usage"]
        for choice in event.get("choices") or []:
            if isinstance(choice, dict):
                piece = _choice_text(choice, "delta")
                if piece:
                    chunks += 1
                    chars += len(piece)
    return usage, chunks, chars


def _choice_text(choice: dict[str, Any], key: str) -> str:
    part = choice.get(key)
    if isinstance(part, dict) and isinstance(part.get("content"), str):
        return part["content"]
    return choice.get("text") if isinstance(choice.get("text"), str) else ""


def _header_int(value: Any) -> int | None:
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    return None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


#: First output token in a raw SSE chunk: a non-empty "content" or "text" string (used on the hot path).
FIRST_TOKEN_RE = re.compile(rb'"(?:content|text)"\s*:\s*"(?!")')
