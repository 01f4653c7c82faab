"""FinanceBench open-source sample (github.com/patronus-ai/financebench, CC BY-NC 4.0).

150 questions about public companies' filings, each with a question type (metrics-generated,
domain-relevant, novel-generated), the answer, and evidence: the quoted passage plus the full
text of the filing page it comes from (median about 2,300 characters), which the crew reads.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from collections import Counter

from examples.common.data import DataError, TaskList, download, read_jsonl, require_fields, resolve_data_file, skip_row

__all__ = ["EvidencePage", "FinanceQuestion", "load_financebench", "QUESTIONS_FILE", "QUESTIONS_URL", "QUESTION_TYPES"]

QUESTIONS_FILE = "financebench/financebench_open_source.jsonl"
QUESTIONS_URL = "https://raw.githubusercontent.com/patronus-ai/financebench/HEAD/data/financebench_open_source.jsonl"
QUESTION_TYPES = ("metrics-generated", "domain-relevant", "novel-generated")


@dataclass(frozen=True, slots=True)
class EvidencePage:
    """One evidence page: filing name, 0-based page number, the quoted text and the full page text."""

    doc_name: str
    page: int
    quote: str
    page_text: str


@dataclass(frozen=True, slots=True)
class FinanceQuestion:
    """One FinanceBench question.

    Attributes:
        qid: ``financebench_id``.
        company: company name.
        doc_name: the filing, e.g. ``"3M_2018_10K"``.
        question_type: one of :data:`QUESTION_TYPES`.
        reasoning: ``question_reasoning`` (e.g. "Numerical reasoning"), ``""`` when absent.
        question: question text.
        answer: reference answer.
        evidence: evidence pages (1-3).
    """

    qid: str
    company: str
    doc_name: str
    question_type: str
    reasoning: str
    question: str
    answer: str
    evidence: tuple[EvidencePage, ...]


def load_financebench(data_dir: str | os.PathLike[str] | None = None) -> TaskList:
    """Load the FinanceBench questions in file order.

    Rows with an empty question and rows repeating an earlier financebench_id are skipped with a
    warning naming file and row; the returned :class:`TaskList` counts them.

    Raises:
        DataError: the file is missing and cannot be downloaded, or a line is malformed (bad JSON,
            missing fields, unknown question type, no evidence page).
    """
    path = resolve_data_file(QUESTIONS_FILE, lambda dest: download(QUESTIONS_URL, dest), data_dir=data_dir)
    return _load(path, path.stat().st_mtime_ns)


@lru_cache(maxsize=4)
def _load(path: Path, _mtime: int) -> TaskList:
    rows = read_jsonl(path)
    if not rows:
        raise DataError(f"{path}: no questions")
    out, seen, skipped = [], set(), Counter()
    for i, row in enumerate(rows):
        require_fields(
            path, i, row,
            {"financebench_id": str, "company": str, "doc_name": str, "question_type": str,
             "question": str, "answer": str, "evidence": list},
        )
        if not row["question"].strip():
            skip_row(path, i, "empty question", f"{row['financebench_id']!r} has an empty question", skipped)
            continue
        if row["financebench_id"] in seen:
            skip_row(path, i, "duplicate financebench_id",
                     f"{row['financebench_id']!r} repeats an earlier row (the first is kept)", skipped)
            continue
        if row["question_type"] not in QUESTION_TYPES:
            raise DataError(f"{path}: row {i} has unknown question_type {row['question_type']!r}")
        pages = []
        for j, ev in enumerate(row["evidence"]):
            require_fields(path, i, ev, {"evidence_text": str, "evidence_text_full_page": str})
            page = ev.get("evidence_page_num") or 0
            if not isinstance(page, int) or isinstance(page, bool):
                raise DataError(f"{path}: row {i} evidence[{j}] has evidence_page_num {page!r} (expected an integer)")
            pages.append(EvidencePage(str(ev.get("doc_name") or row["doc_name"]), page,
                                      ev["evidence_text"], ev["evidence_text_full_page"]))
        if not pages:
            raise DataError(f"{path}: row {i} has no evidence page")
        seen.add(row["financebench_id"])
        out.append(FinanceQuestion(row["financebench_id"], row["company"], row["doc_name"], row["question_type"],
                                   row.get("question_reasoning") or "", row["question"], row["answer"], tuple(pages)))
    return TaskList(out, path, len(rows), skipped)
