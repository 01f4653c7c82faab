"""Replay fingerprint: the figures a refactor must not change, recorded and compared.

A refactor of the engine core, the simulator or the policies must leave every replay figure as it
was. This script records those figures through the public CLI (``pbkv-bench synth`` and
``pbkv-bench replay --json``), so the same command works before and after any internal change:

    python scripts/replay_fingerprint.py record before.json [--example runs/hover_langchain.json ...]
    ... refactor ...
    python scripts/replay_fingerprint.py record after.json  [--example runs/hover_langchain.json ...]
    python scripts/replay_fingerprint.py compare before.json after.json   # exit 1 on any difference

A new policy joins an existing fingerprint without re-recording the others (the test fixture
compares only the policies it holds, so a new policy is covered once it is added):

    python scripts/replay_fingerprint.py add FIXTURE --policies NEW[,NEW2] --workflows 60

``add`` replays the fixture's own cases for the new policies (and ``lru`` once more, which must
equal the fixture's ``lru`` exactly, so the cases are the same ones), then writes them into FIXTURE.
A deliberate behaviour change of one policy re-records only that policy's entries the same way:

    python scripts/replay_fingerprint.py add FIXTURE --policies CHANGED --workflows 60 --replace

Cases recorded:

* a fixed synthetic trace (``synth --graph codegen --workflows 200 --seed 11``) under every
  registered policy, with the ``oracle``, ``markov`` and ``context`` predictors, at two device capacities
  (host tier given explicitly, so defaults that change later do not move the figures);
* each ``--example SUMMARY.json`` (the ``--json`` file of an example run): its recorded test trace
  replayed with its trained predictor, concurrency, device and host capacity. The example's app
  run is not repeated: a replay of the same trace is deterministic, and with nominal timing (the
  examples' default) a second app run gives the same trace anyway (``scripts/compare_example_runs.py``);
  a ``--timing recorded`` run keeps wall-clock tool gaps, so its rerun is a slightly different workload.

Figures kept per run: device and host hit rate, evictions, evicted/prefetched tokens, mean/p50/p99
workflow latency, mean/p99 TTFT, request and workflow counts, per-agent TTFT and the hit-rate
timeline. Wall-clock decision latencies are left out (they are measurements of this machine).
``compare`` requires exact equality (floats compared as written by JSON), and reports each
difference with its path.

Bad input (a missing or unreadable file, a file that is not a fingerprint, an unknown option, a
``pbkv-bench`` run that fails) ends with one ``error: ...`` line on stderr and exit status 2, as the
``pbkv-bench`` commands and the benchmark scripts report it. ``record OUT`` refuses, before any
replay, an OUT it must not replace (a directory, a fifo or device, a dangling link, a path under a
file, an existing non-empty file that is not an earlier fingerprint: a trace, a plot, another
command's result); ``record`` and ``add`` write their file whole or not at all.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from pbkv_contract.files import output_problem, replace_file

#: Figures of one replay that a behaviour-preserving change keeps exactly.
KEPT = ("hit_rate", "host_hit_rate", "evictions", "evicted_tokens", "prefetched_tokens", "mean_latency_s",
        "p50_latency_s", "p99_latency_s", "mean_ttft_s", "p99_ttft_s", "per_agent_ttft_s", "workflows",
        "requests", "timeline")

SYNTH = {"graph": "codegen", "workflows": 200, "seed": 11}
SYNTH_REPLAY = {"profile": "h100-qwen2.5-32b", "concurrency": 16}
#: (device tokens, host tokens) of the synthetic cases: a tight and a looser device.
SYNTH_CAPACITIES = ((120_000, 240_000), (200_000, 400_000))
SYNTH_PREDICTORS = ("oracle", "markov", "context")


class Failure(Exception):
    """Bad input or a failed run: :func:`main` prints it as one ``error:`` line and returns 2."""


class _OneLineParser(argparse.ArgumentParser):
    """Usage errors as one ``error: ...`` line (exit 2), without argparse's usage block first."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"error: {message}\n")


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status (0 ok, 1 differences, 2 usage/run error)."""
    parser = _OneLineParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True, parser_class=_OneLineParser)
    rec = sub.add_parser("record", help="replay every case and write the fingerprint JSON")
    rec.add_argument("out", type=Path)
    rec.add_argument("--example", type=Path, action="append", default=[],
                     help="an example run's --json summary (repeatable)")
    rec.add_argument("--policies", default=None, help="comma-separated policies (default: every registered one)")
    rec.add_argument("--workflows", type=int, default=SYNTH["workflows"], help="workflows of the synthetic trace")
    add = sub.add_parser("add", help="record new policies into an existing fingerprint (others untouched)")
    add.add_argument("fixture", type=Path)
    add.add_argument("--policies", required=True,
                     help="comma-separated policies not yet in the fixture (or in it, with --replace)")
    add.add_argument("--replace", action="store_true",
                     help="re-record policies the fixture already holds (a deliberate behaviour change)")
    add.add_argument("--workflows", type=int, default=SYNTH["workflows"],
                     help="workflows of the synthetic trace (the fixture's own: 60 for the test fixture)")
    cmp_ = sub.add_parser("compare", help="exit 1 if two fingerprints differ")
    cmp_.add_argument("before", type=Path)
    cmp_.add_argument("after", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.cmd == "record":
            return record(args.out, args.example, args.policies, args.workflows)
        if args.cmd == "add":
            return add_policies(args.fixture, args.policies.split(","), args.workflows, args.replace)
        return compare(args.before, args.after)
    except Failure as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _load(path: Path, what: str = "fingerprint") -> dict[str, Any]:
    """The JSON object in ``path``; :class:`Failure` naming the file when it cannot be read or
    does not hold one JSON object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise Failure(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise Failure(f"{what} {path} is not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise Failure(f"{what} {path} holds JSON that is not an object ({type(data).__name__})")
    return data


def fingerprint_problem(data: Any) -> str | None:
    """Why the JSON document ``data`` is not a fingerprint ``{case: {policy: {figure: value}}}``
    (as :func:`record` writes it), or ``None``: a non-empty object whose every case is a non-empty
    object of policies, each an object of figures holding at least ``hit_rate``."""
    if not isinstance(data, dict):
        return f"holds {type(data).__name__}, not an object of cases"
    if not data:
        return "holds no case"
    for case, runs in data.items():
        if not isinstance(runs, dict) or not runs:
            return f"case {case!r} is not an object of policies"
        for policy, figures in runs.items():
            if not isinstance(figures, dict) or "hit_rate" not in figures:
                return f"case {case!r} policy {policy!r} is not an object of figures"
    return None


def _is_fingerprint(data: Any) -> bool:
    """Whether ``data`` is a fingerprint (``output_problem``'s recogniser of an earlier record)."""
    return fingerprint_problem(data) is None


def _load_fingerprint(path: Path) -> dict[str, Any]:
    """The fingerprint in ``path``; :class:`Failure` naming the file when it is not one."""
    data = _load(path)
    if (problem := fingerprint_problem(data)) is not None:
        raise Failure(f"fingerprint {path} is not a replay fingerprint ({problem})")
    return data


def _write(path: Path, data: dict[str, Any]) -> None:
    """Replace ``path`` with ``data`` at once (written aside, then renamed: a run stopped
    mid-write keeps the previous file whole); :class:`Failure` when it cannot be written."""
    text = json.dumps(data, indent=1, sort_keys=True) + "\n"
    try:
        replace_file(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    except OSError as exc:
        raise Failure(f"cannot write {path}: {exc.strerror or exc}") from None


def record(out: Path, examples: list[Path], policies: str | None, workflows: int = SYNTH["workflows"]) -> int:
    """Replay every case and write ``{case: {policy: figures}}`` to ``out``.

    Args:
        out: the fingerprint JSON to write.
        examples: ``--json`` summaries of example runs whose test traces are replayed too.
        policies: comma-separated policy names (``None``: every registered policy).
        workflows: workflows of the synthetic trace.
    """
    policy_list = policies or ",".join(_registered_policies())
    summaries = [_example_summary(path) for path in examples]  # bad input stops before any replay
    inputs = [*examples, *(Path(summary["traces"]["test"]) for summary in summaries)]
    if (problem := output_problem(out, inputs, json_doc=_is_fingerprint)) is not None:
        raise Failure(f"{out}: {problem}")  # a trace, a plot, another result: refused before any replay
    cases: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="pbkv-fingerprint-") as tmp:
        trace = Path(tmp) / "synth.jsonl"
        _bench("synth", "--graph", SYNTH["graph"], "--workflows", str(workflows),
               "--seed", str(SYNTH["seed"]), "--out", str(trace))
        for device, host in SYNTH_CAPACITIES:
            for pred in SYNTH_PREDICTORS:
                name = _synth_case(pred, device)
                cases[name] = _replay(trace, policy_list, pred, SYNTH_REPLAY["concurrency"],
                                      SYNTH_REPLAY["profile"], device, host, Path(tmp))
                print(f"recorded {name}", file=sys.stderr)
        for summary in summaries:
            ex_policies = ",".join(p for p in summary["policies"])
            name = f"example-{summary['example']}"
            cases[name] = _replay(Path(summary["traces"]["test"]), ex_policies, summary["model"],
                                  summary["replay_concurrency"], summary["profile"], summary["device_tokens"],
                                  summary["host_tokens"], Path(tmp))
            print(f"recorded {name}", file=sys.stderr)
    _write(out, cases)
    print(f"wrote {out}: {len(cases)} cases")
    return 0


def _synth_case(predictor: str, device: int) -> str:
    """The name of the synthetic case replayed with ``predictor`` at ``device`` tokens."""
    return f"synth-{SYNTH['graph']}/{predictor}/device{device}"


def _synth_cases() -> list[str]:
    """Every synthetic case :func:`record` makes."""
    return [_synth_case(pred, device) for device, _ in SYNTH_CAPACITIES for pred in SYNTH_PREDICTORS]


def _example_summary(path: Path) -> dict[str, Any]:
    """An example run's ``--json`` summary, with the keys :func:`record` replays it by."""
    summary = _load(path, "example summary")
    missing = [key for key in ("policies", "example", "traces", "model", "replay_concurrency", "profile",
                               "device_tokens", "host_tokens") if key not in summary]
    if missing or not isinstance(summary["traces"], dict) or "test" not in summary["traces"]:
        raise Failure(f"example summary {path} is not an example run's --json summary "
                      f"(no {', '.join(missing) or 'traces.test'})")
    return summary


def recorded_policies(fingerprint: dict[str, Any]) -> list[str]:
    """The policies a fingerprint holds (those of its first case; every case holds the same)."""
    return sorted(next(iter(fingerprint.values()))) if fingerprint else []


def add_policies(fixture: Path, policies: list[str], workflows: int = SYNTH["workflows"], replace: bool = False) -> int:
    """Record ``policies`` on the synthetic cases of ``fixture`` and write them into it.

    Only synthetic cases are supported (example cases need their run's files). ``lru`` is replayed
    alongside and must equal the fixture's ``lru`` exactly, which shows that ``workflows`` and the
    case settings are the fixture's; a policy already in the fixture is refused unless ``replace``
    (a deliberate behaviour change of that policy: its entries are overwritten, every other
    policy's stay as recorded). Re-recording ``lru`` itself is refused (it is the check that the
    cases are the fixture's). Returns 0, or 2 with one line on stderr.
    """
    if not fixture.is_file() and (problem := output_problem(fixture)) is not None:
        raise Failure(f"{fixture}: {problem}")  # a fifo or device would block the read or be replaced
    data = _load_fingerprint(fixture)
    if (problem := output_problem(fixture, json_doc=_is_fingerprint)) is not None:
        raise Failure(f"{fixture}: {problem}")  # not writable: refused before any replay
    have = set(recorded_policies(data))
    policies = [p for p in (q.strip() for q in policies) if p]
    again = sorted(set(policies) & have)
    if replace and _baseline() in policies:
        print(f"error: --replace cannot re-record {_baseline()} (use record)", file=sys.stderr)
        return 2
    if replace:
        again = []
    if not policies or again:
        print(f"error: {', '.join(again) or 'no policy'} already in {fixture}" if again
              else "error: --policies names no policy", file=sys.stderr)
        return 2
    if any(not case.startswith("synth-") for case in data):
        print("error: add supports fingerprints of synthetic cases only", file=sys.stderr)
        return 2
    unknown = sorted(set(data) - set(_synth_cases()))
    if unknown:
        raise Failure(f"{fixture} holds case {unknown[0]}, which record does not make; nothing written")
    lacking = sorted(case for case, runs in data.items() if _baseline() not in runs)
    if lacking:
        raise Failure(f"{fixture} holds no {_baseline()} on case {lacking[0]} (add checks the cases against it); "
                      "nothing written")
    with tempfile.TemporaryDirectory(prefix="pbkv-fingerprint-") as tmp:
        new = Path(tmp) / "new.json"
        status = record(new, [], ",".join([_baseline(), *policies]), workflows)
        if status:
            return status
        fresh = json.loads(new.read_text(encoding="utf-8"))
    for case, runs in data.items():
        if fresh[case][_baseline()] != runs[_baseline()]:
            print(f"error: {_baseline()} on {case} differs from {fixture}'s (another --workflows, or the engine "
                  "changed); nothing written", file=sys.stderr)
            return 2
        for policy in policies:
            runs[policy] = fresh[case][policy]
    _write(fixture, data)
    print(f"{'re-recorded' if replace else 'added'} {', '.join(policies)} in {fixture} ({len(data)} cases)")
    return 0


def compare(before: Path, after: Path) -> int:
    """Print every difference between two fingerprints; 0 if identical, 1 otherwise."""
    a, b = _load_fingerprint(before), _load_fingerprint(after)
    diffs = list(_diff(a, b, ""))
    for line in diffs[:200]:
        print(line)
    if diffs:
        print(f"{len(diffs)} difference(s)")
        return 1
    n_runs = sum(len(v) for v in a.values())
    print(f"identical: {len(a)} cases, {n_runs} policy runs")
    return 0


def _diff(a: Any, b: Any, path: str):
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(a.keys() | b.keys()):
            if key not in a:
                yield f"{path}/{key}: only after"
            elif key not in b:
                yield f"{path}/{key}: only before"
            else:
                yield from _diff(a[key], b[key], f"{path}/{key}")
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            yield from _diff(x, y, f"{path}[{i}]")
    elif a != b:
        yield f"{path}: {a!r} -> {b!r}"


def _replay(trace: Path, policies: str, predictor: str, concurrency: int, profile: str, device: int, host: int,
            tmp: Path) -> dict[str, Any]:
    out = tmp / "replay.json"
    _bench("replay", str(trace), "--policy", policies, "--predictor", str(predictor),
           "--concurrency", str(concurrency), "--profile", profile, "--device-tokens", str(device),
           "--host-tokens", str(host), "--json", str(out))
    results = json.loads(out.read_text(encoding="utf-8"))
    return {policy: {k: s.get(k) for k in KEPT} for policy, s in results.items()}


def _bench(*args: str) -> None:
    exe = Path(sys.executable).with_name("pbkv-bench")
    env = {**os.environ, "COLUMNS": "120"}
    proc = subprocess.run([str(exe), *args], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
        raise Failure(f"pbkv-bench {' '.join(args[:2])} failed with exit status {proc.returncode}")


def _baseline() -> str:
    """The baseline policy's name (the registry's, not spelled here)."""
    from pbkv_server.engine.policies import BASELINE_POLICY

    return BASELINE_POLICY


def _registered_policies() -> list[str]:
    """Every policy the simulator can replay (those that need no live server)."""
    from pbkv_server.engine import available_policies

    return list(available_policies())


if __name__ == "__main__":
    sys.exit(main())
