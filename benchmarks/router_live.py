"""HoVer through a real SMG router to pbkv-server replicas on loopback, per routing and cache policy.

For each SMG policy (``consistent_hashing`` on the workflow id, ``cache_aware``, ``round_robin``)
and each cache policy (``lru``, ``pbkv``): start N replicas (sim engine, HoVer scenario, the same
device size each) and SMG (:func:`pbkv_server.testing.local_cluster.local_cluster`), run the LangGraph
HoVer app through the router with the SDK set up as README "Scaling out behind a router" says
(``PBKV_BODY_HINTS=1``, ``PBKV_REPLICAS``), and print per run:

* workflows on one replica: share of workflows whose requests were all served by one replica
  (the replicas' ``--trace-out`` files);
* ends at the right replica: (workflow, replica) pairs whose replica served the workflow and
  recorded its end, over all such pairs; end POSTs received by the replicas; workflows still
  active on the replicas after the run (0 = every end arrived);
* cluster device hit rate: device-cached prompt tokens / prompt tokens summed over replicas
  (``/metrics``), and the device + host rate;
* mean request latency and TTFT: simulated engine seconds of the served requests (each replica's
  own clock; ``--pace 0``), and the wall time of the run;
* trace check: every (workflow, step) of the app's trace served exactly once over all replicas.

The device size per replica comes from the capacity rule of the examples
(``examples/common/capacity.py``) at the per-replica concurrency, from a pilot run's app trace.

``--failure`` adds one run (``consistent_hashing``, ``pbkv``) in which replica 1 is killed
(SIGKILL) once a share of the claims is done, and compares each replica's hit rate with the same
run without the failure.

Usage: ``python benchmarks/router_live.py [--claims 128] [--concurrency 64] [--replicas 4] [--failure]
[--json OUT]``; needs the HoVer data (``PBKV_DATA_DIR``) and ``smg`` (the test extra). A bad option
(a count below 1, a ``--kill-at`` outside (0, 1], ``--failure`` with one replica) is one ``error:``
line and exit status 2 before anything starts. SIGTERM (``timeout``) or Ctrl-C stops the replicas
and the router, and removes the run's partial files under ``/tmp/pbkv-router-live-*`` (exit status
143 on SIGTERM); a finished run keeps its files there.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from pbkv_contract.trace import InvocationRecord, WorkflowEndRecord, read_trace  # noqa: E402
from _cli import OneLineParser, check_output, write_text  # noqa: E402
from pbkv_server.engine.policies import BASELINE_POLICY, DEFAULT_POLICY, SERVER, parse_policy_list  # noqa: E402
from pbkv_contract.settings import known_items  # noqa: E402
from pbkv_server.testing.local_cluster import SMG_POLICIES, free_port, local_cluster  # noqa: E402

SCENARIO = "examples.hover_langchain.scenario:HoverScenario"
ROUTERS = ("consistent_hashing", "cache_aware", "round_robin")
POLICIES = (BASELINE_POLICY, DEFAULT_POLICY)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    # SIGTERM (``timeout``, a job scheduler) stops the run as Ctrl-C does: local_cluster's exit stops
    # the replicas and the router (they run in their own sessions, so the signal does not reach them)
    previous = _exit_on_sigterm()
    try:
        _run_all(args)
    finally:
        signal.signal(signal.SIGTERM, previous)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The options, every bad one refused in one ``error:`` line (exit 2) before the data is read
    or a replica starts."""
    parser = OneLineParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--claims", type=int, default=128, help="HoVer claims (workflows) per run")
    parser.add_argument("--concurrency", type=int, default=64, help="workflows in flight in the app")
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--routers", default=",".join(ROUTERS),
                        help=f"SMG routing policies, comma-separated (known: {', '.join(SMG_POLICIES)})")
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--device-tokens", type=int, default=None, help="per replica (default: capacity rule)")
    parser.add_argument("--failure", action="store_true", help="add the replica-failure run")
    parser.add_argument("--kill-at", type=float, default=0.4,
                        help="share of claims done (above 0, at most 1) when replica 1 is killed; every run's "
                             "before/after figures split there")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    # --replicas 0 divided by zero, --concurrency 0 hung, a --kill-at never reached failed with a
    # KeyError after every replica had started: all refused here
    for flag, value in (("--claims", args.claims), ("--concurrency", args.concurrency),
                        ("--replicas", args.replicas), ("--device-tokens", args.device_tokens)):
        if value is not None and value < 1:
            parser.error(f"{flag} must be >= 1, got {value}")
    if not 0 < args.kill_at <= 1:  # also NaN
        parser.error(f"--kill-at must be a share of the claims above 0 and at most 1, got {args.kill_at}")
    if args.failure and args.replicas < 2:
        parser.error(f"--failure kills replica 1 (the second): needs --replicas >= 2, got {args.replicas}")
    try:  # the sim engine's policies and SMG's, refused before the data is read or a replica starts
        args.policies = parse_policy_list(args.policies, SERVER, "--policies")
        args.routers = parse_routers(args.routers)
    except ValueError as exc:
        parser.error(str(exc))
    check_output(parser, Path(args.json) if args.json else None, [])  # before an hour of runs
    return args


