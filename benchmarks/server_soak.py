"""Soak test of pbkv-server on loopback: a fixed request rate with workflow churn, for minutes.

Starts ``pbkv-server`` as a subprocess (its RSS and descriptors are measured alone) and sends
hinted chat requests at a fixed rate (``--rate`` per second, open-loop pacing shared by all
workers) for ``--minutes``. Workers run workflows back to back: 3-8 steps over five agents
with per-agent system prompts and a growing history; each workflow then sends its end signal,
except a share (``--abandon``) that just stops, as a crashed client would, and is retired by the
server after ``--idle-retire-s``. Every ``--every`` seconds it prints the window's requests,
errors, achieved rate and latency, and the server's RSS, open file descriptors, workflow-table
size (active and remembered ended ids), the engine's active workflows and radix-tree nodes, and
device/host KV usage. At the end: those figures at start (first report), 10 minutes and the
end, and the RSS change from the warm-up (``--warmup-min``) to the end.

Run: ``.venv/bin/python benchmarks/server_soak.py [--minutes 30] [--rate 20] [--workers 32]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import time

import httpx
from prometheus_client.parser import text_string_to_metric_families

from pbkv_server.engine.policies import DEFAULT_POLICY
from pbkv_contract.hints import END_PATH, Hints

from _server_proc import percentile, rss_mib, start_server, stop_server

AGENTS = ("planner", "researcher", "coder", "tester", "reviewer")
GAUGES = ("pbkv_server_workflows", "pbkv_server_ended_workflow_ids", "pbkv_active_workflows", "pbkv_tree_nodes",
          "pbkv_device_used_tokens", "pbkv_host_used_tokens")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--rate", type=float, default=20.0, help="requests per second (fixed, open loop)")
    parser.add_argument("--workers", type=int, default=32, help="workflows in flight at once")
    parser.add_argument("--abandon", type=float, default=0.1, help="share of workflows that never send an end")
    parser.add_argument("--idle-retire-s", type=float, default=60.0)
    parser.add_argument("--policy", default=DEFAULT_POLICY)
    parser.add_argument("--device-tokens", type=int, default=40_000, help="small enough that eviction runs")
    parser.add_argument("--host-tokens", type=int, default=80_000)
    parser.add_argument("--every", type=float, default=60.0, help="seconds between reports")
    parser.add_argument("--warmup-min", type=float, default=5.0, help="minutes before memory must be flat")
    parser.add_argument("--json", default=None, help="write every report as JSON to this file")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    proc, url = start_server("--policy", args.policy, "--log-level", "warning", "--idle-retire-s",
                             str(args.idle_retire_s), "--device-tokens", str(args.device_tokens),
                             "--host-tokens", str(args.host_tokens))
    try:
        print(f"pbkv-server pid {proc.pid} ({args.policy}, device {args.device_tokens} / host {args.host_tokens} "
              f"tokens, idle retire {args.idle_retire_s:g} s); {args.rate:g} requests/s for {args.minutes:g} min, "
              f"{args.workers} workflows in flight, {args.abandon:.0%} abandoned", flush=True)
        reports = asyncio.run(_soak(url, proc.pid, args))
    finally:
        stop_server(proc)
    _summary(reports, args)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(reports, fh, indent=1)


async def _soak(url: str, pid: int, args: argparse.Namespace) -> list[dict]:
    rng = random.Random(args.seed)
    systems = {a: f"You are the {a} of a software team. " + " ".join(
        f"Rule {i}: state the {a} duty {i} precisely." for i in range(40)) for a in AGENTS}
    window = {"ok": 0, "errors": 0, "latencies": []}
    totals = {"ok": 0, "errors": 0, "workflows": 0, "abandoned": 0}
    t0 = time.monotonic()
    end_at = t0 + args.minutes * 60
    slot = 0

    async def paced() -> bool:
        # Open loop: request i starts at t0 + i / rate, whoever sends it.
        nonlocal slot
        start = t0 + slot / args.rate
        slot += 1
        if start >= end_at:
            return False
        await asyncio.sleep(max(0.0, start - time.monotonic()))
        return True

    async def worker(w: int, client: httpx.AsyncClient) -> None:
        n = 0
        while time.monotonic() < end_at:
            wid = f"soak-{w}-{n}"
            n += 1
            steps = rng.randint(3, 8)
            history: list[str] = []
            for step in range(steps):
                if not await paced():
                    return
                agent = AGENTS[(step + w) % len(AGENTS)] if step else "planner"
                messages = [{"role": "system", "content": systems[agent]},
                            {"role": "user", "content": f"Ticket {wid}.\n" + "\n".join(history[-6:])}]
                t = time.monotonic()
                try:
                    resp = await client.post("/v1/chat/completions", headers=Hints(wid, agent, step, "soak").to_headers(),
                                             json={"model": "m", "messages": messages, "max_tokens": 48})
                    resp.raise_for_status()
                    history.append(f"{agent}: {resp.json()['choices'][0]['message']['content']}")
                    window["ok"] += 1
                except (httpx.HTTPError, KeyError, ValueError):
                    window["errors"] += 1
                window["latencies"].append(time.monotonic() - t)
            totals["workflows"] += 1
            if rng.random() < args.abandon:
                totals["abandoned"] += 1
                continue
            try:
                (await client.post(END_PATH.format(workflow_id=wid), json={"status": "completed"})).raise_for_status()
            except httpx.HTTPError:
                window["errors"] += 1

    reports: list[dict] = []

    async def reporter(client: httpx.AsyncClient) -> None:
        next_at = t0 + args.every
        while True:
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            elapsed = time.monotonic() - t0
            lat = window["latencies"]
            metrics = await _gauges(client)
            report = {"minute": round(elapsed / 60, 2), "ok": window["ok"], "errors": window["errors"],
                      "rate": window["ok"] / args.every, "p50_ms": percentile(lat, 50) * 1e3, "p99_ms": percentile(lat, 99) * 1e3,
                      "rss_mib": rss_mib(pid), "fds": len(os.listdir(f"/proc/{pid}/fd")), **metrics}
            totals["ok"] += window["ok"]
            totals["errors"] += window["errors"]
            report["workflows_done"] = totals["workflows"]
            window.update(ok=0, errors=0, latencies=[])
            reports.append(report)
            print(f"min {report['minute']:5.1f}: {report['ok']} ok, {report['errors']} err, {report['rate']:.1f} req/s, "
                  f"p50 {report['p50_ms']:.0f} ms, p99 {report['p99_ms']:.0f} ms | RSS {report['rss_mib']:.1f} MiB, "
                  f"fds {report['fds']}, table {metrics['pbkv_server_workflows']:.0f} active / "
                  f"{metrics['pbkv_server_ended_workflow_ids']:.0f} ended ids, engine workflows "
                  f"{metrics['pbkv_active_workflows']:.0f}, tree {metrics['pbkv_tree_nodes']:.0f} nodes, KV device "
                  f"{metrics['pbkv_device_used_tokens']:.0f} / host {metrics['pbkv_host_used_tokens']:.0f} tokens, "
                  f"{report['workflows_done']} workflows run", flush=True)
            next_at += args.every
            if next_at > end_at + args.every / 2:
                return

    limits = httpx.Limits(max_connections=args.workers + 2, max_keepalive_connections=args.workers + 2)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as client:
        await asyncio.gather(reporter(client), *(worker(w, client) for w in range(args.workers)))
    print(f"done: {totals['ok']} requests ok, {totals['errors']} errors, {totals['workflows']} workflows "
          f"({totals['abandoned']} abandoned)")
    return reports


def _summary(reports: list[dict], args: argparse.Namespace) -> None:
    if not reports:
        return
    first = reports[0]
    at10 = min(reports, key=lambda r: abs(r["minute"] - 10))
    last = reports[-1]
    print("\n| figure | start (min %.1f) | min %.1f | end (min %.1f) |" % (first["minute"], at10["minute"], last["minute"]))
    print("|---|---:|---:|---:|")
    for key, label in (("rss_mib", "server RSS MiB"), ("fds", "open descriptors"),
                       ("pbkv_server_workflows", "workflow table: active"),
                       ("pbkv_server_ended_workflow_ids", "workflow table: ended ids"),
                       ("pbkv_active_workflows", "engine active workflows"), ("pbkv_tree_nodes", "radix-tree nodes"),
                       ("p99_ms", "p99 latency ms"), ("errors", "errors in the minute")):
        print(f"| {label} | {first[key]:.1f} | {at10[key]:.1f} | {last[key]:.1f} |")
    warm = [r for r in reports if r["minute"] >= args.warmup_min]
    if warm:
        rss = [r["rss_mib"] for r in warm]
        print(f"RSS after {args.warmup_min:g} min warm-up: min {min(rss):.1f}, max {max(rss):.1f} MiB, "
              f"end - first = {rss[-1] - rss[0]:+.1f} MiB")


async def _gauges(client: httpx.AsyncClient) -> dict[str, float]:
    text = (await client.get("/metrics")).text
    found = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
    return {name: found.get(name, float("nan")) for name in GAUGES}


if __name__ == "__main__":
    main()
