"""Small text helpers for the examples' scenarios: find task fields in a prompt, write filler prose.

The scenarios stand in for a model: their replies must have realistic lengths and use the task's
own vocabulary (so request features vary with the task), but their decisions come from the
scenario logic, not from this module.
"""

from __future__ import annotations

import random
import re
from typing import Any, Mapping, Sequence

from pbkv_contract.blocks import message_text

__all__ = ["find_field", "non_system_text", "prose", "words_of", "count_in_prompt", "lognormal_tokens"]

_WORD_RE = re.compile(r"[A-Za-z][A-Za-z'-]{2,}")
_GENERIC = (
    "the evidence indicates that this point is consistent with the record and the stated context "
    "which we check against each source before drawing a conclusion about the relevant details"
).split()


def find_field(messages: Sequence[Mapping[str, Any]], label: str) -> str | None:
    """Value of the last line ``"<label>: value"`` in the non-system messages (newest first), or None."""
    pattern = re.compile(rf"^{re.escape(label)}:[ \t]*(.+?)[ \t]*$", re.MULTILINE)
    for message in reversed(messages):
        if message.get("role") == "system":
            continue
        found = pattern.findall(message_text(message))
        if found:
            return found[-1]
    return None


def non_system_text(messages: Sequence[Mapping[str, Any]]) -> str:
    """All non-system message text joined by newlines (what a model reads besides its instructions)."""
    return "\n".join(message_text(m) for m in messages if m.get("role") != "system")


def count_in_prompt(messages: Sequence[Mapping[str, Any]], needle: str) -> int:
    """Occurrences of ``needle`` in the non-system messages."""
    return non_system_text(messages).count(needle)


def words_of(text: str) -> list[str]:
    """Content words (3+ letters) of ``text`` in order, for reuse as reply vocabulary."""
    return _WORD_RE.findall(text)


def prose(rng: random.Random, vocab: Sequence[str], n_tokens: int) -> str:
    """About ``n_tokens`` tokens of sentence-shaped text mixing ``vocab`` with generic words.

    Roughly one token per word (common English words are one BPE token each); sentences of 8-18
    words end with a period. ``n_tokens`` <= 0 gives ``""``.
    """
    if n_tokens <= 0:
        return ""
    pool = list(vocab) or list(_GENERIC)
    words: list[str] = []
    sentence_left = rng.randint(8, 18)
    for i in range(n_tokens):
        word = rng.choice(pool) if rng.random() < 0.5 else rng.choice(_GENERIC)
        if sentence_left == 0:
            words[-1] += "."
            sentence_left = rng.randint(8, 18)
            word = word.capitalize()
        words.append(word if i else word.capitalize())
        sentence_left -= 1
    return " ".join(words) + "."


def lognormal_tokens(rng: random.Random, median: float, sigma: float = 0.35, lo: int = 8, hi: int = 2048) -> int:
    """A reply length in tokens, log-normal around ``median`` and clipped to ``[lo, hi]``."""
    import math

    return max(lo, min(hi, int(round(median * math.exp(rng.gauss(0.0, sigma))))))
