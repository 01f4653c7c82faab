"""Replicas behind a router in the simulator, at the same per-replica load: 1, 4, 16, 64 replicas.

For N replicas the workload is a seeded synthetic ``research`` trace of N x ``--per-replica``
workflows replayed with N x ``--concurrency`` workflows in flight, each replica with the same
device (``--device-tokens``; host tier 2x); every router model of ``pbkv-bench replay --router``
(at one replica they coincide, so it runs once) under ``lru`` and ``pbkv`` (online Markov
predictor per replica). Prints device hit rate, device + host hit rate, mean workflow latency,
mean TTFT, the share of workflows whose requests all went to one replica and the busiest
replica's request count over the mean, and writes a figure (hit rate and latency against N).

Usage: ``python benchmarks/router_scaling.py [--replicas 1,4,16,64] [--per-replica 48]
[--concurrency 16] [--device-tokens 80000] [--plot docs/router_scaling.png] [--json OUT]``
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pbkv_server.engine.policies import BASELINE_POLICY, DEFAULT_POLICY  # noqa: E402
from pbkv_server.predictors import make_predictor  # noqa: E402
from pbkv_server.sim.cluster import ROUTERS  # noqa: E402
from pbkv_server.hardware.profiles import get_profile, host_tokens_for  # noqa: E402
from pbkv_server.sim.simulator import ReplayConfig, ReplayOptions, load_workload, simulate  # noqa: E402
from pbkv_server.sim.synth.agents import generate  # noqa: E402

POLICIES = (BASELINE_POLICY, DEFAULT_POLICY)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", default="1,4,16,64")
    parser.add_argument("--per-replica", type=int, default=48, help="workflows per replica")
    parser.add_argument("--concurrency", type=int, default=16, help="workflows in flight per replica")
    parser.add_argument("--device-tokens", type=int, default=80_000, help="device KV tokens per replica")
    parser.add_argument("--graph", default="research")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--profile", default="a6000-qwen3-14b")
    parser.add_argument("--plot", default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    hw = get_profile(args.profile)
    host = host_tokens_for(hw, args.device_tokens, None, None)
    rows = []
    print(f"{args.graph} workload, {args.per_replica} workflows and {args.concurrency} in flight per replica, "
          f"device {args.device_tokens} / host {host} tokens per replica, profile {hw.name}")
    print(f"{'N':>3} {'router':12} {'policy':6} {'hit':>6} {'+host':>6} {'lat s':>7} {'TTFT s':>7} "
          f"{'one rep':>7} {'busiest':>7} {'wall s':>6}")
    for n in (int(x) for x in args.replicas.split(",")):
        records = list(generate(args.graph, n * args.per_replica, seed=args.seed))
        workload = load_workload(records)
        for router in ROUTERS if n > 1 else ROUTERS[:1]:
            for policy in POLICIES:
                t0 = time.perf_counter()
                s = simulate(workload, ReplayConfig(policy, hw, device_tokens=args.device_tokens, host_tokens=host),
                             ReplayOptions(concurrency=n * args.concurrency,
                                           predictor_factory=lambda: make_predictor("markov", 3, records)),
                             replicas=n, router=router).summary
                row = {"replicas": n, "router": router if n > 1 else "(one replica)", "policy": policy,
                       "hit_rate": s["hit_rate"], "device_host_hit_rate": s["hit_rate"] + s["host_hit_rate"],
                       "mean_latency_s": s["mean_latency_s"], "mean_ttft_s": s["mean_ttft_s"],
                       "one_replica_share": s["single_replica_share"], "load_spread": s["load_spread"],
                       "workflows": s["workflows"], "requests": s["requests"], "wall_s": time.perf_counter() - t0}
                rows.append(row)
                print(f"{n:>3} {row['router']:12} {policy:6} {row['hit_rate']:6.3f} {row['device_host_hit_rate']:6.3f} "
                      f"{row['mean_latency_s']:7.1f} {row['mean_ttft_s']:7.2f} {100 * row['one_replica_share']:6.1f}% "
                      f"{row['load_spread']:6.2f}x {row['wall_s']:6.1f}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    if args.plot:
        _plot(rows, Path(args.plot), args)
        print(f"wrote {args.plot}")


def _plot(rows: list[dict], path: Path, args: argparse.Namespace) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    ns = sorted({r["replicas"] for r in rows})
    single = {r["policy"]: r for r in rows if r["replicas"] == 1}
    colors = {"affinity": "tab:blue", "cache-aware": "tab:green", "round-robin": "tab:red"}
    for router in ROUTERS:
        for policy, style in zip(POLICIES, ("--", "-")):
            pts = [single[policy]] if policy in single else []
            pts += [r for r in rows if r["router"] == router and r["policy"] == policy]
            xs = [r["replicas"] for r in pts]
            for ax, key in zip(axes, ("hit_rate", "mean_latency_s")):
                ax.plot(xs, [r[key] for r in pts], style, marker="o", color=colors[router], label=f"{router}, {policy}")
    for ax, label in zip(axes, ("device hit rate (token level)", "mean workflow latency, simulated s")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ns, [str(n) for n in ns])
        ax.set_xlabel("replicas (same load per replica)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"Replicas behind a router: synthetic {args.graph}, {args.per_replica} workflows and "
                 f"{args.concurrency} in flight per replica, {args.device_tokens // 1000}k device tokens each",
                 fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
