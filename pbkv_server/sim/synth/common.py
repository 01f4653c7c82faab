"""What the synthetic workloads share (:mod:`.agents`, :mod:`.chat`, :mod:`.coding`): text as
hashed segments, and the draws of lengths and words.

Texts are not generated: a prompt is a sequence of segments (id, characters) and the chained hash
of a block hashes the (segment, offset, length) pieces it holds (:class:`Hasher`), which has the
sharing structure of hashing real text whose segments are distinct. Tokens are
``characters / CHARS_PER_TOKEN``.
"""

from __future__ import annotations

import math
import random
from typing import Sequence

from pbkv_contract.blocks import chain_hash

__all__ = ["CHARS_PER_TOKEN", "Hasher", "segment_hashes", "loguniform", "random_words"]

#: Characters per token of the synthetic text (English prose / code average for BPE tokenizers).
CHARS_PER_TOKEN = 4


def segment_hashes(segments: Sequence[tuple[str, int]], block_chars: int) -> list[str]:
    """Chained block hashes of a text made of distinct segments ``(segment id, characters)``.

    Block b holds characters ``[b * block_chars, (b + 1) * block_chars)``; its hash is
    ``sha256(h_{b-1} || pieces)`` at full width (:func:`pbkv_contract.blocks.chain_hash`, 64 hex
    digits, ``h_{-1}`` empty), where ``pieces`` names the (segment, offset, length) runs in the
    block. Two prompts share their first n hashes exactly when their first n blocks hold the same
    pieces, as with :func:`pbkv_contract.blocks.prefix_hashes` on text.

    Returns:
        ``ceil(total characters / block_chars)`` hex strings.
    """
    return Hasher(block_chars).hashes(segments)


def loguniform(rng: random.Random, lo: int, hi: int) -> int:
    """An integer drawn log-uniformly from ``[lo, hi]`` (0 when ``hi <= 0``, ``lo`` when ``lo >= hi``)."""
    if hi <= 0:
        return 0
    if lo >= hi:
        return lo
    return int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))


def random_words(rng: random.Random, vocab: Sequence[str], n: int) -> str:
    """``n`` words drawn from ``vocab``, each followed by a space (empty for an empty vocabulary)."""
    return " ".join(rng.choice(vocab) for _ in range(n)) + " " if vocab else ""


class Hasher:
    """Segment hashing with a memo of hash-chain states at segment boundaries.

    Prompts of one workflow extend each other and every prompt starts with the shared preamble and
    role, so the chain state after a segment prefix is reused instead of rehashing it.
    """

    def __init__(self, block_chars: int):
        self.block_chars = block_chars
        self._memo: dict[tuple[str, ...], tuple[bytes, tuple[str, ...], int, tuple[str, ...]]] = {}

    def hashes(self, segments: Sequence[tuple[str, int]]) -> list[str]:
        return self.hashes_and_tokens(segments)[0]

    def hashes_and_tokens(self, segments: Sequence[tuple[str, int]]) -> tuple[list[str], list[int]]:
        """Hashes and tokens per block (full blocks ``block_chars / CHARS_PER_TOKEN``, last rounded up)."""
        key: tuple[str, ...] = ()
        prev, pieces, fill, out = b"", (), 0, ()
        start = 0
        # Longest memoised segment prefix (memo keys carry the lengths in the ids).
        for i in range(len(segments), 0, -1):
            k = tuple(f"{s}#{n}" for s, n in segments[:i])
            if k in self._memo:
                prev, pieces, fill, out = self._memo[k]
                key, start = k, i
                break
        out_l, pieces_l = list(out), list(pieces)
        for seg, n in segments[start:]:
            off = 0
            while off < n:
                take = min(n - off, self.block_chars - fill)
                pieces_l.append(f"{seg}@{off}+{take}")
                off += take
                fill += take
                if fill == self.block_chars:
                    digest = chain_hash(prev, "|".join(pieces_l).encode())
                    out_l.append(digest)
                    prev = digest.encode()
                    pieces_l, fill = [], 0
            key = key + (f"{seg}#{n}",)
            self._memo[key] = (prev, tuple(pieces_l), fill, tuple(out_l))
        hashes = list(out_l)
        tokens = [self.block_chars // CHARS_PER_TOKEN] * len(hashes)
        if pieces_l:
            hashes.append(chain_hash(prev, "|".join(pieces_l).encode()))
            tokens.append(-(-fill // CHARS_PER_TOKEN))
        return hashes, tokens

    def forget_workflows(self) -> None:
        """Drop memo entries past the shared (preamble, role) prefix: a finished workflow's prompts never recur."""
        self._memo = {k: v for k, v in self._memo.items() if len(k) <= 2}
