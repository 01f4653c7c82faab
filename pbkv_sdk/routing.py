"""Running behind a router: the affinity header, and where end signals and app graphs go.

Several replicas behind a router (SMG, Dynamo, vLLM production-stack...) only keep a workflow's
cache useful if every request of the workflow lands on the replica that holds it, and if its end
signal reaches that replica (``docs/architecture.md``, "Routers").

**Affinity key.** Every stamped request carries the workflow id in the router's session header,
:data:`DEFAULT_ROUTING_HEADER` (``X-SMG-Routing-Key``) unless ``$PBKV_ROUTING_HEADER`` or
:func:`configure` names another one (an empty value or ``none`` sends none). SMG's
``consistent_hashing`` and ``manual`` policies, and its ``--routing-key-override`` on any policy,
key on that header (lightseekorg/smg ``docs/configuration/routing.md``). A value the app set on
the request itself is kept.

**Hint endpoints behind a router.** SMG answers 404 to paths it does not route
(``/pbkv/v1/...``), and forwards only its own request headers to workers, so end signals and
graph declarations cannot travel through it (and hints must travel in the body,
``PBKV_BODY_HINTS=1``). With a replica list (``$PBKV_REPLICAS``, comma-separated root URLs, or
:func:`configure`), the SDK sends them to the replicas itself:

* an end signal goes to the listed replicas that the router reported serving the workflow (SMG
  names the worker in the ``x-smg-routed-worker-id`` answer header), else, when none of them is
  listed or the router names none, to every listed replica;
* an app graph goes to every listed replica (any of them may serve the app).

Bounded and fail-open: at most :data:`MAX_REPLICAS` replicas, one request per replica on the
end-signal threads, each within the end timeout; a replica that cannot be connected to is skipped
for :data:`REPLICA_COOLDOWN_S` (it retires idle workflows itself). Idempotent: the server's end is, and
a replica that never saw the workflow answers 204.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import urllib.parse
from functools import lru_cache
from typing import Any, Iterable, Mapping, Sequence

from pbkv_contract.hints import GRAPH_PATH, HEADER_HINTS, HEADER_WORKFLOW_ID
from pbkv_sdk.delivery import ENV_REPLICAS, REPLICA_COOLDOWN_S, queue_request
from pbkv_sdk.once import WarnOnce

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_ROUTING_HEADER", "ENV_ROUTING_HEADER", "ENV_REPLICAS", "MAX_REPLICAS", "REPLICA_COOLDOWN_S",
    "SERVED_BY_HEADERS", "configure", "routing_header", "replicas", "end_targets", "note_response", "note_hint_verdict",
    "declare_graph", "normalise_url",
]

#: Session header of SMG's hash-ring and sticky policies (lightseekorg/smg docs/configuration/routing.md).
DEFAULT_ROUTING_HEADER = "X-SMG-Routing-Key"
ENV_ROUTING_HEADER = "PBKV_ROUTING_HEADER"
#: Most replicas an end signal or graph is sent to (bounds the fan-out).
MAX_REPLICAS = 256
#: Answer headers in which a router names the worker that served the request (SMG 1.13).
SERVED_BY_HEADERS = ("x-smg-routed-worker-id",)
#: Answer header in which pbkv-server says how it read the hints.
HINTS_ANSWER_HEADER = HEADER_HINTS.lower()

# RFC 9110 5.1: a field name is a token.
_TOKEN_RE = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_UNSET: Any = object()
_LOCK = threading.Lock()
_configured: dict[str, Any] = {}
_WARNED = WarnOnce(log)


def configure(*, routing_header: str | None = _UNSET, replicas: Sequence[str] | None = _UNSET) -> None:
    """Set the router settings for this process (they win over the environment).

    Args:
        routing_header: affinity header name; ``""`` sends none; ``None`` goes back to
            ``$PBKV_ROUTING_HEADER`` (else :data:`DEFAULT_ROUTING_HEADER`). Read when a workflow starts.
        replicas: root URLs of the replicas behind the router (``http://host:port``); ``[]``
            for none; ``None`` goes back to ``$PBKV_REPLICAS``.

    Raises:
        ValueError: a header name that is not an HTTP token, a URL that is not
            ``http(s)://host[:port]``, or more than :data:`MAX_REPLICAS` replicas.
    """
    with _LOCK:
        if routing_header is not _UNSET:
            if routing_header is None:
                _configured.pop("routing_header", None)
            else:
                _configured["routing_header"] = _check_header(routing_header)
        if replicas is not _UNSET:
            if replicas is None:
                _configured.pop("replicas", None)
            else:
                urls = tuple(dict.fromkeys(normalise_url(u) for u in replicas))
                if len(urls) > MAX_REPLICAS:
                    raise ValueError(f"at most {MAX_REPLICAS} replicas, got {len(urls)}")
                _configured["replicas"] = urls


def routing_header() -> str | None:
    """The affinity header to stamp, or ``None`` for none (see :func:`configure`).

    A bad ``$PBKV_ROUTING_HEADER`` (not an HTTP token) is reported once and no header is sent.
    """
    if "routing_header" in _configured:
        return _configured["routing_header"] or None
    raw = os.environ.get(ENV_ROUTING_HEADER)
    if raw is None:
        return DEFAULT_ROUTING_HEADER
    try:
        return _check_header(raw.strip()) or None
    except ValueError as exc:
        _warn_once(f"header:{raw}", "PBKV: %s=%r ignored (%s); no routing header is sent", ENV_ROUTING_HEADER, raw, exc)
        return None


def replicas() -> tuple[str, ...]:
    """The replica root URLs (normalised, de-duplicated), or ``()`` when none are listed.

    ``$PBKV_REPLICAS`` is split at commas and white space; entries that are not
    ``http(s)://host[:port]`` are skipped with one warning, and only the first
    :data:`MAX_REPLICAS` are used.
    """
    if "replicas" in _configured:
        return _configured["replicas"]
    return _parse_env_replicas(os.environ.get(ENV_REPLICAS, ""))


def end_targets(served_by: Iterable[str]) -> tuple[str, ...] | None:
    """Where an end signal goes: replica root URLs, or ``None`` when no replica is listed
    (the caller then uses its single server URL).

    Args:
        served_by: worker URLs the router reported for the workflow's requests.
    """
    listed = replicas()
    if not listed:
        return None
    served = {normalise_url_or_none(u) for u in served_by}
    targeted = tuple(u for u in listed if u in served)
    return targeted or listed


def note_response(workflow: Any, headers: Mapping[str, str], body_hints: bool, hints: Any = None) -> None:
    """Read a stamped request's answer headers: the worker that served it, and the hints' verdict.

    Adds the router's served-by worker URL to ``workflow.served_by`` (at most
    :data:`MAX_REPLICAS` of them), then :func:`note_hint_verdict`. Without a replica list only a
    workflow's first answer is read here (``workflow.read_answers`` goes false), which keeps the
    cost per request down; later answers get :func:`note_hint_verdict` alone.
    """
    for name in SERVED_BY_HEADERS:
        worker = headers.get(name)
        if worker and len(worker) <= 2048 and len(workflow.served_by) < MAX_REPLICAS:
            workflow.served_by.add(worker)
    note_hint_verdict(headers, body_hints, hints)
    if not replicas():
        workflow.read_answers = False


def note_hint_verdict(headers: Mapping[str, str], body_hints: bool, hints: Any = None) -> None:
    """Warn (once per process per verdict) when pbkv-server's ``X-PBKV-Hints`` answer says a
    stamped request's hints did not count.

    ``ignored``: the server found the hints malformed and served the request anonymously; its
    log line ``malformed PBKV hints ignored ...`` says why, and its ``pbkv_malformed_hints_total``
    metric counts them. ``anonymous`` to a request stamped with headers only: something in between
    (a router: SMG forwards only its own headers) dropped them; the fix is body hints. One header
    read per answer.

    Args:
        headers: the answer's headers (case-insensitive mapping).
        body_hints: the request also carried the hints in its body.
        hints: the :class:`~pbkv_contract.hints.Hints` sent, named in the warning (optional).
    """
    verdict = headers.get(HINTS_ANSWER_HEADER)
    if verdict is None or verdict == "ok":
        return
    if verdict == "ignored":
        sent = "" if hints is None else f" (workflow {hints.workflow_id}, agent {hints.agent!r}, app {hints.app!r})"
        _warn_once("ignored", "PBKV: the server answered X-PBKV-Hints: ignored: it found the hints of a request%s "
                   "malformed and served it anonymously, as if it belonged to no workflow. The server's log says why "
                   "('malformed PBKV hints ignored ...'), and its /metrics counts such requests in "
                   "pbkv_malformed_hints_total. Further occurrences are logged at debug level.", sent)
    elif verdict == "anonymous" and not body_hints:
        _warn_once("dropped", "PBKV: the server answered X-PBKV-Hints: anonymous to a request stamped with %s: a router "
                   "or proxy in between dropped the X-PBKV-* headers (SMG forwards only its own). Send the hints in the "
                   "body: PBKV_BODY_HINTS=1 (or body_hints=True). Further occurrences are logged at debug level.",
                   HEADER_WORKFLOW_ID)


def declare_graph(app: str, edges: Mapping[str, Sequence[str]], *, server_url: str | None = None,
                  timeout_s: float = 0.5) -> int:
    """Declare ``app``'s static agent graph (``PUT .../apps/{app}/graph``, for ``kvflow``) to every
    listed replica, else to ``server_url`` (default ``$PBKV_SERVER_URL``). Returns at once.

    Sent on the threads of :mod:`pbkv_sdk.delivery` (:func:`pbkv_sdk.ending.flush` waits), fail-open and
    idempotent (a PUT replaces the graph).

    Args:
        app: the app name (as the workflows' ``app``).
        edges: agent -> next agents.
        server_url: the server when no replica is listed (a ``/v1`` suffix is dropped).
        timeout_s: time budget of each phase of each request, seconds.

    Returns:
        the number of servers the graph was queued for (0 when there is nowhere to send it;
        a warning says so).

    Raises:
        ValueError: ``app`` is empty or ``edges`` is not a map of agent names to lists (or
            tuples) of names.
    """
    if not isinstance(app, str) or not app:
        raise ValueError("app must be a non-empty string")
    if not isinstance(edges, Mapping) or not all(
            isinstance(k, str) and isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v)
            for k, v in edges.items()):
        raise ValueError("edges must map agent names to lists of agent names")
    payload = {"edges": {k: list(v) for k, v in edges.items()}}
    targets = replicas()
    cooldown = bool(targets)
    if not targets:
        url = server_url or os.environ.get("PBKV_SERVER_URL")
        try:
            targets = (normalise_url(url),) if url else ()
        except ValueError as exc:
            _warn_once(f"graph:{url}", "PBKV: app graph not sent: %s", exc)
            return 0
    if not targets:
        _warn_once("graph:none", "PBKV: app graph not sent: no server_url, PBKV_SERVER_URL or PBKV_REPLICAS")
        return 0
    path = GRAPH_PATH.format(app=urllib.parse.quote(app, safe=""))
    for base in targets:
        queue_request("PUT", base + path, payload, timeout_s, cooldown=cooldown)
    return len(targets)


def normalise_url(url: str) -> str:
    """``scheme://host[:port][/path]`` lower-cased in scheme and host, without a trailing ``/`` or ``/v1``.

    Raises:
        ValueError: not an ``http://`` or ``https://`` URL with a host (or a bad port).
    """
    try:
        parts = urllib.parse.urlsplit(url.strip())
        port = parts.port
    except (ValueError, AttributeError) as exc:
        raise ValueError(f"malformed replica URL {url!r} ({exc})") from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ValueError(f"malformed replica URL {url!r} (expected http://host:port)")
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    return f"{parts.scheme.lower()}://{host}{'' if port is None else f':{port}'}{path}"


def normalise_url_or_none(url: str) -> str | None:
    """:func:`normalise_url`, or ``None`` for a malformed URL (a router's header is untrusted input)."""
    try:
        return normalise_url(url)
    except ValueError:
        return None


# --------------------------------------------------------------------------- helpers


def _check_header(name: str) -> str:
    if name.lower() == "none" or name == "":
        return ""
    if not _TOKEN_RE.match(name):
        raise ValueError(f"{name!r} is not an HTTP header name")
    return name


@lru_cache(maxsize=8)
def _parse_env_replicas(raw: str) -> tuple[str, ...]:
    urls: list[str] = []
    for item in re.split(r"[,\s]+", raw.strip()):
        if not item:
            continue
        try:
            urls.append(normalise_url(item))
        except ValueError as exc:
            _warn_once(f"replica:{raw}", "PBKV: %s entry skipped: %s", ENV_REPLICAS, exc)
    urls = list(dict.fromkeys(urls))
    if len(urls) > MAX_REPLICAS:
        _warn_once(f"many:{raw}", "PBKV: %s lists %d replicas; only the first %d are used", ENV_REPLICAS, len(urls),
                   MAX_REPLICAS)
        urls = urls[:MAX_REPLICAS]
    return tuple(urls)


_warn_once = _WARNED
