"""Growing conversations for ``pbkv``: the path the next call of a conversation extends.

In a growing conversation (a coding agent, a chat) each call's prompt is the previous call's
prompt with the new output and tool results appended. The next call of the conversation, made by
*whichever* agent (or by the user, in the next turn), therefore reuses the whole prompt path of
the conversation's latest call, and nothing else of its history: history a compaction (summary)
replaced is never sent again. PBKV Eq. 2 scores a node by the agents that touched it, which
misranks both (issue 36): the path of a turn's first call, touched only by ``user`` (whose
predicted probability inside a turn is 0), scores 0 though the next call extends it, and
compacted history touched by ``agent`` keeps a positive score though no call resends it.

This module tracks, per conversation (the session of a workflow that is a turn of one, else the
workflow itself), the nodes of its latest call's prompt path (the *live* path), and per app
whether its calls grow: a call *extends* its conversation's previous call when its prompt
starts with all of the previous prompt's blocks and is longer (a call that resends the same prompt
does not grow the conversation). An app is growing when most of its calls that
have a predecessor extend it (an online count, so an app whose agents send unrelated prompts
keeps Eq. 2 as is). :class:`PBKVPolicy` (:mod:`.pbkv`) then scores, for each active workflow of a
growing app, its conversation's live path as used by the workflow's next call of any agent (the
workflow's total weight, :meth:`~pbkv_server.engine.scoring.ScoreBoard.total_weight`) and the
rest of its history as unused (part 0).

Cost: an admission walks its path once (O(path nodes)); a node's live set is read in O(1).
Deterministic: dicts used as ordered sets, nothing keyed by address order.
"""

from __future__ import annotations

from typing import Callable, Hashable, Sequence

#: Share of an app's calls (with a predecessor in their conversation) that must extend the
#: predecessor's prompt for the app to count as growing (a strict majority).
GROWING_SHARE = 0.5
#: :meth:`Conversations.path_nodes` of a conversation with no live path (never written).
_NO_PATH: dict = {}


