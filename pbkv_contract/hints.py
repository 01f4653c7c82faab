"""Hint protocol v1: the fields that tie an LLM request to a workflow (``docs/architecture.md``).

A request carries four fields, either as HTTP headers or inside the JSON body as
``custom_params.pbkv`` (the route that survives SGLang's OpenAI endpoint):

====================  ==============================  =============================
header                body key (custom_params.pbkv)   value
====================  ==============================  =============================
X-PBKV-Workflow-Id    workflow_id                     1-128 chars of [A-Za-z0-9._:-]
X-PBKV-Agent          agent                           1-128 printable ASCII chars,
                                                      anything else percent-encoded;
                                                      decoded: no control character
X-PBKV-Step           step                            0-based int, < 2**31
X-PBKV-App            app                             same rule as agent
X-PBKV-Internal       internal                        optional: header ``1`` / ``0``,
                                                      body ``true`` / ``false``
====================  ==============================  =============================

``internal`` marks a call the framework makes for itself rather than as an agent step (AutoGen's
speaker selection): servers serve it like any call and write ``internal: true`` in their trace,
so predictor training and ``pbkv-sdk stats`` can skip it. Clients send it only when true (a
server that predates it ignores the header).

Malformed hints never fail an LLM request: :func:`parse_hints` returns ``(None, reason)``
and the caller serves the request anonymously, counting and logging the reason. That includes
hints whose decoded agent or app name breaks :func:`name_problem`'s rules
(:func:`hint_name_problem`), so pbkv-server and the SGLang plugin accept the same names; clients
check names with the same function before they send.

A body may also carry the engines' versioned KV-hint envelope ``kv_hints`` (vLLM RFC #53421,
SGLang RFC #36224; Dynamo's ``KvHint``, named ``kv_hint``): :func:`parse_kv_hints` reads its
retain/pin, demote/evict/deref and fetch/prefetch actions; unknown action types and versions are
ignored and counted, a malformed envelope is a malformed hint. It is the one parser of the
envelope: pbkv-server, the SGLang plugin, the vLLM backend and the SDK's checks all call it.
"""

from __future__ import annotations

import functools
import re
import unicodedata
import urllib.parse
from dataclasses import dataclass
from typing import Any, Mapping

PROTOCOL_VERSION = 1

HEADER_WORKFLOW_ID = "X-PBKV-Workflow-Id"
HEADER_AGENT = "X-PBKV-Agent"
HEADER_STEP = "X-PBKV-Step"
HEADER_APP = "X-PBKV-App"
HEADER_INTERNAL = "X-PBKV-Internal"
HEADERS = (HEADER_WORKFLOW_ID, HEADER_AGENT, HEADER_STEP, HEADER_APP)
#: Hint headers that may be left out even with a workflow id (absent: ``False``).
OPTIONAL_HEADERS = (HEADER_INTERNAL,)
#: Shared secret for the hint endpoints (the server also accepts ``Authorization: Bearer``).
HEADER_HINT_TOKEN = "X-PBKV-Hint-Token"

#: Answer headers: the per-request figures pbkv-server reports on every answer (prompt, device-
#: and host-cached tokens; TTFT in seconds) and how it read the hints (``ok``, ``anonymous``,
#: ``ignored``). Clients read them when the body carries no usage.
HEADER_PROMPT_TOKENS = "X-PBKV-Prompt-Tokens"
HEADER_CACHED_TOKENS = "X-PBKV-Cached-Tokens"
HEADER_HOST_CACHED_TOKENS = "X-PBKV-Host-Cached-Tokens"
HEADER_TTFT = "X-PBKV-TTFT-S"
HEADER_HINTS = "X-PBKV-Hints"
#: Answer header naming the engine that answered: ``sim`` from pbkv-server's simulator (a scenario
#: wrote the reply); recorders copy it into the trace's ``served_by``.
HEADER_ENGINE = "X-PBKV-Engine"

