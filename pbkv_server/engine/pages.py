"""Cache units of a prompt: whole pages of ``page_size`` tokens, or whole blocks.

The engine caches KV in units. A request arrives as chained block keys (token-id blocks live,
trace prefix hashes in replay) with a token count per block; :func:`to_units` turns them into the
keys and token counts the radix tree stores:

- ``page_size=None`` (block granularity, the replay default): one unit per block; blocks of 0
  tokens (a trace that spreads few tokens over many hashes) are left out, since their identity is
  carried by the next block's chained key, so the tree never holds a 0-token node;
- ``page_size=P`` tokens (SGLang's ``--page-size``; the live server uses 1): one unit per whole
  page, keyed by the prefix it closes, ``(key of the block holding the page's last token, that
  token's offset in the block)``; the tokens after the last whole page (fewer than P) are never
  cached, as in a paged KV pool, and are prefilled by every request that has them.

Two prompts share a unit exactly when they share the block that closes it and the token offset in
it, so page sharing follows block sharing; a node is always a run of whole units, and eviction
frees whole units only (``docs/architecture.md``, "Engine core").
"""

from __future__ import annotations

import bisect
import itertools
from typing import Hashable, NamedTuple, Sequence

__all__ = ["Units", "to_units", "block_size"]


class Units(NamedTuple):
    """A prompt in cache units.

    Attributes:
        keys: unit keys, in order (the tree's keys).
        toks: tokens of each unit (``page_size`` each in page mode; >= 1 always).
        tail: tokens after the last whole page (page mode; 0 with block granularity), not cached.
    """

    keys: list
    toks: list[int]
    tail: int


def to_units(blocks: Sequence[Hashable], toks: Sequence[int], page_size: int | None,
             least: int | None = None) -> Units:
    """The cache units of a prompt given as block keys with tokens per block.

    Args:
        least: ``min(toks, default=1)`` if the caller has it already (the engine checks the counts
            for a negative one: a second pass over a prompt's ~1,300 counts is saved).

    Raises:
        ValueError: ``page_size`` < 1.
    """
    if page_size is None:
        if least is None:
            least = min(toks, default=1)
        if len(blocks) == len(toks) and least > 0:  # no 0-token block: copies made in C
            return Units(list(blocks), list(toks), 0)
        kept = [(k, n) for k, n in zip(blocks, toks) if n > 0]
        return Units([k for k, _ in kept], [n for _, n in kept], 0)
    if page_size < 1:
        raise ValueError(f"page_size must be >= 1 token, got {page_size}")
    total = sum(toks)
    pages, tail = divmod(total, page_size)
    if page_size == 1:  # one unit per token: the common live case, without a search per page
        keys = [(k, i) for k, n in zip(blocks, toks) for i in range(n)]
        return Units(keys, [1] * total, 0)
    ends = list(itertools.accumulate(toks))  # ends[b] = tokens up to and including block b
    keys = []
    for i in range(pages):
        last = (i + 1) * page_size - 1  # index of the page's last token
        b = bisect.bisect_right(ends, last)
        keys.append((blocks[b], last - (ends[b] - toks[b])))
    return Units(keys, [page_size] * pages, tail)


def block_size(toks: list) -> int | None:
    """The tokens of each unit of ``toks`` but the last, where they are one int (and the last is
    an int), else None: then the sum of any units of ``toks`` is a product of that size.

    A block-hash trace's prompt is blocks of one size but the last (64-token blocks, a partial
    last one), and so are the ghost's runs, pieces of prompts. One ``list.count`` in C tells
    (equal small ints are one object, which it matches without a comparison), where a ``sum``
    costs several times as much per unit. Only the first and the last are type-checked: a caller
    that takes counts from outside also checks that ``sum(toks)`` is an int (a float equal to the
    size would count as it; :func:`~pbkv_server.engine.engine._uniform_least`)."""
    n = len(toks)
    if not n:
        return None
    first, last = toks[0], toks[-1]
    if type(first) is not int or type(last) is not int or n > 2 and toks[-2] != first:
        return None
    same = toks.count(first)
    return first if same == n or same == n - 1 and last != first else None