class Terminated(SystemExit):
    """Raised in the main thread on SIGTERM: it unwinds like Ctrl-C (every ``finally`` and context
    manager runs) and exits with status 143 (128 + SIGTERM), as a process the signal killed."""


def _on_sigterm(signum: int, frame: Any) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the cleanup short
    raise Terminated(128 + signal.SIGTERM)


def _exit_on_sigterm() -> Any:
    """Make SIGTERM raise :class:`Terminated`; returns the previous handler."""
    return signal.signal(signal.SIGTERM, _on_sigterm)


def _load_claims(n: int) -> list:
    """The first ``n`` HoVer claims that are not worked examples."""
    from examples.hover_langchain.data import load_hover
    from examples.hover_langchain.run import N_EXAMPLES

    return list(load_hover())[:-N_EXAMPLES][:n]


def _run_all(args: argparse.Namespace) -> None:
    os.environ.update(CREWAI_DISABLE_TELEMETRY="true", OTEL_SDK_DISABLED="true")
    claims = _load_claims(args.claims)
    if not claims:
        print("error: no HoVer claims to run (PBKV_DATA_DIR)", file=sys.stderr)
        raise SystemExit(2)
    per_replica_c = max(1, args.concurrency // args.replicas)
    # The same replica URLs in every run: SMG's ring hashes them, so consistent_hashing maps each
    # workflow to the same replica index in every run (lru vs pbkv, with and without the failure).
    args.ports = sorted({free_port() for _ in range(8 * args.replicas)})[: args.replicas]
    work = Path(tempfile.mkdtemp(prefix="pbkv-router-live-"))
    try:
        _runs(args, claims, per_replica_c, work)
    except (KeyboardInterrupt, Terminated):
        # the processes are stopped (local_cluster's exit ran); a stopped run's files are partial
        shutil.rmtree(work, ignore_errors=True)
        print(f"stopped; removed {work}", file=sys.stderr, flush=True)
        raise


def _runs(args: argparse.Namespace, claims: list, per_replica_c: int, work: Path) -> None:
    device = args.device_tokens or _pilot_capacity(claims, per_replica_c, work / "pilot")
    print(f"{len(claims)} HoVer claims, {args.concurrency} in flight, {args.replicas} replicas of {device} device "
          f"tokens each (capacity rule at C={per_replica_c}); files under {work}", flush=True)
    results: dict[str, Any] = {}
    for router in args.routers:
        for policy in args.policies:
            name = f"{router}/{policy}"
            results[name] = run(router, policy, claims, args, device, work / name.replace("/", "-"))
            print(_line(name, results[name]), flush=True)
    if args.failure:
        name = f"consistent_hashing/{DEFAULT_POLICY} + replica 1 killed"
        results[name] = run("consistent_hashing", DEFAULT_POLICY, claims, args, device, work / "failure", kill=1)
        print(_line(name, results[name]), flush=True)
        base = results.get(f"consistent_hashing/{DEFAULT_POLICY}")
        print(_failure_report(results[name], base), flush=True)
    if args.json:
        write_text(Path(args.json), json.dumps(results, indent=1))
        print(f"wrote {args.json}")


def parse_routers(text: str, flag: str = "--routers") -> list[str]:
    """The SMG routing policies of ``--routers``, in order; an empty item, a name given twice or a
    name SMG does not know (:data:`SMG_POLICIES`) raises ``ValueError`` naming ``flag`` (a typo
    failed only when its run's router started, after the pilot and the earlier runs)."""
    return known_items(text, SMG_POLICIES, flag, "router")


def run(router: str, policy: str, claims: list, args: argparse.Namespace, device: int, out: Path,
        kill: int | None = None) -> dict[str, Any]:
    """One app run through SMG; figures as in the module docstring."""
    from examples.hover_langchain.run import run_claims
    from pbkv_sdk import ending

    flags = ["--policy", policy, "--scenario", SCENARIO, "--device-tokens", str(device), "--idle-retire-s", "0"]
    figures: dict[str, Any] = {"router": router, "policy": policy, "device_tokens": device}
    with local_cluster(args.replicas, router_policy=router, server_flags=flags, trace_dir=out / "served",
                       log_dir=out / "logs", ports=args.ports) as cluster:
        os.environ["PBKV_BODY_HINTS"] = "1"
        os.environ["PBKV_REPLICAS"] = ",".join(cluster.replica_urls)
        done = [0]
        at_split: dict[int, dict[str, float]] = {}

        def on_done() -> None:
            done[0] += 1
            if not at_split and done[0] >= args.kill_at * len(claims):
                # figures up to this point on every replica (with --failure: up to the crash)
                at_split.update({i: _scrape(cluster, i) for i in range(args.replicas)})
                figures["split_at_claims_done"] = done[0]
                if kill is not None:
                    cluster.kill_replica(kill)
                    figures["killed"] = {"replica": kill, "at_claims_done": done[0]}

        t0 = time.perf_counter()
        outcomes = asyncio.run(run_claims(claims, cluster.router_url, str(out / "app.jsonl"), args.concurrency,
                                          on_done=on_done))
        figures["wall_s"] = time.perf_counter() - t0
        ending.flush(10.0)
        alive = [i for i in range(args.replicas) if i != kill]
        scraped = {i: _scrape(cluster, i) for i in alive}
        if kill is not None:
            scraped[kill] = at_split[kill]
        after = {i: {k: scraped[i][k] - at_split[i][k] for k in at_split[i]} for i in alive}
        figures["before_after_split"] = {
            i: {"hit_before": _rate(at_split[i]), "hit_after": _rate(after[i]) if i in alive else None,
                "requests_before": at_split[i]["chat_requests"],
                "requests_after": after[i]["chat_requests"] if i in alive else None}
            for i in range(args.replicas)}
        figures["active_after"] = sum(httpx.get(cluster.replica_urls[i] + "/health").json()["active_workflows"]
                                      for i in alive)
    figures["claims_completed"] = sum(1 for o in outcomes if o["verdict"])
    figures.update(_from_traces(out, args.replicas, scraped, kill))
    return figures


def _rate(figures: dict[str, float]) -> float | None:
    prompt = figures["pbkv_prompt_tokens_total"]
    return figures["pbkv_device_hit_tokens_total"] / prompt if prompt else None


def _scrape(cluster: Any, i: int) -> dict[str, float]:
    names = ("pbkv_prompt_tokens_total", "pbkv_device_hit_tokens_total", "pbkv_host_hit_tokens_total")
    got = {n: cluster.metric(i, n) for n in names}
    got["end_posts"] = cluster.metric(i, "pbkv_requests_total", route="workflow_end")
    got["chat_requests"] = cluster.metric(i, "pbkv_requests_total", route="chat")
    return got


def _from_traces(out: Path, replicas: int, scraped: dict[int, dict[str, float]], kill: int | None) -> dict[str, Any]:
    app_steps = Counter((r.workflow_id, r.step) for r in read_trace(out / "app.jsonl")
                        if isinstance(r, InvocationRecord))
    served_by: dict[str, set[int]] = defaultdict(set)
    first_replica: dict[str, int] = {}
    served_steps: Counter = Counter()
    ended: dict[int, set[str]] = defaultdict(set)
    latency, ttft = [], []
    requests = Counter()
    steps: dict[str, list[tuple[int, int, float, str]]] = defaultdict(list)  # workflow -> (step, replica, share, agent)
    for i in range(replicas):
        path = out / "served" / f"replica-{i}.jsonl"
        records = read_trace(path) if path.is_file() and path.stat().st_size else []
        for rec in records:
            if isinstance(rec, InvocationRecord):
                served_by[rec.workflow_id].add(i)
                first_replica.setdefault(rec.workflow_id, i)
                served_steps[(rec.workflow_id, rec.step)] += 1
                requests[i] += 1
                if rec.cached_tokens is not None and rec.prompt_tokens:
                    steps[rec.workflow_id].append((rec.step, i, rec.cached_tokens / rec.prompt_tokens, rec.agent))
                latency.append(rec.t_end - rec.t_start)
                if rec.ttft_s is not None:
                    ttft.append(rec.ttft_s)
            elif isinstance(rec, WorkflowEndRecord):
                ended[i].add(rec.workflow_id)
    pairs = [(w, i) for w, s in served_by.items() for i in s if i != kill]  # ends a live replica must get
    # cached share (device + host) of a moved workflow's first request on its new replica, and of
    # the same agents' later requests in workflows that never moved
    after_move: list[tuple[str, float]] = []
    stayed: dict[str, list[float]] = defaultdict(list)
    for w, seq in steps.items():
        seq.sort()
        home = seq[0][1]
        moved = next((k for k, (_, r, _, _) in enumerate(seq) if r != home), None)
        for k, (_, _, share, agent) in enumerate(seq[1:], start=1):
            if len(served_by[w]) == 1:
                stayed[agent].append(share)
            elif k == moved:
                after_move.append((agent, share))
    same_agents = [sum(stayed[a]) / len(stayed[a]) for a, _ in after_move if stayed[a]]
    prompt = sum(s["pbkv_prompt_tokens_total"] for s in scraped.values())
    device = sum(s["pbkv_device_hit_tokens_total"] for s in scraped.values())
    host = sum(s["pbkv_host_hit_tokens_total"] for s in scraped.values())
    per_replica = {i: {"moved_in": sum(1 for ws in served_by.values() if len(ws) > 1 and i in ws and i != kill),
                       "hit_rate": s["pbkv_device_hit_tokens_total"] / s["pbkv_prompt_tokens_total"]
                       if s["pbkv_prompt_tokens_total"] else 0.0,
                       "workflows": sum(1 for ws in served_by.values() if i in ws),
                       "requests": requests[i]}
                   for i, s in sorted(scraped.items())}
    return {
        "workflows": len(served_by),
        "one_replica_share": sum(len(s) == 1 for s in served_by.values()) / len(served_by) if served_by else 0.0,
        "ends_right": sum(w in ended[i] for w, i in pairs),
        "end_pairs": len(pairs),
        "end_posts": sum(s["end_posts"] for s in scraped.values()),
        "device_hit_rate": device / prompt if prompt else 0.0,
        "device_host_hit_rate": (device + host) / prompt if prompt else 0.0,
        "mean_latency_s": sum(latency) / len(latency) if latency else 0.0,
        "mean_ttft_s": sum(ttft) / len(ttft) if ttft else 0.0,
        "requests_app": sum(app_steps.values()),
        "requests_served": sum(served_steps.values()),
        "lost": sum(1 for k in app_steps if k not in served_steps),
        "duplicated": sum(n - 1 for n in served_steps.values() if n > 1),
        "unknown_served": sum(1 for k in served_steps if k not in app_steps),
        "moved_workflows": sum(len(s) > 1 for s in served_by.values()),
        "killed_replica_workflows": sum(kill in s for s in served_by.values()) if kill is not None else 0,
        "killed_replica_ended": len(ended[kill]) if kill is not None else 0,
        "cached_share_after_move": sum(x for _, x in after_move) / len(after_move) if after_move else None,
        "cached_share_same_agents_stayed": sum(same_agents) / len(same_agents) if same_agents else None,
        "per_replica": per_replica,
    }


def _line(name: str, f: dict[str, Any]) -> str:
    return (f"{name:45s} one replica {100 * f['one_replica_share']:5.1f}%  ends right {f['ends_right']}/{f['end_pairs']} "
            f"(POSTs {f['end_posts']:.0f}, active after {f['active_after']})  device hit {f['device_hit_rate']:.3f} "
            f"(+host {f['device_host_hit_rate']:.3f})  mean latency {f['mean_latency_s']:.2f} s  TTFT "
            f"{f['mean_ttft_s']:.3f} s  requests {f['requests_app']} app / {f['requests_served']} served, lost "
            f"{f['lost']}, duplicated {f['duplicated']}  claims done {f['claims_completed']}  wall {f['wall_s']:.0f} s")


def _failure_report(failed: dict[str, Any], base: dict[str, Any] | None) -> str:
    moved, stayed = failed["cached_share_after_move"], failed["cached_share_same_agents_stayed"]
    pct = lambda x: "-" if x is None else f"{100 * x:.1f}%"  # noqa: E731
    lines = [f"killed replica {failed['killed']['replica']} after {failed['killed']['at_claims_done']} claims; it had "
             f"served {failed['killed_replica_workflows']} workflows, {failed['killed_replica_ended']} of them ended "
             f"before the crash; {failed['moved_workflows']} workflows moved to another replica; the first request "
             f"of a moved workflow on its new replica found {pct(moved)} of its prompt cached (device + host), the "
             f"same agents' requests in workflows that stayed {pct(stayed)}"]
    ref = base["before_after_split"] if base is not None else {}
    for i, f in failed["before_after_split"].items():
        r, b = failed["per_replica"][i], ref.get(i)
        same = (f"; without the failure (same ring): {pct(b['hit_before'])} / {pct(b['hit_after'])}, requests "
                f"{b['requests_before']:.0f} / {b['requests_after']:.0f}") if b else ""
        lines.append(f"  replica {i}: device hit {pct(f['hit_before'])} before the kill, {pct(f['hit_after'])} after; "
                     f"requests {f['requests_before']:.0f} before, {f['requests_after'] or 0:.0f} after; "
                     f"{r['workflows']} workflows, {r['moved_in']} of them moved in{same}")
    if base is not None:
        lines.append(f"  cluster device hit {failed['device_hit_rate']:.3f} (same run without the failure "
                     f"{base['device_hit_rate']:.3f})")
    return "\n".join(lines)


def _pilot_capacity(claims: list, concurrency: int, out: Path) -> int:
    """Device tokens per replica: the examples' capacity rule on a one-replica pilot run's app trace."""
    from examples.common.capacity import device_capacity, working_set
    from examples.hover_langchain.run import run_claims

    pilot = claims[: max(2 * concurrency, 16)]
    flags = ["--policy", BASELINE_POLICY, "--scenario", SCENARIO, "--idle-retire-s", "0"]
    with local_cluster(1, server_flags=flags, log_dir=out / "logs") as cluster:
        os.environ["PBKV_BODY_HINTS"] = "1"
        os.environ["PBKV_REPLICAS"] = cluster.replica_urls[0]
        asyncio.run(run_claims(pilot, cluster.router_url, str(out / "app.jsonl"), concurrency))
    return device_capacity(working_set(read_trace(out / "app.jsonl")), concurrency)


if __name__ == "__main__":
    main()