#: Key under ``custom_params`` in an OpenAI-style JSON body.
BODY_KEY = "pbkv"

#: Pseudo-agent that marks the end of a workflow in predictions and training targets.
END_AGENT = "<END>"
#: Pseudo-agent for agents that a predictor's vocabulary does not know.
UNKNOWN_AGENT = "<UNK>"

#: Path template of the workflow-end endpoint (POST, JSON body ``{"status": ...}``, answers 204).
END_PATH = "/pbkv/v1/workflows/{workflow_id}/end"
#: Path template of the static call-graph endpoint used by KVFlow (PUT).
GRAPH_PATH = "/pbkv/v1/apps/{app}/graph"
END_STATUSES = ("completed", "failed", "cancelled")

MAX_FIELD_CHARS = 128
MAX_STEP = 2**31 - 1
#: Characters of a workflow id (and of an SGLang-style session id).
WORKFLOW_ID_CHARS = "A-Za-z0-9._:-"
#: The rule a workflow id obeys, in words (error messages say it).
WORKFLOW_ID_RULE = f"1-{MAX_FIELD_CHARS} chars of [{WORKFLOW_ID_CHARS}]"
_WORKFLOW_ID_RE = re.compile(rf"^[{WORKFLOW_ID_CHARS}]{{1,{MAX_FIELD_CHARS}}}$")
_NOT_WORKFLOW_ID_CHAR = re.compile(rf"[^{WORKFLOW_ID_CHARS}]")
# Printable ASCII except '%', which is reserved as the escape character of the encoding.
_SAFE_CHARS = "".join(chr(c) for c in range(0x20, 0x7F) if chr(c) != "%")


class HintError(ValueError):
    """A hint field is malformed; the message names the field and the rule it breaks."""


@dataclass(frozen=True, slots=True)
class Hints:
    """The workflow identity of one LLM request.

    Attributes:
        workflow_id: opaque id, 1-128 chars of ``[A-Za-z0-9._:-]``.
        agent: decoded agent name (the node, participant or role that made the call).
        step: 0-based index of this invocation within its workflow.
        app: application name; selects the predictor and the call graph. ``None`` if not sent.
        internal: a framework-internal call (speaker selection), not an agent step.
    """

    workflow_id: str
    agent: str
    step: int
    app: str | None = None
    internal: bool = False

    def to_headers(self) -> dict[str, str]:
        """Header form, with agent and app percent-encoded (see :func:`encode_name`).

        The one header encoder of the project: the SDK's stamping transport sends exactly this.

        Raises:
            HintError: agent or app is empty or encodes to more than 128 characters (names from
                :func:`fit_name` never do).
        """
        # One dict literal per form: this runs on every stamped LLM request.
        if self.app is None:
            headers = {HEADER_WORKFLOW_ID: self.workflow_id, HEADER_AGENT: encode_name(self.agent), HEADER_STEP: str(self.step)}
        else:
            headers = {
                HEADER_WORKFLOW_ID: self.workflow_id,
                HEADER_AGENT: encode_name(self.agent),
                HEADER_STEP: str(self.step),
                HEADER_APP: encode_name(self.app),
            }
        if self.internal:  # sent only when true: the common call carries the four fields alone
            headers[HEADER_INTERNAL] = "1"
        return headers

    def to_body(self) -> dict[str, Any]:
        """Body form for ``custom_params.pbkv`` (names are sent decoded: JSON carries any text)."""
        body: dict[str, Any] = {"workflow_id": self.workflow_id, "agent": self.agent, "step": self.step}
        if self.app is not None:
            body["app"] = self.app
        if self.internal:
            body["internal"] = True
        return body


