"""Replay a grid of synthetic workloads under every policy and print one table per workload.

The instrument for policy changes: run it before and after a change and compare the JSON files
(``--compare BEFORE.json``), so a policy change is judged on agent and non-agent traffic at once.

    python benchmarks/policy_matrix.py --graph chat --device 20000,40000,80000 --concurrency 1,32 --json out.json
    python benchmarks/policy_matrix.py --graph codegen,research --predictor oracle,markov --json out.json
    python benchmarks/policy_matrix.py ... --compare before.json      # adds a "change" table
    python benchmarks/policy_matrix.py ... --json out.json --resume   # skips what out.json holds

``--json`` is rewritten after every policy of every cell, so a long grid that is stopped keeps
what it finished; ``--resume`` then runs only the (cell, policy) pairs the file lacks. It trusts
the file to come from the same command (profile and host ratio are not in its keys). A policy that
reads no predictions (``policy_info(p).predictive`` false: lru, opt...) replays the same under
any predictor, so ``--resume`` with a new ``--predictor`` copies its figures from the same cell
under another predictor and replays only the predictive policies (as a run of several
``--predictor`` specs does after its first).

Each cell is the device hit rate (and mean workflow latency in seconds, with its speedup vs LRU:
LRU's mean latency / the policy's, x, >1 faster); with ``--per-app`` the hit rate of each app of a
mixed trace is printed too (``chat-mix``: chat and codegen separately). Capacities are tokens;
the host tier is ``--host-ratio`` x device (default 1, ``PAPER_HOST_RATIO``, as ``pbkv-bench
replay`` and ``study``); each printed row names it.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

from rich.console import Console

from pbkv_server.engine.policies import BASELINE_POLICY, REPLAY, available_policies, parse_policy_list, policy_info
from pbkv_server.predictors import DEFAULT_ONLINE_PREDICTOR, make_predictor
from pbkv_server.sim.measures import latency_speedup
from pbkv_server.hardware.profiles import MAX_HOST_RATIO, PAPER_HOST_RATIO, get_profile
from pbkv_server.sim.progress import ReplayBar, replay_progress
from pbkv_server.sim.simulator import ReplayConfig, ReplayOptions, load_workload, simulate
from pbkv_server.sim.synth.agents import write_trace
from _cli import OneLineParser, check_output, run_script, write_json
from pbkv_contract.trace import read_trace


#: Progress bars go to stderr, so that the printed rows can be piped.
err = Console(stderr=True)


def main(argv: list[str] | None = None) -> int:
    """Run the grid; prints markdown tables, writes ``--json``; returns the exit status."""
    p = OneLineParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--graph", default="codegen", help="comma-separated synth graphs (chat, chat-mix, codegen, ...)")
    p.add_argument("--workflows", type=int, default=300, help="workflows (conversations) per trace")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--trace", default=None, help="replay this trace file instead of synthetic graphs")
    p.add_argument("--policy", default=",".join(available_policies(REPLAY)))
    p.add_argument("--predictor", default=DEFAULT_ONLINE_PREDICTOR, help="comma-separated predictor specs")
    p.add_argument("--concurrency", type=_whole_numbers, default="16", help="comma-separated")
    p.add_argument("--device", type=_whole_numbers, default="120000", help="comma-separated device capacities, tokens")
    p.add_argument("--host-ratio", type=_host_ratio, default=PAPER_HOST_RATIO,
                   help="host tier / device (default 1, the PBKV paper's setup)")
    p.add_argument("--profile", default="h100-qwen2.5-32b")
    p.add_argument("--per-app", action="store_true", help="print hit rates per app (mixed traces)")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--compare", type=Path, default=None, help="a previous --json of the same grid")
    p.add_argument("--resume", action="store_true",
                   help="keep what --json already holds and run only the (cell, policy) pairs it lacks")
    p.add_argument("--no-lru-guard", action="store_true",
                   help="predictive policies always follow their predicted order (EngineConfig.lru_guard off)")
    args = p.parse_args(argv)
    check_output(p, args.json, [args.trace] if args.trace else [])
    if args.resume and args.json is None:
        p.error("--resume needs --json (the file to resume)")

    for spec in args.predictor.split(","):  # a typo fails now, not after hours of the specs before it
        try:
            make_predictor(spec, 3, [])
        except (ValueError, ImportError) as exc:
            p.error(f"--predictor: {exc}")
    profile = get_profile(args.profile)
    try:  # an empty item or a repeat is refused, as in pbkv-bench replay
        policies = parse_policy_list(args.policy, REPLAY)
    except ValueError as exc:
        p.error(str(exc))
    results: dict[str, dict] = _read_matrix(p, args.json, "--resume") if args.resume and args.json.exists() else {}
    before = _read_matrix(p, args.compare, "--compare") if args.compare else None  # before hours of replay
    with tempfile.TemporaryDirectory() as tmp:
        traces = {}
        if args.trace:
            traces[Path(args.trace).name] = args.trace
        else:
            for graph in args.graph.split(","):
                path = str(Path(tmp) / f"{graph}.jsonl")
                write_trace(path, graph=graph, workflows=args.workflows, seed=args.seed)
                traces[f"{graph}/w{args.workflows}/s{args.seed}"] = path
        for name, path in traces.items():
            records = read_trace(path)
            workload = load_workload(records)
            for conc in args.concurrency:
                for device in args.device:
                    for pred in args.predictor.split(","):
                        cell = f"{name} C={conc} device={device}"
                        key = f"{cell} predictor={pred}"
                        row = results.setdefault(key, {})
                        _reuse_unpredicted(row, results, cell, policies)
                        for policy in policies:
                            if policy in row:  # resumed
                                continue
                            with replay_progress(err) as progress:  # stderr: the rows stay on stdout
                                bar = ReplayBar(progress, f"C={conc} {policy}", policy, len(workload.units))
                                r = simulate(workload, ReplayConfig(policy, profile, device_tokens=device,
                                                                    host_tokens=int(args.host_ratio * device),
                                                                    lru_guard=not args.no_lru_guard),
                                             ReplayOptions(concurrency=conc, predictor=make_predictor(pred, 3, records),
                                                           on_workflow_end=bar)).summary
                                bar.finish()
                            row[policy] = {"hit_rate": r["hit_rate"], "host_hit_rate": r["host_hit_rate"],
                                           "mean_latency_s": r["mean_latency_s"], "mean_ttft_s": r["mean_ttft_s"],
                                           "per_app": r.get("per_app", {})}
                            if "guard" in r:
                                row[policy]["guard"] = r["guard"]
                            if args.json:
                                write_json(args.json, results)
                        _print_row(f"{key} host={args.host_ratio:g}x", row, args.per_app)
    if before is not None:
        _print_change(before, results, policies)
    if args.json:
        write_json(args.json, results)
    return 0


def _reuse_unpredicted(row: dict, results: dict[str, dict], cell: str, policies: list[str]) -> None:
    """Copy into ``row`` (a cell under one predictor) the figures of each policy that reads no
    predictions from ``cell`` under another predictor: its replay would be the same (the engine
    calls the predictor only for a predictive policy, ``Policy.uses_predictions``)."""
    for other_key, other in results.items():
        if other is row or other_key.rpartition(" predictor=")[0] != cell:
            continue
        for policy in policies:
            if policy not in row and policy in other and not policy_info(policy).predictive:
                row[policy] = other[policy]


def _whole_numbers(text: str) -> list[int]:
    """``--concurrency`` / ``--device``: comma-separated whole numbers (``1e5`` reads as 100000);
    the simulator checks their ranges."""
    values = []
    for part in text.split(","):
        try:
            value = float(part)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{part.strip()!r} is not a number") from None
        if not value.is_integer():
            raise argparse.ArgumentTypeError(f"{part.strip()!r} is not a whole number")
        values.append(int(value))
    return values


def _host_ratio(text: str) -> float:
    """``--host-ratio``: a number from 0 (no host tier) to ``MAX_HOST_RATIO``, as ``pbkv-bench replay``."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (math.isfinite(value) and 0 <= value <= MAX_HOST_RATIO):
        raise argparse.ArgumentTypeError(f"must be from 0 (no host tier) to {MAX_HOST_RATIO:g}, got {text}")
    return value


