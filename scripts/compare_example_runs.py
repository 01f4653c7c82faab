"""Check that example runs with the same seed give the same figures (exit 1 on any difference).

With nominal trace timing (the examples' default) a run's traces and figures depend on its seed
and options only, not on the machine or its load. Two ways to check it:

    python scripts/compare_example_runs.py compare A.json B.json
        compare two ``--json`` summaries (and their trace files, where both are still on disk);

    python scripts/compare_example_runs.py run [hover_langchain swe_autogen finance_crewai] \\
        [--out-dir /tmp/example-reruns] [-- EXTRA RUNNER FLAGS]
        run each example ``--quick`` twice (its own output folder each time) and compare.

Compared (:mod:`examples.common.run_compare`): every policy's hit rates, evictions, evicted and
prefetched tokens, simulated latencies, TTFTs and their breakdowns, the hit-rate timeline, the
comparisons, capacities, working set and app outcomes, and the SHA-256 of the traces. Wall-clock
timings and decision latencies are measurements of the machine and are left out. Exit status: 0
same, 1 different, 2 usage error or a failed run.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from examples.common.run_compare import differences  # noqa: E402

EXAMPLES = ("hover_langchain", "swe_autogen", "finance_crewai")


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1:]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    cmp_ = sub.add_parser("compare", help="compare two --json summaries")
    cmp_.add_argument("first", type=Path)
    cmp_.add_argument("second", type=Path)
    run = sub.add_parser("run", help="run examples --quick twice each and compare")
    run.add_argument("examples", nargs="*", default=list(EXAMPLES), help=f"examples (default: {' '.join(EXAMPLES)})")
    run.add_argument("--out-dir", type=Path, default=Path("runs/reruns"), help="where the runs go")
    args = parser.parse_args(argv)
    if args.cmd == "compare":
        try:
            a, b = (json.loads(p.read_text(encoding="utf-8")) for p in (args.first, args.second))
        except (OSError, ValueError) as exc:
            print(f"error: cannot read a summary: {exc}", file=sys.stderr)
            return 2
        return _report(f"{args.first} vs {args.second}", differences(a, b))
    unknown = [e for e in args.examples if e not in EXAMPLES]
    if unknown:
        print(f"error: unknown example(s) {', '.join(unknown)}; choose from {', '.join(EXAMPLES)}", file=sys.stderr)
        return 2
    status = 0
    for example in args.examples:
        summaries = []
        for trial in (1, 2):
            out = args.out_dir / f"{example}-{trial}"
            summary = out / "summary.json"
            cmd = [sys.executable, "-m", f"examples.{example}", "--quick", "--out-dir", str(out), "--json",
                   str(summary), *extra]
            proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
            if proc.returncode != 0:
                print(f"error: {' '.join(cmd[1:])} failed ({proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}",
                      file=sys.stderr)
                return 2
            summaries.append(json.loads(summary.read_text(encoding="utf-8")))
        status = max(status, _report(example, differences(*summaries)))
    return status


def _report(what: str, found: list[str]) -> int:
    if not found:
        print(f"{what}: same figures and traces")
        return 0
    print(f"{what}: {len(found)} difference(s)")
    for line in found[:50]:
        print(f"  {line}")
    if len(found) > 50:
        print(f"  ... and {len(found) - 50} more")
    return 1


if __name__ == "__main__":
    sys.exit(main())