@functools.lru_cache(maxsize=4096)
def encode_name(name: str) -> str:
    """Percent-encode an agent or app name for a header: printable ASCII except '%' is kept.

    Everything else (non-ASCII as UTF-8 bytes, control characters, '%') becomes ``%XX``, so the
    header is ASCII whatever the name (a latin-1 header error must never fail a request).
    Results are cached (names repeat on every request of a workflow; errors are not cached).

    Raises:
        HintError: the name is empty or its encoded form exceeds 128 characters.
    """
    if not name:
        raise HintError("name must not be empty")
    encoded = _quote(name)
    if len(encoded) > MAX_FIELD_CHARS:
        raise HintError(f"name {name[:40]!r}... encodes to {len(encoded)} chars, over {MAX_FIELD_CHARS}")
    return encoded


@functools.lru_cache(maxsize=4096)
def fit_name(name: str) -> str:
    """``name`` cut at the end until its :func:`encode_name` form fits 128 characters.

    A shortened name beats a dropped hint: callers that take names from users (agent roles,
    node names) send ``fit_name(name)``, which :func:`encode_name` always accepts.

    Raises:
        HintError: ``name`` is empty.
    """
    if not name:
        raise HintError("name must not be empty")
    # Each character encodes to at most 12 chars (4 UTF-8 bytes as %XX): cut to a length that
    # may fit first, then drop characters one by one.
    name = name[:MAX_FIELD_CHARS]
    while len(_quote(name)) > MAX_FIELD_CHARS:
        name = name[:-1]
    return name


@functools.lru_cache(maxsize=4096)
def _quote(name: str) -> str:
    return urllib.parse.quote(name, safe=_SAFE_CHARS)


def decode_name(value: str) -> str:
    """Inverse of :func:`encode_name`.

    Raises:
        HintError: empty, too long, or contains characters outside printable ASCII.
    """
    if not value or len(value) > MAX_FIELD_CHARS:
        raise HintError(f"name must be 1-{MAX_FIELD_CHARS} chars, got {len(value)}")
    if any(not (0x20 <= ord(c) < 0x7F) for c in value):
        raise HintError("name contains characters outside printable ASCII (percent-encode them)")
    return urllib.parse.unquote(value, errors="strict")


def name_problem(name: object) -> str | None:
    """Why a decoded agent or app name is not a valid hint, or ``None`` when it is.

    The rules, checked in this order: a non-empty string; no control character (Unicode
    category Cc: C0, DEL, C1) and no lone surrogate (Cs), which would reach servers' logs,
    traces and metrics labels as is; a percent-encoded form (:func:`encode_name`) of at most
    128 characters. pbkv-server serves a request whose names break them anonymously
    (``X-PBKV-Hints: ignored``).

    Returns:
        e.g. ``"contains the control character U+0009 at index 3"``, to follow the field's
        name; the index is the first bad character's position in ``name`` itself (a Python
        ``str`` index: characters, not UTF-8 bytes nor the encoded form).
    """
    if not isinstance(name, str):
        return f"is not a string ({type(name).__name__})"
    if not name:
        return "is empty"
    for index, char in enumerate(name):
        category = unicodedata.category(char)
        if category in ("Cc", "Cs"):
            what = "control character" if category == "Cc" else "lone surrogate"
            return f"contains the {what} U+{ord(char):04X} at index {index}"
    encoded = len(_quote(name))
    if encoded > MAX_FIELD_CHARS:
        return f"encodes to {encoded} chars, over {MAX_FIELD_CHARS}"
    return None


def hint_name_problem(hints: Hints) -> str | None:
    """Why the hints' agent or app name is unusable (:func:`name_problem`), or ``None`` when both are fine.

    :func:`parse_hints` lets decoded control characters through (a header percent-encodes
    them); a server that parsed hints calls this before it uses them.
    """
    for field, name in (("agent", hints.agent), ("app", hints.app)):
        if name is not None:
            problem = name_problem(name)
            if problem is not None:
                return f"{field} name {problem}"
    return None


