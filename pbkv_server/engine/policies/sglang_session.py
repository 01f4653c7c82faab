"""``sglang-session``: SGLang's session-aware radix cache (``--enable-session-radix-cache``).

Source: sgl-project/sglang PR #27058 ("feat: session radix cache": a session is a tag over
ordinary evictable radix KV, a request carries a top-level ``session_id``, ``/close_session``
releases it; no open step, no pinned slot, no timeout) and PR #29173 ("Session-reference-aware
Unified Radix Cache": every node on a session's cached path holds a reference of that session;
eviction takes unreferenced nodes first, then referenced ones; close only drops the session's
references, ``python/sglang/srt/mem_cache/unified_cache_components/session_unified_radix_cache.py``).
It replaced ``--enable-streaming-session``, whose non-evictable session KV could fill the pool and
wedge the worker (issue #27024). Lifecycle-aware eviction without a predictor.

Rules, as merged in #29173 (the later of the two):

- a request with a ``session_id`` references every node of its path (the nodes it matched and the
  ones it inserted) for that session, once per session; a split node's upper part is referenced by
  the sessions of its lower part;
- eviction order: nodes no open session references, least recently used first (SGLang's LRU
  strategy inside the tier), then referenced nodes, least recently used first;
- ``/close_session`` drops the session's references; the nodes then rank with the unreferenced
  ones (#27058 freed the session's private chain at once instead; under the tier order that KV is
  the first to go anyway). A closed id is remembered (the newest 8192, as SGLang's tombstones) so
  a request arriving after the close does not reference anything again.

Modelling choices: a request's ``session_id`` is :attr:`EngineRequest.session_id`. In replay it is
the trace record's ``session_id`` when present (a chat conversation whose turns are each a
workflow), else the workflow id (an agent workflow is one session), and the simulator closes the
session when its replay unit's last workflow ends, as an app closes its conversation; on
``pbkv-server`` it is the request body's top-level ``session_id`` and ``POST /close_session``.
Requests without a session (and nodes they alone use) are unreferenced.
"""

from __future__ import annotations

from collections import OrderedDict

from .base import Policy, register_policy

#: Closed session ids remembered so that late requests do not reference again (SGLang's bound).
CLOSED_IDS_KEPT = 8192


@register_policy("sglang-session")
class SGLangSessionPolicy(Policy):
    """Unreferenced ``(0, last_access)`` before session-referenced ``(1, last_access)``.

    Per-node state (kept here, keyed by node): the open sessions that reference the node.
    """

    summary = "SGLang session radix cache: nodes of open sessions after all others, LRU within each"
    #: what the client sends that this rule reads (--no-hints removes it: the rule replays as lru)
    client_signal = "SGLang session id"
    shipped_by, shipped_as = frozenset({"sglang"}), "session cache"

    def __init__(self, context) -> None:
        super().__init__(context)
        self._refs: dict = {}  # node -> set of open session ids referencing it
        self._nodes: dict[str, set] = {}  # session id -> nodes it references
        self._closed: OrderedDict[str, None] = OrderedDict()

    def priority(self, node) -> tuple:
        """``(1 if an open session references the node else 0, last_access)``."""
        return (1 if self._refs.get(node) else 0, node.last_access)

    def referenced(self, node) -> bool:
        """True if an open session references ``node``."""
        return bool(self._refs.get(node))

    def on_admit(self, admission, path) -> None:
        """Reference every node of the request's path for its session (once per session)."""
        request = admission.request
        sid = request.session_id if request is not None else None
        if sid is None or sid in self._closed:
            return
        mine = self._nodes.setdefault(sid, set())
        for node in path:
            if node in mine:
                continue
            mine.add(node)
            refs = self._refs.setdefault(node, set())
            refs.add(sid)
            if len(refs) == 1:
                self.context.reorder(node)

    def on_session_close(self, session_id: str) -> None:
        """Drop the session's references; remember the id as closed."""
        self._closed[session_id] = None
        self._closed.move_to_end(session_id)
        while len(self._closed) > CLOSED_IDS_KEPT:
            self._closed.popitem(last=False)
        for node in self._nodes.pop(session_id, ()):
            refs = self._refs.get(node)
            if refs is None:
                continue
            refs.discard(session_id)
            if not refs:
                del self._refs[node]
                self.context.reorder(node)

    def on_split(self, top, bottom) -> None:
        """The upper part is referenced by the sessions of the lower part."""
        refs = self._refs.get(bottom)
        if refs:
            self._refs[top] = set(refs)
            for sid in refs:
                self._nodes[sid].add(top)

    def on_drop(self, node) -> None:
        """Forget the node."""
        for sid in self._refs.pop(node, ()):
            self._nodes[sid].discard(node)