class Conversations:
    """Live paths of conversations and the growth count of apps (see module docstring).

    Args:
        refresh: ``refresh(node)``, re-files a node whose live state changed (the policy's
            cache's :meth:`~pbkv_server.engine.cache.PrefixCache.refresh`).

    Attributes:
        growing_apps: the apps :meth:`growing` is true of (kept at each count, so that a policy's
            priority reads a set rather than recounting); read only.
        live_of: node -> {conversation: None} whose live path holds it (what :meth:`live_in`
            returns, for a policy's priority to read without a call); read only.
    """

    def __init__(self, refresh: Callable[[object], None]) -> None:
        self._refresh = refresh
        self._last: dict = {}  # conversation -> (prompt blocks, last block key) of its latest call
        self._path: dict = {}  # conversation -> {node: None}, its latest call's prompt path
        self.live_of: dict = {}  # node -> {conversation: None} whose live path holds it
        self._grow: dict = {}  # app -> [calls that extended their predecessor, calls with one]
        self.growing_apps: set = set()  # apps whose count says they grow (membership only)
        self._app: dict = {}  # conversation -> its app
        self._call: dict = {}  # conversation -> id of its latest admitted call (see :meth:`cached`)

    # ------------------------------------------------------------------ queries
    def growing(self, app) -> bool:
        """True if most calls of ``app`` with a predecessor extended its prompt."""
        return app in self.growing_apps

    def live(self, node, conversation: Hashable) -> bool:
        """True if ``node`` is on ``conversation``'s latest prompt path."""
        convs = self.live_of.get(node)
        return convs is not None and conversation in convs

    def live_in(self, node) -> dict | None:
        """The conversations whose latest prompt path holds ``node`` (``None``: none)."""
        return self.live_of.get(node)

    def path_nodes(self, conversation: Hashable) -> dict:
        """The conversation's live path as kept, ``{node: None}`` in :meth:`path`'s order (empty:
        none): read only, and not across a change of the path (a caller that would builds
        :meth:`path`'s copy). For a test of membership without a set built per call."""
        return self._path.get(conversation, _NO_PATH)

    def app_of(self, conversation: Hashable):
        """App of the conversation's latest call (``None`` if it has none)."""
        return self._app.get(conversation)

    # ------------------------------------------------------------------ events
    def admitted(self, conversation: Hashable, app, blocks: Sequence[Hashable], path: Sequence,
                 call: Hashable = None) -> None:
        """Call ``call`` (its request id, or ``None``) of ``conversation`` was admitted with prompt
        ``blocks`` and cache path ``path`` (root first): count whether it extended the previous
        call, and make ``path`` the live path."""
        self._call[conversation] = call
        last = self._last.get(conversation)
        if last is not None:
            n, key = last
            count = self._grow.setdefault(app, [0, 0])
            count[1] += 1
            if len(blocks) > n + 1 and blocks[n - 1] == key:  # longer, and holds the previous prompt
                count[0] += 1
            if count[0] > GROWING_SHARE * count[1]:
                self.growing_apps.add(app)
            else:
                self.growing_apps.discard(app)
        if len(blocks) >= 2:
            # the last block is usually partial (hashed over fewer characters), so the next prompt,
            # which continues the text, holds a different key there: compare the one before it
            # (prefix hashes chain, so equal keys there mean equal prompts up to it)
            self._last[conversation] = (len(blocks) - 1, blocks[-2])
        self._app[conversation] = app
        self._set_path(conversation, path)

    def cached(self, conversation: Hashable, call: Hashable, path: Sequence) -> None:
        """The prompt of call ``call`` is now cached along ``path`` (root first), deeper than its
        admission's path (a backend that inserts a prompt after admitting it: SGLang). It becomes
        the live path if ``call`` is still the conversation's latest admitted call (a later call
        already made its own path live); nothing is counted."""
        if call is not None and conversation in self._path and self._call.get(conversation) == call:
            self._set_path(conversation, path)

    def _set_path(self, conversation: Hashable, path: Sequence) -> None:
        """Make ``path`` the conversation's live path; nodes that leave it are re-filed."""
        new = dict.fromkeys(path)
        old = self._path.get(conversation)
        self._path[conversation] = new
        live = self.live_of
        if old:
            for node in old:
                if node not in new:
                    convs = live.get(node)
                    if convs is not None and conversation in convs:
                        del convs[conversation]
                        if not convs:
                            del live[node]
                        self._refresh(node)  # no longer the conversation's next prefix
        for node in new:  # (not setdefault: it would build a dict per node, mostly for nothing)
            convs = live.get(node)
            if convs is None:
                live[node] = {conversation: None}
            else:
                convs[conversation] = None

    def path(self, conversation: Hashable) -> list:
        """Nodes of the conversation's live path (cached ones; root first, then the upper parts
        of nodes cut since it was set).

        A copy of the path as kept: each of its nodes is in :attr:`live_of` (every change of
        either keeps both: :meth:`_set_path`, :meth:`split`, :meth:`drop`, :meth:`ended`), and a
        node that leaves the cache leaves both (:meth:`drop`). (A filter on :attr:`live_of`
        here cost a lookup per node: this is read at every event of a growing conversation.)"""
        return list(self._path.get(conversation, ()))

    def ended(self, conversation: Hashable) -> None:
        """The conversation ended (a workflow without a session, or a closed session): its path
        is no longer anyone's next prefix."""
        self._last.pop(conversation, None)
        self._app.pop(conversation, None)
        self._call.pop(conversation, None)
        old = self._path.pop(conversation, None)
        if not old:
            return
        live = self.live_of
        for node in old:
            convs = live.get(node)
            if convs is not None and conversation in convs:
                del convs[conversation]
                if not convs:
                    del live[node]
                self._refresh(node)

    def split(self, top, bottom) -> None:
        """``bottom`` was cut and ``top`` is its new upper part: it is on every path ``bottom`` is."""
        convs = self.live_of.get(bottom)
        if convs is None:
            return
        self.live_of[top] = dict(convs)
        for conv in convs:
            self._path[conv][top] = None

    def drop(self, node) -> None:
        """``node`` left the cache."""
        convs = self.live_of.pop(node, None)
        if convs is not None:
            for conv in convs:
                p = self._path.get(conv)
                if p is not None:
                    p.pop(node, None)