def validate_workflow_id(value: str) -> str:
    """Return ``value`` if it is a valid workflow id, else raise :class:`HintError`."""
    if not isinstance(value, str) or not _WORKFLOW_ID_RE.match(value):
        raise HintError(f"workflow id must be {WORKFLOW_ID_RULE}")
    return value


def workflow_id_from(text: str, max_chars: int = MAX_FIELD_CHARS, empty: str = "workflow") -> str:
    """A valid workflow id made from any text (a task id, a log file name): characters outside
    ``[A-Za-z0-9._:-]`` become ``_``, cut to ``max_chars`` (<= 128); ``empty`` if nothing is left.

    Raises:
        ValueError: ``max_chars`` outside 1-128, or ``empty`` not a valid workflow id.
    """
    if not 1 <= max_chars <= MAX_FIELD_CHARS:
        raise ValueError(f"max_chars must be 1-{MAX_FIELD_CHARS}, got {max_chars}")
    validate_workflow_id(empty)
    return _NOT_WORKFLOW_ID_CHAR.sub("_", text)[:max_chars] or empty


def parse_step(value: Any) -> int:
    """Parse a step from a header string or JSON int; raise :class:`HintError` if invalid."""
    if isinstance(value, bool):
        raise HintError("step must be an integer")
    if isinstance(value, str):
        if not value.isascii() or not value.isdigit():
            raise HintError(f"step must be a non-negative integer, got {value[:20]!r}")
        value = int(value)
    if not isinstance(value, int) or not 0 <= value <= MAX_STEP:
        raise HintError(f"step must be an integer in [0, {MAX_STEP}]")
    return value


def parse_hints(headers: Mapping[str, str] | None, body: Any = None) -> tuple[Hints | None, str | None]:
    """Extract hints from request headers, falling back to ``body["custom_params"]["pbkv"]``.

    Headers win when both are present. Header lookup is case-insensitive.

    Args:
        headers: request headers (any mapping; keys compared case-insensitively).
        body: the decoded JSON body, or ``None``.

    Returns:
        ``(hints, None)`` when valid hints are present; ``(None, None)`` when the request has no
        hints at all (anonymous); ``(None, reason)`` when hints are present but malformed (a hint
        header repeated in a multi-dict such as Starlette's ``Headers`` included). Never raises: a
        malformed hint must not fail the LLM request.
    """
    pairs = [(k.lower(), v) for k, v in (headers or {}).items()]  # multi-dicts list repeated names
    lowered = dict(pairs)
    if len(lowered) < len(pairs):
        # one hint header sent twice has no single meaning (RFC 9110, 5.3: only list-valued fields
        # may repeat); taking either copy could file the request under the wrong workflow
        names = [k for k, _ in pairs]
        repeated = next((h for h in HEADERS + OPTIONAL_HEADERS if names.count(h.lower()) > 1), None)
        if repeated is not None:
            return None, f"{repeated} sent {names.count(repeated.lower())} times"
    try:
        hints = None
        if lowered.get(HEADER_WORKFLOW_ID.lower()) is not None:
            hints = _hints_from_headers(lowered)
        elif (pbkv := _body_hints(body)) is not None:
            hints = _hints_from_body(pbkv)
        if hints is not None:  # decoded names obey one rule in every server and plugin
            problem = hint_name_problem(hints)
            return (None, problem) if problem is not None else (hints, None)
    except HintError as exc:
        return None, str(exc)
    except Exception as exc:  # defensive: any odd value is a malformed hint, never a 500
        return None, f"malformed hint: {type(exc).__name__}"
    if any(h.lower() in lowered for h in HEADERS[1:] + OPTIONAL_HEADERS):
        return None, f"{HEADER_WORKFLOW_ID} missing while other PBKV headers are present"
    return None, None


def _body_hints(body: Any) -> Any:
    if not isinstance(body, Mapping):
        return None
    custom = body.get("custom_params")
    if not isinstance(custom, Mapping):
        return None
    return custom.get(BODY_KEY)


