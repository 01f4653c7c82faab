"""The fact-checking app's retrieval tool: keyword search over passages keyed by real titles.

The index holds one passage per real HoVer supporting-fact title of the task claims, plus the
titles of other claims as distractors. The Wikipedia text of HoVer is not available offline, so
each passage's text is synthesised from its title (see :func:`synthesise_passage`); retrieval
itself is real keyword search (BM25 over title + text), so which passages a query finds, and
hence how many retrieval rounds a claim needs, comes out of the search, not out of a script.
"""

from __future__ import annotations

import hashlib
import math
import random
import re
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Sequence

from examples.hover_langchain.data import HoverClaim
from examples.hover_langchain.sizes import PASSAGE_SECTIONS

__all__ = ["Passage", "PassageIndex", "synthesise_passage", "build_index"]

_TOKEN_RE = re.compile(r"[a-z0-9]+")
_STOP = frozenset("a an the of in on at to for and or is was be by with from as that this it its who which".split())
_TOPICS = (
    "early life", "career", "reception", "background", "history", "production", "legacy",
    "personal life", "release", "awards", "geography", "composition", "founding", "membership",
)


@dataclass(frozen=True, slots=True)
class Passage:
    """One retrievable passage: its article title and (synthesised) text."""

    title: str
    text: str


def tokens(text: str) -> list[str]:
    """Lower-cased alphanumeric terms of ``text`` without stop words."""
    return [t for t in _TOKEN_RE.findall(text.lower()) if t not in _STOP]


def synthesise_passage(title: str) -> Passage:
    """A deterministic stand-in passage for ``title`` (the real article text is not available).

    The text names the title in every sentence and covers ``sizes.PASSAGE_SECTIONS`` seeded section
    topics (sources in ``sizes``), with the title's vocabulary.
    """
    rng = random.Random(int.from_bytes(hashlib.sha1(title.encode("utf-8")).digest()[:8], "little"))
    topics = rng.sample(_TOPICS, k=rng.randint(*PASSAGE_SECTIONS))
    sentences = [f"{title} is the subject of an encyclopedia article."]
    for topic in topics:
        year = rng.randint(1850, 2018)
        sentences.append(
            f"The {topic} of {title} is documented from {year}, with sources dated {year + rng.randint(1, 30)}."
        )
    return Passage(title, " ".join(sentences))


class PassageIndex:
    """BM25 keyword index over passages (k1 = 1.2, b = 0.75; Robertson and Zaragoza 2009, Eq. 3.15)."""

    def __init__(self, passages: Iterable[Passage], k1: float = 1.2, b: float = 0.75):
        self.passages: list[Passage] = list(passages)
        if not self.passages:
            raise ValueError("a passage index needs at least one passage")
        self.k1, self.b = k1, b
        # Title terms count twice: an article's title is its strongest key.
        self._tf = [Counter(tokens(p.title) * 2 + tokens(p.text)) for p in self.passages]
        self._len = [sum(tf.values()) for tf in self._tf]
        self._avg = sum(self._len) / len(self._len)
        df: Counter[str] = Counter()
        for tf in self._tf:
            df.update(tf.keys())
        n = len(self.passages)
        self._idf = {t: math.log(1 + (n - d + 0.5) / (d + 0.5)) for t, d in df.items()}
        self._postings: dict[str, list[int]] = {}
        for i, tf in enumerate(self._tf):
            for t in tf:
                self._postings.setdefault(t, []).append(i)

    def __len__(self) -> int:
        return len(self.passages)

    def search(self, query: str, k: int = 2, exclude: Sequence[str] = ()) -> list[Passage]:
        """The ``k`` best passages for ``query`` by BM25, skipping titles in ``exclude``.

        Returns fewer than ``k`` (possibly none) when fewer passages share a term with the query.
        Ties are broken by index order, so results are deterministic.
        """
        skip = set(exclude)
        scores: dict[int, float] = {}
        for term in set(tokens(query)):
            idf = self._idf.get(term)
            if idf is None:
                continue
            for i in self._postings[term]:
                tf = self._tf[i][term]
                norm = tf + self.k1 * (1 - self.b + self.b * self._len[i] / self._avg)
                scores[i] = scores.get(i, 0.0) + idf * tf * (self.k1 + 1) / norm
        ranked = sorted(scores, key=lambda i: (-scores[i], i))
        return [self.passages[i] for i in ranked if self.passages[i].title not in skip][:k]


def build_index(claims: Sequence[HoverClaim], distractor_claims: Sequence[HoverClaim] = ()) -> PassageIndex:
    """Index the supporting-fact titles of ``claims`` plus those of ``distractor_claims``.

    Raises:
        ValueError: no titles at all.
    """
    seen: dict[str, None] = {}
    for claim in list(claims) + list(distractor_claims):
        for title in claim.titles:
            seen.setdefault(title, None)
    return PassageIndex(synthesise_passage(t) for t in seen)
