"""PBKV against what users run today: one table per workload, every policy on the same replay.

For each workload (a synthetic graph, or a recorded trace such as an example's ``test.jsonl``) it
replays every online replay policy of the registry (``lru``, PBKV and its baselines, ``kvflow``,
then the alternatives: SGLang's session cache and priority eviction, TTL pins, Continuum,
speculative prefill, KVFlow as shipped) and the offline bound, the predictive policies once per
predictor (default ``oracle`` and ``markov``), and prints a markdown table: device and host hit
rate, gap closed (share of the hit-rate gap between the baseline and the offline bound that the
policy closes: 100% = the bound), mean workflow latency (and its ratio to the baseline), mean TTFT.

    python benchmarks/alternatives_table.py --graph codegen --workflows 300
    python benchmarks/alternatives_table.py --graph chat --workflows 300
    python benchmarks/alternatives_table.py --trace runs/hover_langchain/test.jsonl --concurrency 72 \\
        --device 111565 --host 223130 --profile a6000-qwen3-14b --json hover_alternatives.json

Capacities are tokens; without ``--host`` the host tier is ``--host-ratio`` x device.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

from pbkv_contract.trace import read_trace
from pbkv_server.engine.policies import BASELINE_POLICY, REFERENCE_POLICY, REPLAY, available_policies, policy_info
from pbkv_server.predictors import make_predictor
from pbkv_server.sim.profiles import get_profile
from pbkv_server.sim.report import jsonable
from pbkv_server.sim.simulator import load_workload, simulate
from pbkv_server.sim.synth import write_trace


def main(argv: list[str] | None = None) -> int:
    """Replay the workloads, print one table each, write ``--json``; returns the exit status."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--graph", default=None, help="comma-separated synth graphs (codegen, chat, chat-mix, ...)")
    p.add_argument("--trace", action="append", default=[], help="a recorded trace (repeatable)")
    p.add_argument("--workflows", type=int, default=300, help="workflows (conversations) per synthetic trace")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--predictor", default="oracle,markov", help="predictors of the predictive policies")
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--device", type=int, default=120_000, help="device KV capacity, tokens")
    p.add_argument("--host", type=int, default=None, help="host KV capacity, tokens (default: --host-ratio x device)")
    p.add_argument("--host-ratio", type=float, default=2.0)
    p.add_argument("--profile", default="h100-qwen2.5-32b")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    if not args.graph and not args.trace:
        p.error("give --graph or --trace")

    profile = get_profile(args.profile)
    host = args.host if args.host is not None else int(args.host_ratio * args.device)
    out: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        traces = {Path(t).name: t for t in args.trace}
        for graph in (args.graph.split(",") if args.graph else []):
            path = str(Path(tmp) / f"{graph}.jsonl")
            write_trace(path, graph=graph, workflows=args.workflows, seed=args.seed)
            traces[f"{graph} ({args.workflows} workflows, seed {args.seed})"] = path
        for name, path in traces.items():
            title = f"{name}: C={args.concurrency}, device {args.device} tok, host {host} tok, profile {args.profile}"
            records = read_trace(path)
            rows = compare(records, args.predictor.split(","), profile, args.concurrency, args.device, host)
            print(f"\n### {title}\n")
            print(markdown(rows))
            out[title] = rows
    if args.json:
        args.json.write_text(json.dumps(jsonable(out), indent=1))
    return 0


def compare(records: list, predictors: list[str], profile, concurrency: int, device: int, host: int) -> list[dict]:
    """One row per (policy, predictor): the replay figures plus ``gap_closed`` and ``latency_x``."""
    workload = load_workload(records)
    online = [n for n in available_policies(REPLAY) if not policy_info(n).offline]
    runs = [(n, pred) for n in online for pred in (predictors if policy_info(n).predictive else [None])]
    runs.append((REFERENCE_POLICY, None))
    rows = []
    for name, pred in runs:
        t0 = time.perf_counter()
        s = simulate(workload, name, profile, concurrency=concurrency, device_tokens=device, host_tokens=host,
                     predictor=make_predictor(pred, 3, records) if pred else None).summary
        rows.append({"policy": name, "predictor": pred or "-", "hit_rate": s["hit_rate"],
                     "host_hit_rate": s["host_hit_rate"], "mean_latency_s": s["mean_latency_s"],
                     "mean_ttft_s": s["mean_ttft_s"], "speculative_prefill_tokens": s["speculative_prefill_tokens"],
                     "wall_s": time.perf_counter() - t0})
        print(f"  {name} {pred or ''}: hit {s['hit_rate']:.3f}, {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    base = next(r for r in rows if r["policy"] == BASELINE_POLICY)
    bound = next(r for r in rows if r["policy"] == REFERENCE_POLICY)
    span = bound["hit_rate"] - base["hit_rate"]
    for r in rows:
        r["gap_closed"] = (r["hit_rate"] - base["hit_rate"]) / span if span > 1e-12 else math.nan
        r["latency_x"] = r["mean_latency_s"] / base["mean_latency_s"]
    return rows


def markdown(rows: list[dict]) -> str:
    """The rows as a markdown table."""
    lines = ["| policy | predictor | device hit | host hit | gap closed | mean latency s | latency x LRU | mean TTFT s |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        gap = "n/a" if math.isnan(r["gap_closed"]) else f"{100 * r['gap_closed']:.0f}%"
        lines.append(f"| {r['policy']} | {r['predictor']} | {100 * r['hit_rate']:.1f}% | {100 * r['host_hit_rate']:.1f}% "
                     f"| {gap} | {r['mean_latency_s']:.2f} | {r['latency_x']:.3f} | {r['mean_ttft_s']:.3f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
