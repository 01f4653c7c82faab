"""Which KV-hint envelope actions a server reads: the advertisement clients check before sending.

The envelope (``kv_hints``, :func:`pbkv_contract.hints.parse_kv_hints`) is an extra request field;
a server that does not know it may reject the request (api.openai.com does) or drop it. So a
client attaches envelope actions only to a server that advertises them, in either of two forms:

- the answer header ``X-PBKV-KV-Hints`` on every answer (:func:`advertisement`), e.g.
  ``protocols=0.1,1; actions=kv.deref@1,kv.demote@1,kv.evict@1,...``: ``protocols`` lists the
  envelope ``protocol_version`` values read (``1`` stands for any ``1.x``), ``actions`` the
  ``action_type@major`` pairs read (an action of another major version is ignored);
- ``GET /pbkv/v1/kv_hints`` (:data:`KV_HINTS_PATH`), the same as JSON (:func:`document`), for
  routers and for clients that want to know before their first request.

pbkv-server, the vLLM backend's middleware and the SGLang plugin's HTTP routes advertise; the SDK
(:mod:`pbkv_sdk.kv_hints`) learns each origin's advertisement once and fails open (nothing learned:
no envelope). :func:`parse_advertisement` is the one reader of the header.
"""

from __future__ import annotations

from typing import Any, Iterable

from pbkv_contract.hints import (
    KV_HINT_ACTION_KINDS, KV_HINT_ACTION_MAJOR, KV_HINT_PROTOCOL_MAJOR, KV_HINT_PROTOCOL_VERSIONS, KV_HINTS_KEY,
)

__all__ = ["HEADER_KV_HINTS", "KV_HINTS_PATH", "advertisement", "document", "parse_advertisement",
           "Advertised", "MAX_ADVERTISEMENT_CHARS"]

#: Answer header of the advertisement.
HEADER_KV_HINTS = "X-PBKV-KV-Hints"
#: GET route of the advertisement as JSON.
KV_HINTS_PATH = "/pbkv/v1/kv_hints"
#: Longest header value read (a longer one is not an advertisement: a client sends no envelope).
MAX_ADVERTISEMENT_CHARS = 2048


class Advertised:
    """A parsed advertisement: the envelope protocol versions and ``type@major`` actions read.

    Args:
        protocols: ``protocol_version`` values read (``"1"``: any ``1.x``).
        actions: ``action_type@major`` strings.
    """

    __slots__ = ("protocols", "actions")

    def __init__(self, protocols: Iterable[str], actions: Iterable[str]) -> None:
        self.protocols = frozenset(protocols)
        self.actions = frozenset(actions)

    def reads_protocol(self, version: str) -> bool:
        """Whether an envelope of ``protocol_version`` ``version`` is read."""
        return version in self.protocols or version.split(".", 1)[0] in self.protocols

    def reads(self, action_type: str, action_version: str) -> bool:
        """Whether an action of ``action_type`` at ``action_version`` (``"1.0"``) is read."""
        return f"{action_type}@{action_version.split('.', 1)[0]}" in self.actions

    def __bool__(self) -> bool:
        return bool(self.protocols and self.actions)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Advertised) and (self.protocols, self.actions) == (other.protocols, other.actions)

    def __repr__(self) -> str:
        return f"Advertised(protocols={sorted(self.protocols)}, actions={sorted(self.actions)})"


def _actions(types: Iterable[str] | None) -> list[str]:
    known = sorted(KV_HINT_ACTION_KINDS if types is None else types)
    unknown = [t for t in known if t not in KV_HINT_ACTION_KINDS]
    if unknown:  # a consumer can only advertise what the one parser reads
        raise ValueError(f"not envelope action types PBKV reads: {unknown}")
    return [f"{t}@{KV_HINT_ACTION_MAJOR}" for t in known]


def advertisement(types: Iterable[str] | None = None) -> str:
    """The ``X-PBKV-KV-Hints`` header value for a server reading ``types`` (default: every type
    :func:`~pbkv_contract.hints.parse_kv_hints` understands).

    Raises:
        ValueError: a type the parser does not understand.
    """
    protocols = [*KV_HINT_PROTOCOL_VERSIONS, KV_HINT_PROTOCOL_MAJOR]
    return f"protocols={','.join(protocols)}; actions={','.join(_actions(types))}"


def document(types: Iterable[str] | None = None, effects: dict[str, str] | None = None) -> dict[str, Any]:
    """The JSON body of ``GET /pbkv/v1/kv_hints``: the header's content, plus where the envelope
    is read and, per action, what it does on this server (``effects``: kind -> words).

    Raises:
        ValueError: a type the parser does not understand.
    """
    actions = []
    for pair in _actions(types):
        action_type, major = pair.split("@")
        kind = KV_HINT_ACTION_KINDS[action_type]
        entry = {"action_type": action_type, "action_version": major, "kind": kind}
        if effects and kind in effects:
            entry["effect"] = effects[kind]
        actions.append(entry)
    return {"header": HEADER_KV_HINTS, "advertisement": advertisement(types),
            "protocol_versions": [*KV_HINT_PROTOCOL_VERSIONS, KV_HINT_PROTOCOL_MAJOR],
            "fields": [KV_HINTS_KEY, "kv_hint", "kv_transfer_params.kv_hint"], "actions": actions}


def parse_advertisement(value: Any) -> Advertised:
    """The advertisement in header value ``value`` (``None``, not a string, too long or without
    both parts: nothing advertised, an empty :class:`Advertised`). Unknown parts are skipped, so a
    later server may add some. Never raises."""
    if not isinstance(value, str) or len(value) > MAX_ADVERTISEMENT_CHARS:
        return Advertised((), ())
    parts: dict[str, list[str]] = {}
    for part in value.split(";"):
        key, sep, items = part.partition("=")
        if sep:
            parts[key.strip().lower()] = [i.strip() for i in items.split(",") if i.strip()]
    actions = [a for a in parts.get("actions", ()) if a.count("@") == 1 and all(a.split("@"))]
    return Advertised(parts.get("protocols", ()), actions)
