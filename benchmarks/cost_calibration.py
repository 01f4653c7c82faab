"""Print the cost model's calibration table: the simulator next to published GPU measurements.

    python benchmarks/cost_calibration.py [--hover-trace runs/hover_langchain/test.jsonl] [--json out.json]

Rows (``pbkv_server/sim/calibration.py`` gives the settings and sources):

* KVFlow Section 4.1, 4096/32/32 on Qwen2.5-32B / one H100: the speedup of the workflow-aware
  policy over LRU with a HiCache host tier and over GPU-only LRU, replayed on profile
  ``h100-qwen2.5-32b``;
* PBKV Table 4: the mean decode step at concurrency 72 on HoVer with Qwen3-32B, for every
  profile serving Qwen3-32B, on the recorded HoVer test trace (skipped when there is none).

A row whose disagreement exceeds 15% is marked ``OFF``; the script only reports (exit status 0).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pbkv_contract.trace import read_trace
from pbkv_server.sim.calibration import TOLERANCE, compare
from pbkv_server.hardware.profiles import PROFILES, get_profile

KVFLOW_PROFILE = "h100-qwen2.5-32b"
DEFAULT_HOVER_TRACE = Path("runs/hover_langchain/test.jsonl")


def main(argv: list[str] | None = None) -> int:
    """Replay the published settings and print the table; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hover-trace", type=Path, default=None,
                        help="recorded HoVer test trace for the decode-step row (python -m examples.hover_langchain; "
                             f"default {DEFAULT_HOVER_TRACE}, whose row is skipped when it is missing)")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows as JSON")
    args = parser.parse_args(argv)
    if args.hover_trace is not None and not args.hover_trace.is_file():
        parser.error(f"--hover-trace {args.hover_trace}: no such file")  # a path the user gave must exist
    trace = args.hover_trace or DEFAULT_HOVER_TRACE
    hover = read_trace(trace) if trace.is_file() else None
    if hover is None:
        print(f"(no HoVer trace at {trace}: the decode-step row is skipped)", file=sys.stderr)
    qwen3_32b = [p for p in PROFILES.values() if "Qwen3-32B" in p.description]
    rows = compare(get_profile(KVFLOW_PROFILE), qwen3_32b, hover)
    print(f"| figure | source | setting | profile | ours | published | ours / published - 1 | within {TOLERANCE:.0%} |")
    print("|---|---|---|---|---:|---:|---:|---|")
    for r in rows:
        p = r.published
        print(f"| {p.name} | {p.source} | {p.conditions} | `{r.setting}` | {r.ours:.3g} {p.unit} | {p.value:g} {p.unit} "
              f"| {100 * r.error:+.1f}% | {'yes' if r.agrees else 'OFF'} |")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps([{"figure": r.published.name, "source": r.published.source,
                                          "profile": r.setting, "ours": r.ours, "published": r.published.value,
                                          "unit": r.published.unit, "error": r.error, "agrees": r.agrees}
                                         for r in rows], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
