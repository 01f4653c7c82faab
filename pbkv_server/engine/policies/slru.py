"""``slru``: SGLang's segmented LRU (``--radix-eviction-policy slru``).

Source: sgl-project/sglang PR #18843, ``python/sglang/srt/mem_cache/evict_policy.py``
(``SLRUStrategy``: ``(is_protected, last_access_time)`` with ``is_protected = hit_count >=
protected_threshold``, threshold 2 by default; smallest first) and ``radix_cache.py`` (a prefix
match adds 1 to ``hit_count`` of every node it walks; a node is created by an insert with 0). So
cache that at most one later request matched (the probationary segment) leaves before cache that
two or more matched (the protected segment), LRU inside each segment. Nothing is ever demoted:
a protected node stays protected until it is evicted.

Modelling choices: a request's match is its admission (the engine matches a prompt once, when it
is admitted; SGLang may match a waiting request again at each scheduling round, which we do not
count). The node a request inserts (the last of its path, first seen then) starts at 0; every other
node of the path gains one hit. A split's upper part keeps the count of the node it was cut from
(it was matched as often). Output KV inserted at finish is never matched by a later prompt in
replay (its keys are the request's own), so it stays probationary.
"""

from __future__ import annotations

from .base import Policy, register_policy

#: Hits from which a node is protected (SGLang's ``protected_threshold`` default).
PROTECTED_THRESHOLD = 2


@register_policy("slru")
class SLRUPolicy(Policy):
    """``(protected, last_access)``: nodes matched fewer than :data:`PROTECTED_THRESHOLD` times
    first, LRU inside each segment. Per-node state (kept here, keyed by node): its hit count."""

    summary = "SGLang segmented LRU: nodes matched < 2 times leave first, LRU inside each segment"
    shipped_by, shipped_as = frozenset({"sglang"}), "slru eviction"

    def __init__(self, context) -> None:
        super().__init__(context)
        self._hits: dict = {}  # node -> prefix matches that walked it since it was inserted

    def priority(self, node) -> tuple:
        """``(1 if hits >= threshold else 0, last_access)``."""
        return (1 if self._hits.get(node, 0) >= PROTECTED_THRESHOLD else 0, node.last_access)

    def hits(self, node) -> int:
        """The node's hit count (0 for a node no admission has seen)."""
        return self._hits.get(node, 0)

    def on_admit(self, admission, path) -> None:
        """Count the match: +1 on every node of the path seen before; a node seen now for the
        first time was inserted by this request and starts at 0. The path is locked until the
        request finishes, and released nodes are re-filed then, so nothing is re-filed here."""
        hits = self._hits
        for node in path:
            count = hits.get(node)
            hits[node] = 0 if count is None else count + 1

    def on_split(self, top, bottom) -> None:
        """The upper part keeps the count of the node it was cut from."""
        count = self._hits.get(bottom)
        if count is not None:
            self._hits[top] = count

    def on_drop(self, node) -> None:
        """Forget the node."""
        self._hits.pop(node, None)
