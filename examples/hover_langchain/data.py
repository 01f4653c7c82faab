"""HoVer v1.1 claims (github.com/hover-nlp/hover, data CC BY-SA 4.0).

Each dev claim has real supporting facts ``[title, sentence_id]``, a label (SUPPORTED /
NOT_SUPPORTED) and ``num_hops`` (2, 3 or 4). Only the labelled dev split is used: the test split
has no supporting facts, and the train split is not available offline. The Wikipedia text is not
available either, so the app synthesises passage text from the titles (see ``app.py``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from collections import Counter

from examples.common.data import DataError, TaskList, download, read_json, require_fields, resolve_data_file, skip_row

__all__ = ["HoverClaim", "load_hover", "DEV_FILE", "DEV_URL"]

DEV_FILE = "hover/hover_dev_release_v1.1.json"
#: Public home of the dev split (``HEAD`` resolves the repository's default branch).
DEV_URL = "https://raw.githubusercontent.com/hover-nlp/hover/HEAD/data/hover/hover_dev_release_v1.1.json"


@dataclass(frozen=True, slots=True)
class HoverClaim:
    """One labelled HoVer claim.

    Attributes:
        uid: the claim's id.
        claim: the claim text.
        titles: distinct Wikipedia titles of the supporting facts, in order of first mention.
        label: ``"SUPPORTED"`` or ``"NOT_SUPPORTED"``.
        num_hops: number of reasoning hops (2-4), the HoVer difficulty.
    """

    uid: str
    claim: str
    titles: tuple[str, ...]
    label: str
    num_hops: int


def load_hover(data_dir: str | os.PathLike[str] | None = None) -> TaskList:
    """Load the HoVer dev claims (4,000 in the release), in file order.

    Rows with an empty (blank) claim and rows repeating an earlier uid are skipped with a warning
    naming file and row; the returned :class:`TaskList` counts them.

    Args:
        data_dir: directory holding ``hover/hover_dev_release_v1.1.json``; default: see
            :func:`examples.common.data.resolve_data_file` (env, ../shared/data, download cache).

    Raises:
        DataError: the file is missing and cannot be downloaded, or is malformed (not a JSON list,
            a row without claim/supporting_facts/label/num_hops, a bad label or hop count, text that
            is not valid Unicode); the message names the file and the row.
    """
    path = resolve_data_file(DEV_FILE, lambda dest: download(DEV_URL, dest), data_dir=data_dir)
    return _load(path, path.stat().st_mtime_ns)


@lru_cache(maxsize=4)
def _load(path: Path, _mtime: int) -> TaskList:
    rows = read_json(path)
    if not isinstance(rows, list) or not rows:
        raise DataError(f"{path}: expected a non-empty JSON list of claims")
    claims, seen, skipped = [], set(), Counter()
    for i, row in enumerate(rows):
        require_fields(path, i, row, {"uid": str, "claim": str, "supporting_facts": list, "label": str, "num_hops": int})
        if not row["claim"].strip():
            skip_row(path, i, "empty claim", f"uid {row['uid']!r} has an empty claim", skipped)
            continue
        if row["uid"] in seen:
            skip_row(path, i, "duplicate uid", f"uid {row['uid']!r} repeats an earlier row (the first is kept)", skipped)
            continue
        if row["label"] not in ("SUPPORTED", "NOT_SUPPORTED"):
            raise DataError(f"{path}: row {i} has label {row['label']!r} (expected SUPPORTED or NOT_SUPPORTED)")
        if not 1 <= row["num_hops"] <= 8:
            raise DataError(f"{path}: row {i} has num_hops {row['num_hops']!r}")
        titles: list[str] = []
        for fact in row["supporting_facts"]:
            if not (isinstance(fact, list) and len(fact) == 2 and isinstance(fact[0], str)):
                raise DataError(f"{path}: row {i} has a supporting fact that is not [title, sentence_id]")
            if fact[0] not in titles:
                titles.append(fact[0])
        if not titles:
            raise DataError(f"{path}: row {i} has no supporting facts")
        seen.add(row["uid"])
        claims.append(HoverClaim(row["uid"], row["claim"], tuple(titles), row["label"], row["num_hops"]))
    return TaskList(claims, path, len(rows), skipped)
