"""Load test of pbkv-server on loopback: 64 concurrent clients x 50 hinted requests, pace 0.

Starts ``pbkv-server`` as a subprocess (so its RSS is measured alone), then runs two identical
rounds. In each round every client runs workflows of 5 agents (planner, coder, tester, coder,
tester) with shared per-agent system prompts and a growing history, sends the end signal after
each workflow, and issues 50 requests in all. Prints per round: requests/s, p50/p99 request
latency (wall), errors, and the server's RSS before and after.

Run: ``.venv/bin/python benchmarks/server_load.py [--clients 64] [--requests 50] [--policy pbkv]``
"""

from __future__ import annotations

import argparse
import asyncio
import time

import httpx
from rich.console import Console
from rich.progress import Progress

from pbkv_contract.hints import END_PATH, Hints
from pbkv_server.engine.policies import DEFAULT_POLICY

from _server_proc import cpu_s, percentile, rss_mib, start_server, stop_server

AGENTS = ("planner", "coder", "tester", "coder", "tester")
console = Console()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--requests", type=int, default=50, help="requests per client per round")
    parser.add_argument("--policy", default=DEFAULT_POLICY)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--device-tokens", type=int, default=None, help="device KV capacity (default: profile)")
    parser.add_argument("--host-tokens", type=int, default=None, help="host KV capacity (default: profile)")
    args = parser.parse_args()

    flags = ["--policy", args.policy, "--log-level", "warning"]
    for flag, value in (("--device-tokens", args.device_tokens), ("--host-tokens", args.host_tokens)):
        if value is not None:
            flags += [flag, str(value)]
    proc, url = start_server(*flags)
    try:
        console.print(f"pbkv-server pid {proc.pid}, policy {args.policy}, pace 0, "
                      f"{args.clients} clients x {args.requests} requests per round")
        for rnd in range(args.rounds):
            rss_before, cpu_before, srv_before = rss_mib(proc.pid), cpu_s(proc.pid), _server_latency(url)
            stats = asyncio.run(_round(url, args.clients, args.requests, rnd))
            rss_after, cpu, srv_after = rss_mib(proc.pid), cpu_s(proc.pid) - cpu_before, _server_latency(url)
            srv_mean = (srv_after[0] - srv_before[0]) / max(1, srv_after[1] - srv_before[1])
            fill = _gauges(url, ("pbkv_device_used_tokens", "pbkv_host_used_tokens"))
            lat = sorted(stats["latencies"])
            console.print(
                f"round {rnd + 1}: {stats['ok']} ok, {stats['errors']} errors in {stats['wall']:.1f} s = "
                f"{stats['ok'] / stats['wall']:.0f} requests/s; latency p50 {percentile(lat, 50) * 1e3:.1f} ms, "
                f"p99 {percentile(lat, 99) * 1e3:.1f} ms; cached-token share {stats['cached'] / max(1, stats['prompt']):.1%}; "
                f"server RSS {rss_before:.1f} -> {rss_after:.1f} MiB; server CPU {cpu:.1f} s "
                f"({cpu / max(1, stats['ok']) * 1e3:.2f} ms per request); server-side mean latency "
                f"{srv_mean * 1e3:.1f} ms; KV cache after: device {fill[0]:.0f}, host {fill[1]:.0f} tokens"
            )
    finally:
        stop_server(proc)


async def _round(url: str, clients: int, requests: int, rnd: int) -> dict:
    systems = {a: f"You are the {a} of a software team. " + " ".join(f"Rule {i}: be precise about {a} duty {i}."
                                                                      for i in range(60)) for a in set(AGENTS)}
    stats = {"ok": 0, "errors": 0, "latencies": [], "cached": 0, "prompt": 0}
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as client:
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task(f"round {rnd + 1}", total=clients * requests)

            async def run_client(c: int) -> None:
                sent, w = 0, 0
                while sent < requests:
                    wid = f"r{rnd}-c{c}-w{w}"
                    history: list[str] = []
                    for step, agent in enumerate(AGENTS):
                        if sent >= requests:
                            break
                        messages = [{"role": "system", "content": systems[agent]},
                                    {"role": "user", "content": f"Task {c}.{w}: fix bug {c * 31 + w}.\n" + "\n".join(history)}]
                        t0 = time.monotonic()
                        try:
                            resp = await client.post("/v1/chat/completions",
                                                     json={"model": "m", "messages": messages, "max_tokens": 64},
                                                     headers=Hints(wid, agent, step, "load").to_headers())
                            resp.raise_for_status()
                            body = resp.json()
                            stats["ok"] += 1
                            stats["prompt"] += body["usage"]["prompt_tokens"]
                            stats["cached"] += body["usage"]["prompt_tokens_details"]["cached_tokens"]
                            history.append(f"{agent}: {body['choices'][0]['message']['content']}")
                        except (httpx.HTTPError, KeyError, ValueError):
                            stats["errors"] += 1
                        stats["latencies"].append(time.monotonic() - t0)
                        sent += 1
                        progress.advance(task)
                    try:
                        (await client.post(END_PATH.format(workflow_id=wid), json={"status": "completed"})).raise_for_status()
                    except httpx.HTTPError:
                        stats["errors"] += 1
                    w += 1

            t0 = time.monotonic()
            await asyncio.gather(*(run_client(c) for c in range(clients)))
            stats["wall"] = time.monotonic() - t0
    return stats


def _server_latency(url: str) -> tuple[float, float]:
    """(sum, count) of the server's own request-latency histogram (arrival to response start)."""
    from prometheus_client.parser import text_string_to_metric_families

    total = count = 0.0
    for family in text_string_to_metric_families(httpx.get(url + "/metrics").text):
        for sample in family.samples:
            if sample.name == "pbkv_request_latency_seconds_sum":
                total = sample.value
            elif sample.name == "pbkv_request_latency_seconds_count":
                count = sample.value
    return total, count


def _gauges(url: str, names: tuple[str, ...]) -> list[float]:
    """Current values of the named server gauges (NaN when absent)."""
    from prometheus_client.parser import text_string_to_metric_families

    found = {s.name: s.value for f in text_string_to_metric_families(httpx.get(url + "/metrics").text) for s in f.samples}
    return [found.get(n, float("nan")) for n in names]


if __name__ == "__main__":
    main()