def _hints_from_headers(lowered: Mapping[str, str]) -> Hints:
    agent = lowered.get(HEADER_AGENT.lower())
    step = lowered.get(HEADER_STEP.lower())
    if agent is None or step is None:
        raise HintError(f"{HEADER_AGENT} and {HEADER_STEP} are required with {HEADER_WORKFLOW_ID}")
    app = lowered.get(HEADER_APP.lower())
    internal = lowered.get(HEADER_INTERNAL.lower(), "0")
    if internal not in ("0", "1"):
        raise HintError(f"{HEADER_INTERNAL} must be 1 or 0, got {internal[:20]!r}")
    return Hints(
        workflow_id=validate_workflow_id(lowered[HEADER_WORKFLOW_ID.lower()]),
        agent=decode_name(agent),
        step=parse_step(step),
        app=decode_name(app) if app is not None else None,
        internal=internal == "1",
    )


def _hints_from_body(pbkv: Any) -> Hints:
    if not isinstance(pbkv, Mapping):
        raise HintError("custom_params.pbkv must be an object")
    agent, app = pbkv.get("agent"), pbkv.get("app")
    for name, value in (("agent", agent), ("app", app)):
        if value is None and name == "app":
            continue
        if not isinstance(value, str) or not value or len(encode_name(value)) > MAX_FIELD_CHARS:
            raise HintError(f"custom_params.pbkv.{name} must be a non-empty string")
    internal = pbkv.get("internal", False)
    if not isinstance(internal, bool):
        raise HintError("custom_params.pbkv.internal must be true or false")
    return Hints(
        workflow_id=validate_workflow_id(pbkv.get("workflow_id")),
        agent=agent,
        step=parse_step(pbkv.get("step")),
        app=app,
        internal=internal,
    )


# --------------------------------------------------------------------------- KV-hint envelope
#
# The versioned envelope the engines define for orchestrator KV hints (vLLM RFC #53421 / PR #53423
# ``KvHintsEnvelope``, SGLang RFC #36224 / PR #38891 ``KvHints``, Dynamo ``KvHint`` #13134):
#
#     {"protocol_version": "0.1", "message_id": "...",
#      "actions": [{"action_id": "...", "action_type": "kv.fetch", "action_version": "1.0",
#                   "payload": {...}}]}
#
# Each action is versioned on its own; an engine acts on the types it knows and ignores the rest.
# Where it travels and what the actions are called, as the public code has them:
#
# - vLLM and SGLang: the request field ``kv_hints``;
# - Dynamo: one message named ``kv_hint`` (#13134), which its vLLM bridge passes as
#   ``kv_transfer_params.kv_hint``; #14890 lowers it into vLLM's ``kv_hints``;
# - types: ``kv.fetch`` (Dynamo's router, KVCR), ``kv.retain`` / ``kv.evict`` (Dynamo's session
#   policy and the vLLM block actions it feeds: payload ``priority``, ``ttl_seconds``,
#   ``execute_at: "request_completion"``, ``block_hashes``; its envelopes say protocol ``1.0``),
#   ``kv.deref`` / ``kv.demote`` / ``kv.prefetch`` (SGLang's KvHintManager: ``deref`` drops the
#   request's own session once it completes, ``demote`` names ``payload.session_id``), and RFC
#   #51428's Pin; action versions ``1.0``.

