"""Split a v1 trace into a training and an evaluation trace by workflow, seeded.

A predictor evaluated on the workflows it was trained on would overstate what it knows, so the
ChatDev table (docs/chatdev-regime.md) trains on one part of the imported logs and replays the
other. Every line of a workflow (its invocations and its ``workflow_end``) goes to the same part;
lines without a ``workflow_id`` (a ``meta`` line) go to both. The split: workflow ids in order of
first appearance, shuffled by ``random.Random(seed)``, the first ``round(train_fraction x n)`` to
training; each part keeps the trace's line order.

Usage::

    python scripts/split_trace.py chatdev.jsonl --train train.jsonl --eval eval.jsonl [--seed 0] [--train-fraction 0.5]

Bad input is one ``split_trace: ...`` line and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path


def split_lines(lines: list[str], seed: int,
                train_fraction: float) -> tuple[list[str], list[str], list[str], list[str]]:
    """``(train_lines, eval_lines, train_ids, eval_ids)`` of the JSONL ``lines`` (module docstring).

    Raises:
        ValueError: a line that is not a JSON object, fewer than two workflows, or a fraction that
            leaves a part empty.
    """
    ids: list[str] = []
    keyed: list[tuple[str | None, str]] = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError as exc:
            raise ValueError(f"line {i}: not JSON ({exc})") from None
        if not isinstance(rec, dict):
            raise ValueError(f"line {i}: not a JSON object")
        wid = rec.get("workflow_id")
        if wid is not None and wid not in ids:
            ids.append(wid)
        keyed.append((wid, line if line.endswith("\n") else line + "\n"))
    order = list(ids)
    random.Random(seed).shuffle(order)
    n_train = round(train_fraction * len(order))
    if not 0 < n_train < len(order):
        raise ValueError(f"{len(order)} workflows and train fraction {train_fraction:g} leave a part empty")
    train_ids = set(order[:n_train])
    train = [line for wid, line in keyed if wid is None or wid in train_ids]
    held = [line for wid, line in keyed if wid is None or wid not in train_ids]
    return train, held, [w for w in ids if w in train_ids], [w for w in ids if w not in train_ids]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--train", type=Path, required=True, help="training trace to write")
    ap.add_argument("--eval", type=Path, required=True, help="evaluation trace to write")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--train-fraction", type=float, default=0.5)
    args = ap.parse_args(argv)
    try:
        lines = args.trace.read_text(encoding="utf-8").splitlines(keepends=True)
        train, held, train_ids, eval_ids = split_lines(lines, args.seed, args.train_fraction)
        args.train.write_text("".join(train), encoding="utf-8")
        args.eval.write_text("".join(held), encoding="utf-8")
    except (OSError, ValueError) as exc:
        print(f"split_trace: {exc}", file=sys.stderr)
        return 2
    print(f"split_trace: {len(train_ids)} training workflows -> {args.train}, "
          f"{len(eval_ids)} evaluation workflows -> {args.eval} (seed {args.seed})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
