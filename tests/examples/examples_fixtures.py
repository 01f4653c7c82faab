"""Small data-set fixtures in the real files' formats (tests never use the shared data sets)."""

from __future__ import annotations

import json
import random
from pathlib import Path

# Real-looking entity names; titles of claim i are "<name> (<topic> i.k)" so every title is unique.
_NAMES = ["Aurora Valley", "Bramwell Court", "Castor Hill", "Delmont Bridge", "Everly Lake", "Fairholm Street"]


def hover_rows(n_per_hops: int = 20, seed: int = 0) -> list[dict]:
    """``n_per_hops`` claims for each hop count 2, 3 and 4, labels alternating; titles = hops."""
    rng = random.Random(seed)
    rows = []
    for hops in (2, 3, 4):
        for i in range(n_per_hops):
            titles = [f"{rng.choice(_NAMES)} ({hops}.{i}.{k})" for k in range(hops)]
            rows.append({
                "uid": f"h{hops}-{i}",
                "claim": f"Claim {hops}.{i}: " + " links ".join(titles) + ".",
                "supporting_facts": [[t, 0] for t in titles],
                "label": "SUPPORTED" if i % 2 == 0 else "NOT_SUPPORTED",
                "num_hops": hops,
                "hpqa_id": f"x{hops}{i}",
            })
    return rows


def swe_rows(extra: int = 0) -> list[dict]:
    """A one-line fix and a 60-line fix over three files, then ``extra`` instances of mixed sizes."""
    def patch(files: int, lines: int) -> str:
        out = []
        for f in range(files):
            out.append(f"diff --git a/pkg/m{f}.py b/pkg/m{f}.py\n--- a/pkg/m{f}.py\n+++ b/pkg/m{f}.py\n@@ -1,3 +1,3 @@\n def f():\n")
            out.extend(f"-    old_{f}_{k}()\n+    new_{f}_{k}()\n" for k in range(lines // (2 * files)))
        return "".join(out)

    rows = [
        {"repo": "acme/pkg", "instance_id": "acme__pkg-1", "problem_statement": "Calling f raises TypeError when x is None.",
         "patch": patch(1, 2)[:-len("+    new_0_0()\n")], "FAIL_TO_PASS": json.dumps(["test_f_none (tests.test_m.T)"]),
         "test_patch": "", "hints_text": ""},
        {"repo": "acme/pkg", "instance_id": "acme__pkg-2", "problem_statement": "The exporter drops rows with unicode names.",
         "patch": patch(3, 60), "FAIL_TO_PASS": json.dumps(["test_export_unicode", "test_export_rows"]),
         "test_patch": "", "hints_text": ""},
    ]
    for i in range(extra):
        files, lines = 1 + i % 3, 2 * (1 + i % 12) * (1 + i % 3)
        rows.append({"repo": "acme/pkg", "instance_id": f"acme__pkg-{i + 3}",
                     "problem_statement": f"Issue {i}: the parser mishandles case {i} with nested input.",
                     "patch": patch(files, lines), "FAIL_TO_PASS": json.dumps([f"test_case_{i}"]),
                     "test_patch": "", "hints_text": ""})
    return rows


def finance_rows(n: int = 3) -> list[dict]:
    """``n`` questions cycling through the three types, each with one evidence page."""
    rows = []
    kinds = [("metrics-generated", "Numerical reasoning"), ("domain-relevant", None),
             ("novel-generated", "Information extraction")]
    for i in range(n):
        qtype, reasoning = kinds[i % 3]
        rows.append({
            "financebench_id": f"fb{i}", "company": "Acme", "doc_name": "ACME_2020_10K", "question_type": qtype,
            "question_reasoning": reasoning, "domain_question_num": None,
            "question": f"Question {i}: what was Acme's FY2020 operating margin?", "answer": "12.5%",
            "justification": "", "dataset_subset_label": "OPEN_SOURCE",
            "evidence": [{"evidence_text": "Operating income 125 on revenue 1,000.", "doc_name": "ACME_2020_10K",
                          "evidence_page_num": 41, "evidence_text_full_page": "Consolidated statement of income. " * 40}],
        })
    return rows


def write_data_dir(root: Path, *, quick_sizes: bool = False) -> Path:
    """Write all three fixture data sets under ``root`` in the shared-data layout; returns ``root``.

    ``quick_sizes`` writes enough tasks for the runners' ``--quick`` sizes (90 claims, 50
    instances, 54 questions); otherwise 60 claims, 2 instances, 3 questions.
    """
    (root / "hover").mkdir(parents=True, exist_ok=True)
    (root / "hover" / "hover_dev_release_v1.1.json").write_text(
        json.dumps(hover_rows(30 if quick_sizes else 20)), encoding="utf-8")
    (root / "swebench").mkdir(parents=True, exist_ok=True)
    (root / "swebench" / "swe-bench-lite.json").write_text(json.dumps(swe_rows(48 if quick_sizes else 0)), encoding="utf-8")
    (root / "financebench").mkdir(parents=True, exist_ok=True)
    (root / "financebench" / "financebench_open_source.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in finance_rows(54 if quick_sizes else 3)), encoding="utf-8")
    return root
