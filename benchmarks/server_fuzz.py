"""Schemathesis fuzzing of a pbkv-server against its own OpenAPI document: the long run.

Starts ``pbkv-server`` as a subprocess on a free loopback port and runs
:func:`pbkv_server.testing.fuzzing.fuzz` with ``--examples`` cases per operation and generation mode
(the test suite runs 40). Prints, per operation and mode: cases generated, answers per status,
and failed checks (5xx, undocumented status or content type, a body that breaks the documented
schema, schema-invalid input accepted, schema-valid input refused), then the totals. Exits 1
when any check failed.

Run: ``.venv/bin/python benchmarks/server_fuzz.py [--examples 1000] [--seed 0] [--policy pbkv]``
"""

from __future__ import annotations

import argparse
import sys
import time

import httpx

from pbkv_server.engine.policies import DEFAULT_POLICY
from pbkv_server.testing.fuzzing import fuzz

from _server_proc import start_server, stop_server


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=1000, help="cases per operation and mode")
    parser.add_argument("--seed", type=int, default=0, help="Hypothesis seed (-1 = random)")
    parser.add_argument("--policy", default=DEFAULT_POLICY)
    parser.add_argument("--show", type=int, default=3, help="failures printed per operation and mode")
    args = parser.parse_args()

    proc, url = start_server("--policy", args.policy, "--log-level", "error", "--idle-retire-s", "0")
    try:
        t0 = time.monotonic()
        runs = fuzz(url, args.examples, seed=None if args.seed < 0 else args.seed)
        wall = time.monotonic() - t0
        alive = httpx.get(url + "/health").status_code == 200
    finally:
        stop_server(proc)

    print(f"{'operation':45} {'mode':9} {'cases':>6}  {'statuses':34} {'failures':>8}")
    for run in runs:
        statuses = ", ".join(f"{s}: {n}" for s, n in sorted(run.statuses.items())) or "-"
        print(f"{run.operation:45} {run.mode:9} {run.cases:6d}  {statuses:34} {len(run.failures):8d}")
        for failure in run.failures[: args.show]:
            print("    " + failure[:600])
    cases = sum(r.cases for r in runs)
    failures = sum(len(r.failures) for r in runs)
    server_errors = sum(r.server_errors for r in runs)
    print(f"total: {cases} cases in {wall:.0f} s, {server_errors} server errors (5xx), {failures} failed checks; "
          f"server {'still answers' if alive else 'DOWN'} afterwards")
    return 1 if failures or server_errors or not alive else 0


if __name__ == "__main__":
    sys.exit(main())
