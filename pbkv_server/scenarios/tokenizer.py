"""Offline token counting for the sim engine: how many tokens a prompt or reply costs.

The sim engine never runs a model, so it needs token *counts*, not token ids: prompt length for
prefill cost and cache accounting, and per-block counts so that the radix cache keyed on
``pbkv_contract.blocks.prefix_hashes`` blocks charges each block what it would cost on a real server.

Approximation (documented, deterministic, no downloads): the text is split with the
``tokenizers`` package's regex pre-tokenizer using a cl100k-style split pattern (letters with
one leading non-letter, digit runs of at most 3, punctuation runs, newline runs, spaces). Each
piece then costs ``ceil(utf8_bytes / width)`` tokens, where ``width`` depends on the piece class
(letters: :data:`LETTER_BYTES_PER_TOKEN`, other pieces: :data:`OTHER_BYTES_PER_TOKEN`): a BPE
vocabulary of ~100k entries keeps most English words (with their leading space) whole and splits
long or rare words and symbol runs into a few pieces. The figure comparing these counts with a
byte-level BPE tokenizer is printed by ``benchmarks/tokenizer_accuracy.py`` (see README,
"Running pbkv-server").

Chat prompts are tokenized message by message (chat templates separate messages with special
tokens), with a bounded cache of recent messages so that shared system prompts and history are
not re-tokenized. A token belongs to the block that holds its first character, so per-block
counts sum exactly to the prompt's token count, and two prompts that share their leading
messages get the same counts for the blocks inside them.
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections import OrderedDict
from functools import lru_cache
from typing import Any, Mapping, Sequence

import numpy as np

from pbkv_contract.blocks import DEFAULT_BLOCK_CHARS, canonical_prompt, message_segment

__all__ = [
    "LETTER_BYTES_PER_TOKEN",
    "OTHER_BYTES_PER_TOKEN",
    "count_tokens",
    "min_tokens",
    "token_starts",
    "prompt_token_starts",
    "prompt_tokens",
    "block_tokens",
    "truncate_to_tokens",
    "TokenBudgetExceeded",
]

#: UTF-8 bytes one BPE token covers in a letter piece (leading space/punctuation included).
LETTER_BYTES_PER_TOKEN = 7
#: UTF-8 bytes one BPE token covers in digit, punctuation and whitespace pieces.
OTHER_BYTES_PER_TOKEN = 4

# cl100k-style split: contractions, letters with one optional leading non-letter/non-digit,
# digit groups of <= 3, punctuation runs (optional leading space), newline runs, other spaces.
_SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


class TokenBudgetExceeded(ValueError):
    """A prompt has more tokens than the caller's budget; tokenizing stopped early.

    Attributes:
        budget: the budget in tokens.
        at_least: a lower bound of the prompt's tokens (> ``budget``): the exact count of the
            part tokenized so far, or the bound of :func:`min_tokens` for the rest.
    """

    def __init__(self, budget: int, at_least: int):
        super().__init__(f"prompt has at least {at_least} tokens, over the budget of {budget}")
        self.budget = budget
        self.at_least = at_least


def min_tokens(text: str) -> int:
    """A lower bound of :func:`count_tokens` that costs O(1): ``ceil(len(text) / 7)``.

    Every piece of ``b`` UTF-8 bytes costs ``ceil(b / w)`` tokens with ``w <= 7``
    (:data:`LETTER_BYTES_PER_TOKEN`), the pieces cover the text, and a character is at least one
    byte, so the count is at least ``ceil(chars / 7)``. A prompt whose bound is over a budget is
    refused without being tokenized: the work per request stays proportional to the budget.
    """
    return -(-len(text) // LETTER_BYTES_PER_TOKEN)


def count_tokens(text: str) -> int:
    """Approximate BPE token count of ``text`` (see module docstring); 0 for the empty string."""
    return len(token_starts(text))


def token_starts(text: str) -> list[int]:
    """Character offset where each approximate token of ``text`` starts, ascending.

    A piece of ``n`` tokens and ``m`` characters starting at offset ``s`` has token starts
    ``s + floor(j * m / n)`` for ``j = 0..n-1`` (an even spread: BPE boundaries are unknown).

    Returns:
        one offset per token; ``len(result)`` is the token count.
    """
    starts: list[int] = []
    append = starts.append
    for piece, (begin, end) in _splitter().pre_tokenize_str(text):
        # Letter pieces end with a letter (the split puts at most one non-letter in front);
        # digit, punctuation and whitespace pieces contain no letter at all.
        width = LETTER_BYTES_PER_TOKEN if piece[-1].isalpha() else OTHER_BYTES_PER_TOKEN
        nbytes = len(piece) if piece.isascii() else len(piece.encode("utf-8"))
        if nbytes <= width:  # the common case: one token
            append(begin)
            continue
        n = -(-nbytes // width)
        span = end - begin
        starts.extend(begin + (j * span) // n for j in range(n))
    return starts


def prompt_token_starts(prompt: Sequence[Mapping[str, Any]] | str) -> list[int]:
    """Token start offsets in the canonical prompt (:func:`pbkv_contract.blocks.canonical_prompt`).

    A chat prompt is tokenized message by message (each ``<|role|>content<|end|>`` segment on
    its own, as chat templates put special tokens between messages), which also lets repeated
    messages (system prompts, tool descriptions, earlier turns) reuse a cached result: only new
    messages cost tokenization. A plain string is tokenized whole.

    Returns:
        ascending offsets; ``len(result)`` is the prompt's token count.
    """
    return _prompt_starts(prompt).tolist()


def prompt_tokens(prompt: Sequence[Mapping[str, Any]] | str) -> int:
    """Token count of a chat or completion prompt (the sum of :func:`block_tokens`)."""
    return int(_prompt_starts(prompt).size)


def block_tokens(
    prompt: Sequence[Mapping[str, Any]] | str, block_chars: int = DEFAULT_BLOCK_CHARS, budget: int | None = None
) -> list[int]:
    """Tokens of each ``block_chars``-character block of the canonical prompt.

    The blocks are those of :func:`pbkv_contract.blocks.prefix_hashes` (same canonical text, same
    cut), so ``zip(prefix_hashes(p), block_tokens(p))`` pairs each cache key with its cost.

    Args:
        prompt: chat messages or a plain completion prompt.
        block_chars: characters per block (>= 1).
        budget: most tokens the prompt may have (``None`` = no limit). The check runs before
            and during tokenization (message by message, with the O(1) bound of
            :func:`min_tokens`), so a huge prompt costs at most about ``7 * budget`` characters
            of tokenizing before it is refused.

    Returns:
        ``ceil(len(text) / block_chars)`` non-negative ints summing to :func:`prompt_tokens`.

    Raises:
        ValueError: ``block_chars`` < 1.
        TokenBudgetExceeded: the prompt has more than ``budget`` tokens.
    """
    if block_chars < 1:
        raise ValueError("block_chars must be >= 1")
    starts = _prompt_starts(prompt, budget)
    n_blocks = math.ceil(len(canonical_prompt(prompt)) / block_chars)
    # Tokens of block b = starts in [b * block_chars, (b + 1) * block_chars): differences of the
    # sorted positions of the block edges.
    edges = np.searchsorted(starts, np.arange(n_blocks + 1, dtype=np.int64) * block_chars, side="left")
    edges[-1] = starts.size
    return np.diff(edges).tolist()


def truncate_to_tokens(text: str, max_tokens: int) -> tuple[str, int]:
    """Cut ``text`` to at most ``max_tokens`` approximate tokens.

    Returns:
        ``(text, tokens)``: the (possibly shortened) text and its token count.

    Raises:
        ValueError: ``max_tokens`` < 0.
    """
    if max_tokens < 0:
        raise ValueError("max_tokens must be >= 0")
    starts = token_starts(text)
    if len(starts) <= max_tokens:
        return text, len(starts)
    # Cutting at a token start can only shrink the last piece, so the recount is <= max_tokens.
    cut = text[: starts[max_tokens]]
    return cut, count_tokens(cut)


def _prompt_starts(prompt: Sequence[Mapping[str, Any]] | str, budget: int | None = None) -> np.ndarray:
    if isinstance(prompt, str):
        _check_budget(0, min_tokens(prompt), budget)
        starts = np.asarray(token_starts(prompt), dtype=np.int64)
        _check_budget(0, starts.size, budget)
        return starts
    parts: list[np.ndarray] = []
    offset = 0
    counted = 0
    for message in prompt:
        segment = message_segment(message)  # the canonical text's own segment, escapes included
        # Refuse before tokenizing a segment that cannot fit: the cost stays bounded by the budget.
        _check_budget(counted, min_tokens(segment), budget)
        found = _SEGMENTS.starts(segment)
        counted += found.size
        _check_budget(counted, 0, budget)
        parts.append(found + offset)
        offset += len(segment)
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def _check_budget(counted: int, more: int, budget: int | None) -> None:
    if budget is not None and counted + more > budget:
        raise TokenBudgetExceeded(budget, counted + more)


class _SegmentCache:
    """LRU of message segments -> token starts (int32 arrays), keyed by a 16-byte digest.

    Keys are digests, not the text, and values are packed arrays, so 4,096 entries of long
    messages cost a few MiB, not the tens of MiB that strings and lists of ints would.
    """

    def __init__(self, size: int):
        self.size = size
        self._map: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()  # several servers (event-loop threads) may share the cache

    def starts(self, segment: str) -> np.ndarray:
        key = hashlib.blake2b(segment.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        with self._lock:
            found = self._map.get(key)
            if found is not None:
                self._map.move_to_end(key)
                return found
        # int32 offsets: request bodies are capped far below 2**31 characters.
        found = np.asarray(token_starts(segment), dtype=np.int32)
        with self._lock:
            self._map[key] = found
            if len(self._map) > self.size:
                self._map.popitem(last=False)
        return found


_SEGMENTS = _SegmentCache(4096)


@lru_cache(maxsize=1)
def _splitter() -> Any:
    # Imported lazily: the SDK side never needs the tokenizers package.
    from tokenizers import Regex, pre_tokenizers

    return pre_tokenizers.Split(Regex(_SPLIT_PATTERN), behavior="isolated")