#: Body field of the KV-hint envelope (vLLM, SGLang).
KV_HINTS_KEY = "kv_hints"
#: Dynamo's name for the same message, at the top of the body or under ``kv_transfer_params``.
KV_HINT_KEY_DYNAMO = "kv_hint"
#: Envelope versions understood: the RFCs' ``0.1`` and any ``1.x`` (Dynamo's session policy sends
#: ``1.0``). Another one has all its actions ignored (counted), never an error.
KV_HINT_PROTOCOL_VERSIONS = ("0.1",)
KV_HINT_PROTOCOL_MAJOR = "1"
#: Action major version understood ("1.0", "1.1", ...).
KV_HINT_ACTION_MAJOR = "1"
#: Action types PBKV understands -> what it means to PBKV: ``retain`` (keep a trajectory's cache;
#: RFC #51428's Retain and Pin), ``demote`` / ``evict`` (the trajectory is over, its cache may go
#: first; SGLang's ``kv.deref`` is the same for the request's own session), ``fetch`` (bring the
#: trajectory's cache close before it is needed; Dynamo's ``kv.fetch``, SGLang's ``kv.prefetch``).
KV_HINT_ACTION_KINDS = {
    "kv.retain": "retain", "kv.pin": "retain",
    "kv.demote": "demote", "kv.evict": "evict", "kv.deref": "evict",
    "kv.fetch": "fetch", "kv.prefetch": "fetch",
}
#: Most actions read from one envelope (more are counted as ignored; SGLang's own bound).
MAX_KV_HINT_ACTIONS = 64


@dataclass(frozen=True, slots=True)
class KvHintAction:
    """One understood action of a KV-hint envelope.

    Attributes:
        action_id: the sender's id of the action.
        kind: ``retain`` | ``demote`` | ``evict`` | ``fetch`` (:data:`KV_HINT_ACTION_KINDS`).
        action_type, action_version: as sent.
        workflow_id: the trajectory the action targets: ``payload.workflow_id``, else
            ``payload.session_id`` (SGLang's demote target), else ``None`` (the request's own).
        payload: the action's payload object, as sent (``{}`` when left out, as SGLang allows).
    """

    action_id: str
    kind: str
    action_type: str
    action_version: str
    workflow_id: str | None
    payload: Mapping[str, Any]

    def target(self, own: str | None) -> str | None:
        """The workflow the action is about: its own target, else ``own`` (the request's)."""
        return self.workflow_id if self.workflow_id is not None else own

    def after_request(self, own: str | None) -> bool:
        """Whether the action waits for the request to finish: a demote/evict of the request's own
        trajectory is its final turn (vLLM's ``execute_at: request_completion``, SGLang's deref on
        success, Dynamo closing a trajectory after the stream); retiring it first would serve the
        request as a new use of the id."""
        return self.kind in ("demote", "evict") and self.target(own) == own

    def keeps(self, own: str | None) -> str | None:
        """The other workflow a retain or fetch says runs on (its idle clock restarts: a
        trajectory in a long tool call keeps its cache's rank), else ``None``: another kind, no
        target, or the request's own workflow (its invocation is its activity already). Every
        consumer applies it the same way (``WorkflowTable.keep``); a hint never starts a workflow."""
        target = self.target(own)
        return target if self.kind in ("retain", "fetch") and target is not None and target != own else None


@dataclass(frozen=True, slots=True)
class KvHintEnvelope:
    """A parsed KV-hint envelope: the understood actions and how many were ignored.

    Attributes:
        protocol_version, message_id: as sent.
        actions: understood actions, in the order sent.
        ignored: actions of an unknown type or version (or past :data:`MAX_KV_HINT_ACTIONS`); an
            envelope of an unknown protocol version has all its actions ignored.
        field: where the envelope was found (``kv_hints``, ``kv_hint``, ``kv_transfer_params.kv_hint``).
    """

    protocol_version: str
    message_id: str
    actions: tuple[KvHintAction, ...]
    ignored: int
    field: str = KV_HINTS_KEY


#: Where an envelope may sit in a body, first found wins.
_KV_HINT_FIELDS = ((KV_HINTS_KEY,), (KV_HINT_KEY_DYNAMO,), ("kv_transfer_params", KV_HINT_KEY_DYNAMO))


