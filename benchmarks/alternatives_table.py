"""PBKV against what users run today: one table per workload, every policy on the same replay.

For each workload (a synthetic graph, or a recorded trace such as an example's ``test.jsonl``) it
replays every online replay policy of the registry (``lru``, PBKV and its baselines, ``kvflow``,
then the alternatives: SGLang's session cache and priority eviction, TTL pins, Continuum,
speculative prefill, KVFlow as shipped) and the offline reference, the predictive policies once per
predictor (default ``oracle`` and ``markov``), and prints a markdown table: device and host hit
rate, device-hit gap closed (share of the hit-rate gap between the baseline and the offline reference
that the policy closes: 100% = the bound; n/a when the gap is under half a point), prefill saved,
mean workflow latency, speedup vs LRU (LRU's mean latency / the policy's, x, >1 faster), latency
capture and mean TTFT (measures of :mod:`pbkv_server.sim.measures`, as ``pbkv-bench replay``
prints them). The bound is MIN over the replay's own request order, so a policy that changes the
order (Continuum's queue) or adds requests (speculative prefill) can pass it.

    python benchmarks/alternatives_table.py --graph codegen --workflows 300
    python benchmarks/alternatives_table.py --graph chat --workflows 300
    python benchmarks/alternatives_table.py --trace runs/hover_langchain/test.jsonl --concurrency 72 \\
        --device 111565 --host 223130 --profile a6000-qwen3-14b --json hover_alternatives.json

Capacities are tokens; without ``--host`` the host tier is ``--host-ratio`` x device (default 1,
``PAPER_HOST_RATIO``, as ``pbkv-bench replay`` and ``study``). On a trace
whose workflows belong to sessions (chat: each turn a workflow, ``session_id`` per conversation)
the predictive policies also run with each session as one workflow (rows ``..., session``): how
``pbkv-server`` sees an app that sends SGLang's ``session_id`` instead of PBKV hints. Their mean
latency is per turn (arrival to last token), as a turn's workflow latency is in the original.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from _cli import OneLineParser, check_output, run_script, write_text
from pbkv_contract.trace import InvocationRecord, WorkflowEndRecord, read_trace
from pbkv_server.engine.policies import BASELINE_POLICY, REFERENCE_POLICY, REPLAY, available_policies, policy_info
from pbkv_server.predictors import make_predictor
from pbkv_server.sim.measures import (CAPTURE_NOTE, SPEEDUP_HEADER, host_value, latency_capture, latency_speedup,
                                      prefill_saved)
from pbkv_server.hardware.profiles import PAPER_HOST_RATIO, get_profile
from pbkv_server.sim.report import gap_closed, jsonable
from pbkv_server.sim.simulator import ReplayConfig, ReplayOptions, load_workload, simulate
from pbkv_server.sim.synth.agents import write_trace


def main(argv: list[str] | None = None) -> int:
    """Replay the workloads, print one table each, write ``--json``; returns the exit status."""
    p = OneLineParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--graph", default=None, help="comma-separated synth graphs (codegen, chat, chat-mix, ...)")
    p.add_argument("--trace", action="append", default=[], help="a recorded trace (repeatable)")
    p.add_argument("--workflows", type=int, default=300, help="workflows (conversations) per synthetic trace")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--predictor", default="oracle,markov", help="predictors of the predictive policies")
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--device", type=int, default=120_000, help="device KV capacity, tokens")
    p.add_argument("--host", type=int, default=None, help="host KV capacity, tokens (default: --host-ratio x device)")
    p.add_argument("--host-ratio", type=float, default=PAPER_HOST_RATIO,
                   help="host tier / device when --host is not given (default 1, the PBKV paper's setup)")
    p.add_argument("--profile", default="h100-qwen2.5-32b")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    check_output(p, args.json, args.trace)
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
            title = (f"{name}: C={args.concurrency}, device {args.device} tok, host {host} tok "
                     f"({host / args.device:.3g}x), profile {args.profile}; speedup vs LRU = LRU mean latency / "
                     "policy mean latency (x, >1 faster)")
            records = read_trace(path)
            rows = compare(records, args.predictor.split(","), profile, args.concurrency, args.device, host)
            print(f"\n### {title}\n")
            print(markdown(rows))
            print(f"\n{CAPTURE_NOTE}; prefill saved = device hits + {host_value(profile):.3f} x host hits, share "
                  "of prompt tokens.")
            out[title] = rows
    if args.json:
        write_text(args.json, json.dumps(jsonable(out), indent=1))
    return 0


def compare(records: list, predictors: list[str], profile, concurrency: int, device: int, host: int) -> list[dict]:
    """One row per (policy, predictor): the replay figures plus ``gap_closed`` (device hit rate),
    ``latency_speedup``, ``latency_capture`` and ``prefill_saved`` (NaN where undefined)."""
    workload = load_workload(records)
    online = [n for n in available_policies(REPLAY) if not policy_info(n).offline]
    runs = [(n, pred, False) for n in online for pred in (predictors if policy_info(n).predictive else [None])]
    runs.append((REFERENCE_POLICY, None, False))
    merged = sessions_as_workflows(records)
    if merged is not None:
        runs += [(n, pred, True) for n in online if policy_info(n).predictive for pred in predictors]
        merged_workload = load_workload(merged)
    rows = []
    for name, pred, by_session in runs:
        t0 = time.perf_counter()
        recs, wl = (merged, merged_workload) if by_session else (records, workload)
        result = simulate(wl, ReplayConfig(name, profile, device_tokens=device, host_tokens=host),
                          ReplayOptions(concurrency=concurrency,
                                        predictor=make_predictor(pred, 3, recs) if pred else None))
        s = result.summary
        if by_session:
            # a merged workflow is a whole conversation: compare per turn (arrival to last token),
            # which is what a turn's own workflow latency is in the original trace
            pred = f"{pred}, session"
            times = result.metrics.request_times().values()
            s = {**s, "mean_latency_s": sum(done - arrived for arrived, _, done in times) / len(times)}
        rows.append({"policy": name, "predictor": pred or "-", "hit_rate": s["hit_rate"],
                     "host_hit_rate": s["host_hit_rate"], "mean_latency_s": s["mean_latency_s"],
                     "mean_ttft_s": s["mean_ttft_s"], "speculative_prefill_tokens": s["speculative_prefill_tokens"],
                     "wall_s": time.perf_counter() - t0})
        print(f"  {name} {pred or ''}: hit {s['hit_rate']:.3f}, {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    base = next(r for r in rows if r["policy"] == BASELINE_POLICY)
    bound = next(r for r in rows if r["policy"] == REFERENCE_POLICY)
    for r in rows:
        # a gap under half a point (the bound is the baseline) has no meaningful share to close
        gap = gap_closed(r["hit_rate"], base["hit_rate"], bound["hit_rate"])
        r["gap_closed"] = math.nan if gap is None else gap
        speedup = latency_speedup(base["mean_latency_s"], r["mean_latency_s"])
        capture = latency_capture(r["mean_latency_s"], base["mean_latency_s"], bound["mean_latency_s"])
        r["latency_speedup"] = math.nan if speedup is None else speedup
        r["latency_capture"] = math.nan if capture is None else capture
        r["prefill_saved"] = prefill_saved(r["hit_rate"], r["host_hit_rate"], host_value(profile))
    return rows


def sessions_as_workflows(records: list) -> list | None:
    """``records`` with each session's workflows merged into one workflow named after the session
    (steps renumbered in time order, one end record at the session's last end), or ``None`` if no
    invocation has a ``session_id``."""
    invs = [r for r in records if isinstance(r, InvocationRecord)]
    session = {r.workflow_id: r.session_id for r in invs if r.session_id}
    if not session:
        return None
    steps: dict[str, int] = {}
    out: list = []
    for r in sorted(invs, key=lambda r: r.t_start):
        sid = session.get(r.workflow_id)
        if sid is None:
            out.append(r)
            continue
        out.append(replace(r, workflow_id=sid, step=steps.get(sid, 0), session_id=None))
        steps[sid] = steps.get(sid, 0) + 1
    last_end: dict[str, WorkflowEndRecord] = {}
    for e in (r for r in records if isinstance(r, WorkflowEndRecord)):
        sid = session.get(e.workflow_id)
        if sid is None:
            out.append(e)
        elif sid not in last_end or e.t >= last_end[sid].t:
            last_end[sid] = replace(e, workflow_id=sid)
    return out + list(last_end.values())


def markdown(rows: list[dict]) -> str:
    """The rows as a markdown table (the speedup column is named :data:`SPEEDUP_HEADER`)."""
    lines = ["| policy | predictor | device hit | host hit | device-hit gap closed | prefill saved | mean latency s "
             f"| {SPEEDUP_HEADER} | latency capture | mean TTFT s |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        gap = "n/a" if math.isnan(r["gap_closed"]) else f"{100 * r['gap_closed']:.0f}%"
        capture = "-" if math.isnan(r["latency_capture"]) else f"{r['latency_capture']:.2f}"
        lines.append(f"| {r['policy']} | {r['predictor']} | {100 * r['hit_rate']:.1f}% "
                     f"| {100 * r['host_hit_rate']:.1f}% "
                     f"| {gap} | {100 * r['prefill_saved']:.1f}% | {r['mean_latency_s']:.2f} | "
                     f"{r['latency_speedup']:.2f}x | {capture} | {r['mean_ttft_s']:.3f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(run_script(main))