def _read_matrix(p: argparse.ArgumentParser, path: Path, option: str) -> dict[str, dict]:
    """The cells of an earlier ``--json`` at ``path``; one ``option: ...`` error line (exit 2) when
    it cannot be read or is not a policy_matrix result."""
    try:
        results = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        p.error(f"{option}: cannot read {path}: {exc.strerror or exc}")
    except (UnicodeDecodeError, ValueError) as exc:
        p.error(f"{option}: {path} is not JSON ({exc})")
    if not isinstance(results, dict) or not all(
            isinstance(row, dict) and all(isinstance(f, dict) and "hit_rate" in f for f in row.values())
            for row in results.values()):
        p.error(f"{option}: {path} is not a policy_matrix --json (cell -> policy -> figures)")
    return results


def _print_row(key: str, row: dict, per_app: bool) -> None:
    base = row.get(BASELINE_POLICY)
    cells = []
    for policy, r in row.items():
        lat = f"{r['mean_latency_s']:.1f}s"
        speedup = latency_speedup(base["mean_latency_s"], r["mean_latency_s"]) if base else None
        rel = f", {speedup:.3f}x vs {BASELINE_POLICY}" if speedup is not None else ""
        apps = ""
        if per_app and r["per_app"]:
            apps = " [" + " ".join(f"{a or '-'}:{v['hit_rate']:.3f}" for a, v in r["per_app"].items()) + "]"
        cells.append(f"{policy} {r['hit_rate']:.3f} ({lat}{rel}){apps}")
    print(f"{key} (device hit rate (mean latency, speedup vs {BASELINE_POLICY}: x, >1 faster)): "
          + " | ".join(cells), flush=True)


def _print_change(before: dict, after: dict, policies: list[str]) -> None:
    print("\nchange in device hit rate (points, after - before):")
    print("| case | " + " | ".join(policies) + " |")
    print("|---|" + "---:|" * len(policies))
    for key, row in after.items():
        old = before.get(key, {})
        cells = [f"{100 * (row[p]['hit_rate'] - old[p]['hit_rate']):+.1f}" if p in old and p in row else "-"
                 for p in policies]
        print(f"| {key} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    sys.exit(run_script(main))