def find_kv_hints(body: Mapping) -> tuple[str, Any]:
    """Where a body carries its KV-hint envelope, as ``(dotted field, raw value)``: ``kv_hints``
    (vLLM, SGLang), else Dynamo's ``kv_hint`` or ``kv_transfer_params.kv_hint``; ``("kv_hints",
    None)`` when it carries none. The value is not checked (:func:`parse_kv_hints` does that):
    a proxy forwards it as it came, the engine's book parses it."""
    for path in _KV_HINT_FIELDS:
        value: Any = body
        for key in path:
            value = value.get(key) if isinstance(value, Mapping) else None
        if value is not None:
            return ".".join(path), value
    return KV_HINTS_KEY, None


def parse_kv_hints(body: Any) -> tuple[KvHintEnvelope | None, str | None]:
    """The KV-hint envelope of a request body: ``body["kv_hints"]`` (vLLM, SGLang), else Dynamo's
    ``body["kv_hint"]`` or ``body["kv_transfer_params"]["kv_hint"]``.

    Unknown action types and versions, and envelopes of an unknown protocol version, are not
    errors: they are counted in :attr:`KvHintEnvelope.ignored`. Missing or mistyped fields are.

    Returns:
        ``(envelope, None)``; ``(None, None)`` when the body has no envelope; ``(None, reason)``
        when the envelope is malformed (callers count it as a malformed hint and serve the request
        as if it had none; ``reason`` starts with the field's name). Never raises.
    """
    if not isinstance(body, Mapping):
        return None, None
    try:
        where, env = find_kv_hints(body)
    except Exception:  # an odd mapping type: no envelope to read
        return None, None
    if env is None:
        return None, None
    try:
        return _kv_envelope(env, where), None
    except HintError as exc:
        return None, f"{where}: {exc}"
    except Exception as exc:  # defensive: never a 500 over a hint
        return None, f"{where}: malformed ({type(exc).__name__})"


def _kv_str(obj: Mapping, field: str, where: str) -> str:
    value = obj.get(field)
    if not isinstance(value, str) or not value or len(value) > 256:
        raise HintError(f"{where}.{field} must be a non-empty string of at most 256 chars")
    return value


def _kv_version_known(version: str) -> bool:
    return version in KV_HINT_PROTOCOL_VERSIONS or version.split(".", 1)[0] == KV_HINT_PROTOCOL_MAJOR


def _kv_envelope(env: Any, where: str) -> KvHintEnvelope:
    if not isinstance(env, Mapping):
        raise HintError("must be an object")
    version = _kv_str(env, "protocol_version", "envelope")
    message_id = _kv_str(env, "message_id", "envelope")
    actions = env.get("actions")
    if not isinstance(actions, list):
        raise HintError("envelope.actions must be a list")
    known_version = _kv_version_known(version)
    understood: list[KvHintAction] = []
    ignored = 0
    for i, action in enumerate(actions):
        at = f"actions[{i}]"
        if not isinstance(action, Mapping):
            raise HintError(f"{at} must be an object")
        action_id = _kv_str(action, "action_id", at)
        action_type = _kv_str(action, "action_type", at)
        action_version = _kv_str(action, "action_version", at)
        payload = action.get("payload")
        if payload is None:
            payload = {}  # SGLang's KvHintAction defaults it; an empty payload is a valid one
        if not isinstance(payload, Mapping):
            raise HintError(f"{at}.payload must be an object")
        kind = KV_HINT_ACTION_KINDS.get(action_type)
        if (not known_version or kind is None
                or action_version.split(".", 1)[0] != KV_HINT_ACTION_MAJOR or len(understood) >= MAX_KV_HINT_ACTIONS):
            ignored += 1
            continue
        target = payload.get("workflow_id", payload.get("session_id"))
        if target is not None:
            try:
                validate_workflow_id(target)
            except HintError:
                raise HintError(f"{at}.payload: workflow_id / session_id must be {WORKFLOW_ID_RULE}") from None
        understood.append(KvHintAction(action_id, kind, action_type, action_version, target, payload))
    return KvHintEnvelope(version, message_id, tuple(understood), ignored, where)
