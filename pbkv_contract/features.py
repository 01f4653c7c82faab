"""Request features (trace format v1, ``features``): the semantic signal of a request.

A fixed-size, deterministic, L2-normalised feature-hashing vector of the newest non-system
message: the stand-in for the prefill hidden state h_txt of the PBKV paper (Appendix B) when no
model runs. The SDK records it in traces and the server computes it for live requests, so the
predictor sees the same input in training and in serving.
"""

from __future__ import annotations

import hashlib
import math
import re
from typing import Any, Mapping, Sequence

from .blocks import message_text

__all__ = ["FEATURE_DIM", "request_features"]

#: Dimension of the request feature vector (feature hashing).
FEATURE_DIM = 64

_WORD_RE = re.compile(r"[a-z0-9]+")


def request_features(messages: Sequence[Mapping[str, Any]] | str, dim: int = FEATURE_DIM) -> list[float]:
    """Semantic signal of a request: feature hashing of its newest non-system message.

    Unigrams and bigrams of the lower-cased alphanumeric words are hashed (sha1) to an index in
    ``[0, dim)`` and a sign; counts are log-scaled (1 + log c) and the vector L2-normalised. It is
    the stand-in for the prefill hidden state h_txt of PBKV Appendix B when no model runs.

    Returns:
        ``dim`` floats with unit L2 norm, or all zeros when the message has no words.
    """
    if isinstance(messages, str):
        text = messages
    else:
        text = ""
        for message in reversed(messages):
            if message.get("role") != "system":
                text = message_text(message)
                break
    words = _WORD_RE.findall(text.lower())
    grams = words + [a + " " + b for a, b in zip(words, words[1:])]
    counts: dict[str, int] = {}
    for g in grams:
        counts[g] = counts.get(g, 0) + 1
    vec = [0.0] * dim
    for gram, c in counts.items():
        digest = hashlib.sha1(gram.encode("utf-8", "surrogatepass")).digest()
        index = int.from_bytes(digest[:4], "little") % dim
        sign = 1.0 if digest[4] & 1 else -1.0
        vec[index] += sign * (1.0 + math.log(c))
    norm = math.sqrt(sum(v * v for v in vec))
    return [v / norm for v in vec] if norm > 0 else vec

