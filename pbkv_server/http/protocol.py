"""HTTP/1.1 protocol layer of pbkv-server: bounded request heads and clean, counted rejections.

uvicorn's httptools protocol has no limit on the request line or headers (a 64 KiB header was
served) and answers a request it cannot parse with a plain-text 400 that the app never sees, so
it is neither in OpenAI's error shape nor counted. :func:`guarded_protocol` builds a subclass
that

* answers 431 when the headers exceed ``max_header_bytes`` in total or ``max_headers`` in
  number, and 414 when the request line alone exceeds ``max_header_bytes`` (nginx's and Node's
  behaviour), checked on every parsed field and on the raw bytes of a head still being received,
  so memory stays bounded before the parser completes a field;
* answers 408 and closes the connection when a request's next bytes (head or body) do not come
  within ``read_timeout_s``: a body shorter than its ``Content-Length`` held its connection (and
  the app's ``receive()``) forever, and uvicorn's ``timeout_keep_alive`` only runs between
  requests. A pause caused by the server itself (reading paused while the app has not consumed
  the body) does not count;
* answers requests the parser rejects (for instance a control byte in a header value) with a
  400 in OpenAI's error shape, and calls ``on_reject`` so the rejection is counted and logged.

Why a control byte in an ``X-PBKV-*`` header is rejected, not served: RFC 9110 section 5.5 makes
control characters (other than HTAB) invalid in field values, and llhttp (httptools) and h11 both
refuse them. Serving them needs llhttp's ``lenient_headers`` mode, which its authors flag as
exposing request smuggling; rewriting the bytes before the parser needs a second HTTP parser in
front of the first. The hint protocol never sends such bytes (names are percent-encoded), so the
request is refused with a 400 that names the header, counted as
``pbkv_rejected_requests_total{reason="control_char_in_hint_header"}``, and logged once.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any, Callable

import httptools
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from pbkv_server.http.errors import error_body

__all__ = ["guarded_protocol", "RejectHandler"]

log = logging.getLogger(__name__)

#: ``on_reject(status, reason, path)``: called once per refused request, before the answer is sent.
RejectHandler = Callable[[int, str, str], None]

# Bytes of a head still being received beyond the limit before the connection is refused: one
# socket read may also hold the end of a pipelined request, so the raw-byte guard is coarser.
_RAW_SLACK = 64 * 1024
# A header line of the hint protocol that holds a control byte (not HTAB, CR or LF).
_HINT_HEADER_CTL = re.compile(rb"(?im)^(x-pbkv-[a-z-]*)[ \t]*:[^\r\n]*[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


class _HeadRejected(Exception):
    def __init__(self, status: int, reason: str, message: str):
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message


def guarded_protocol(max_header_bytes: int, max_headers: int, on_reject: RejectHandler,
                     read_timeout_s: float = 60.0) -> type[HttpToolsProtocol]:
    """A uvicorn ``http`` protocol class (pass it as ``uvicorn.Config(http=...)``) with head limits.

    Args:
        max_header_bytes: largest request line, and largest sum of header names and values
            (plus 4 bytes per field for ``": "`` and CRLF), in bytes.
        max_headers: most header fields per request.
        on_reject: told of every request refused here: ``(status, reason, path)`` with reason
            ``header_too_large``, ``too_many_headers``, ``uri_too_long``,
            ``control_char_in_hint_header``, ``invalid_header``, ``invalid_http`` or
            ``request_timeout``.
        read_timeout_s: longest pause, in seconds, between the bytes of one request (408 after it).

    Returns:
        a subclass of uvicorn's ``HttpToolsProtocol``.
    """

    class GuardedHttpToolsProtocol(HttpToolsProtocol):
        """uvicorn's httptools protocol with bounded heads and OpenAI-style parse errors."""

        def __init__(self, *args: Any, **kwargs: Any):
            super().__init__(*args, **kwargs)
            self._in_head = True
            self._head_raw = bytearray()  # the current head's bytes (bounded), to name a bad header
            self._url_bytes = 0
            self._field_bytes = 0
            self._fields = 0
            self._receiving = False  # between a request's first byte and its last
            self._read_timer: Any = None

        def data_received(self, data: bytes) -> None:
            self._receive(data)
            if self._receiving and not self.transport.is_closing():
                self._arm_read_timer()
            elif self._read_timer is not None:
                self._read_timer.cancel()
                self._read_timer = None

        def connection_lost(self, exc: Exception | None) -> None:
            if self._read_timer is not None:
                self._read_timer.cancel()
                self._read_timer = None
            super().connection_lost(exc)

        def _arm_read_timer(self) -> None:
            if self._read_timer is not None:
                self._read_timer.cancel()
            self._read_timer = self.loop.call_later(read_timeout_s, self._read_timed_out)

        def _read_timed_out(self) -> None:
            self._read_timer = None
            if not self._receiving or self.transport.is_closing():
                return
            if self.flow.read_paused:  # the server stopped reading (the app has not taken the body yet)
                self._arm_read_timer()
                return
            cycle = getattr(self, "cycle", None)
            if cycle is not None and cycle.response_started:  # too late for a status line: just close
                self.transport.close()
                return
            self._reject(_HeadRejected(408, "request_timeout",
                                       f"request not received in full: no bytes for {read_timeout_s:g} s "
                                       "(--read-timeout-s)"))

        def _receive(self, data: bytes) -> None:
            self._unset_keepalive_if_required()
            if self._in_head:
                self._head_raw += data[: max(0, max_header_bytes + _RAW_SLACK - len(self._head_raw))]
            try:
                self.parser.feed_data(data)
                if self._in_head and len(self._head_raw) > max_header_bytes + _RAW_SLACK // 2:
                    raise _HeadRejected(431, "header_too_large", _too_large(max_header_bytes))
            except httptools.HttpParserUpgrade:
                if self._should_upgrade():
                    self.handle_websocket_upgrade()
                else:
                    self._unsupported_upgrade_warning()
            except httptools.HttpParserCallbackError as exc:
                cause = exc.__context__
                if isinstance(cause, _HeadRejected):
                    self._reject(cause)
                else:
                    self._reject(_HeadRejected(400, "invalid_http", "invalid HTTP request"))
            except httptools.HttpParserError as exc:
                self._reject(self._parse_error(str(exc)))
            except _HeadRejected as exc:
                self._reject(exc)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._receiving = True
            self._in_head = True
            self._url_bytes = self._field_bytes = self._fields = 0

        def on_url(self, url: bytes) -> None:
            self._url_bytes += len(url)
            if self._url_bytes > max_header_bytes:
                raise _HeadRejected(414, "uri_too_long",
                                    f"request line is over the {max_header_bytes}-byte limit (--max-header-bytes)")
            super().on_url(url)

        def on_header(self, name: bytes, value: bytes) -> None:
            self._fields += 1
            self._field_bytes += len(name) + len(value) + 4
            if self._fields > max_headers:
                raise _HeadRejected(431, "too_many_headers",
                                    f"request has more than {max_headers} header fields (--max-headers)")
            if self._field_bytes > max_header_bytes:
                raise _HeadRejected(431, "header_too_large", _too_large(max_header_bytes))
            super().on_header(name, value)

        def on_headers_complete(self) -> None:
            self._in_head = False
            self._head_raw.clear()
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            self._in_head = True  # a keep-alive connection's next bytes start the next head
            self._receiving = False
            super().on_message_complete()

        def _parse_error(self, detail: str) -> _HeadRejected:
            found = _HINT_HEADER_CTL.search(bytes(self._head_raw))
            if found is not None:
                header = found.group(1).decode("ascii")
                return _HeadRejected(400, "control_char_in_hint_header",
                                     f"header {header} holds a control character, which HTTP does not allow "
                                     "(RFC 9110, 5.5); percent-encode hint names as the PBKV hint protocol does")
            if "header" in detail.lower():
                return _HeadRejected(400, "invalid_header", f"invalid HTTP request header: {detail}")
            return _HeadRejected(400, "invalid_http", f"invalid HTTP request: {detail}")

        def _reject(self, rejected: _HeadRejected) -> None:
            path = self.url.split(b"?", 1)[0].decode("latin-1") if getattr(self, "url", None) else ""
            try:
                on_reject(rejected.status, rejected.reason, path)
            except Exception:  # counting must never keep the client from its answer
                log.exception("on_reject failed")
            code = {400: "invalid_http_request", 408: "request_timeout"}.get(rejected.status,
                                                                              "request_header_too_large")
            payload = json.dumps(error_body(rejected.status, rejected.message, code)).encode()
            head = [STATUS_LINE[rejected.status]]
            for name, value in self.server_state.default_headers:
                head += [name, b": ", value, b"\r\n"]
            head += [b"content-type: application/json\r\n", b"content-length: %d\r\n" % len(payload),
                     b"connection: close\r\n\r\n", payload]
            self.transport.write(b"".join(head))
            self.transport.close()

    return GuardedHttpToolsProtocol


def _too_large(limit: int) -> str:
    return f"request headers are over the {limit}-byte limit (--max-header-bytes)"
