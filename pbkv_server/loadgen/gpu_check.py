"""What the GPU checks decide and print (``scripts/gpu_check.sh``, ``scripts/gpu_check_vllm.sh``).

The shell scripts start the servers; this module holds the parts that must be right on a GPU
machine we hold for minutes, so that they are tested here on the CPU:

- ``active sglang|vllm URL``: is the PBKV plugin really serving? Exits 3 with one line per
  problem when not (issue 34 item 6: a check that ran LRU twice must not pass as a comparison).
  SGLang: ``/server_info`` names the PBKV radix-cache backend and a PBKV eviction policy, and
  ``GET /pbkv/v1/kv_hints`` answers with the ``X-PBKV-KV-Hints`` header (routes the plugin adds).
  vLLM: the workflow-end route answers 204 and the KV-hint header is there.
- ``sim-vllm``: the simulated side for a vLLM run (vLLM has no ``/server_info`` that
  ``pbkv-bench live-compare`` reads): the live replay's requests (:func:`~pbkv_server.loadgen.
  live_compare.matched_records`) in the simulator at the server's block pool, written next to the
  live summary in ``live-compare``'s JSON form (``{"live": ..., "sim": ...}``).
- ``compare OUT BASE POLICY...``: reads ``OUT/compare_NAME.json`` (``live-compare --json``) per
  run and prints, per run, live and simulated hit rate and the speedups over ``BASE`` of mean
  TTFT and mean workflow latency, live against simulated.

    python -m pbkv_server.loadgen.gpu_check active sglang http://127.0.0.1:31000
    python -m pbkv_server.loadgen.gpu_check compare out/gpu_check lru pbkv
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

import httpx

from pbkv_contract.hints import END_PATH
from pbkv_contract.kv_hint_caps import HEADER_KV_HINTS, KV_HINTS_PATH
from pbkv_server.backends.sglang.settings import BACKEND_NAME  # imports no SGLang

__all__ = ["sglang_plugin_problems", "vllm_plugin_problems", "compare_rows", "main"]

#: Exit status when the plugin is not active.
NOT_ACTIVE = 3


def sglang_plugin_problems(url: str, client: httpx.Client | None = None) -> list[str]:
    """Why the SGLang server at ``url`` does not serve with the PBKV plugin (empty: it does)."""
    client = client or httpx.Client(timeout=30)
    problems = []
    try:
        info = client.get(url.rstrip("/") + "/server_info").json()
    except (httpx.HTTPError, ValueError) as exc:
        return [f"GET /server_info failed: {exc}"]
    backend = info.get("radix_cache_backend")
    if backend != BACKEND_NAME:  # the --radix-cache-backend the plugin registers
        problems.append(f"/server_info radix_cache_backend is {backend!r}, not {BACKEND_NAME!r}")
    from pbkv_server.engine.policies import sglang_policy_names

    policy = info.get("radix_eviction_policy")
    if policy not in sglang_policy_names():
        problems.append(f"/server_info radix_eviction_policy is {policy!r}, not a PBKV policy "
                        f"({', '.join(sorted(sglang_policy_names()))})")
    problems += _kv_hints_problems(client, url)
    return problems


def vllm_plugin_problems(url: str, client: httpx.Client | None = None) -> list[str]:
    """Why the vLLM server at ``url`` does not serve with the PBKV plugin (empty: it does)."""
    client = client or httpx.Client(timeout=30)
    try:
        code = client.post(url.rstrip("/") + END_PATH.format(workflow_id="gpu-check")).status_code
    except httpx.HTTPError as exc:
        return [f"POST {END_PATH} failed: {exc}"]
    problems = [] if code == 204 else [f"POST {END_PATH} answered {code}, not 204"]
    return problems + _kv_hints_problems(client, url)


def _kv_hints_problems(client: httpx.Client, url: str) -> list[str]:
    try:
        response = client.get(url.rstrip("/") + KV_HINTS_PATH)
    except httpx.HTTPError as exc:
        return [f"GET {KV_HINTS_PATH} failed: {exc}"]
    if response.status_code != 200:
        return [f"GET {KV_HINTS_PATH} answered {response.status_code}, not 200"]
    if HEADER_KV_HINTS not in response.headers:
        return [f"GET {KV_HINTS_PATH} has no {HEADER_KV_HINTS} header"]
    return []


def compare_rows(runs: dict[str, dict], base: str) -> list[dict]:
    """Per run of ``runs`` (name -> ``live-compare --json`` payload): live and simulated hit rate,
    and the speedups over run ``base`` (base figure / the run's, >1 faster) of mean TTFT and mean
    workflow latency, live and simulated, with live / simulated of the workflow speedup.

    Raises:
        KeyError: ``base`` is not a run, or a payload lacks a figure.
    """
    b = runs[base]
    rows = []
    for name, r in runs.items():
        live_ttft = b["live"]["ttft_mean_s"] / r["live"]["ttft_mean_s"]
        live_wf = b["live"]["workflow_latency_mean_s"] / r["live"]["workflow_latency_mean_s"]
        sim_ttft = b["sim"]["mean_ttft_s"] / r["sim"]["mean_ttft_s"]
        sim_wf = b["sim"]["mean_latency_s"] / r["sim"]["mean_latency_s"]
        rows.append({"run": name, "live_hit_rate": r["live"]["hit_rate"], "sim_hit_rate": r["sim"]["hit_rate"],
                     "live_ttft_speedup": live_ttft, "sim_ttft_speedup": sim_ttft, "live_workflow_speedup": live_wf,
                     "sim_workflow_speedup": sim_wf, "live_over_sim": live_wf / sim_wf})
    return rows


def _sim_vllm(args: argparse.Namespace) -> int:
    from pbkv_contract.trace import read_trace
    from pbkv_server.hardware.profiles import get_profile
    from pbkv_server.loadgen.live_compare import ServerSettings, matched_records, simulate_matched
    from pbkv_server.loadgen.live_replay import PromptBook

    live = json.loads(args.live.read_text())
    matched = matched_records(read_trace(args.trace), PromptBook(), 0.0, args.max_output_tokens)
    settings = ServerSettings(policy=args.policy, sim_policy=args.policy, device_tokens=args.device_tokens,
                              page_size=args.page_size)
    from pbkv_server.sim.driver import SimulationError

    try:
        sim = simulate_matched(matched, settings, get_profile(args.profile), args.concurrency)
    except (SimulationError, KeyError, ValueError) as exc:  # a request larger than the pool, an unknown profile
        print(f"sim-vllm: {exc}", file=sys.stderr)
        return 2
    payload = {"settings": vars(settings), "concurrency": args.concurrency, "profile": args.profile,
               "live": {k: v for k, v in live.items() if k != "results"},
               "sim": {k: v for k, v in sim.items() if k != "timeline"}}
    args.out.write_text(json.dumps(payload, indent=1, default=str))
    print(f"{args.policy}: simulated hit rate {sim['hit_rate']:.3f} (live {live['hit_rate']:.3f}) -> {args.out}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pbkv_server.loadgen.gpu_check", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    active = sub.add_parser("active", help="exit 3 unless the PBKV plugin serves at URL")
    active.add_argument("engine", choices=("sglang", "vllm"))
    active.add_argument("url")
    cmp_ = sub.add_parser("compare", help="live vs simulated speedups from OUT/compare_NAME.json")
    cmp_.add_argument("out", type=Path)
    cmp_.add_argument("base")
    cmp_.add_argument("runs", nargs="+")
    sim = sub.add_parser("sim-vllm", help="simulate a vLLM run's requests; write live-compare's JSON form")
    sim.add_argument("trace", type=Path)
    sim.add_argument("--live", type=Path, required=True, help="the run's live-replay --json")
    sim.add_argument("--policy", required=True, help="engine-core policy the server ran")
    sim.add_argument("--device-tokens", type=int, required=True, help="GPU blocks x block size")
    sim.add_argument("--page-size", type=int, default=16, help="vLLM block size, tokens")
    sim.add_argument("--concurrency", type=int, required=True)
    sim.add_argument("--max-output-tokens", type=int, default=None)
    sim.add_argument("--profile", required=True, help="simulator timing (pbkv-bench profiles)")
    sim.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.cmd == "active":
        check = sglang_plugin_problems if args.engine == "sglang" else vllm_plugin_problems
        problems = check(args.url)
        for p in problems:
            print(f"PBKV plugin NOT active at {args.url}: {p}", file=sys.stderr)
        if problems:
            return NOT_ACTIVE
        print(f"PBKV plugin active at {args.url} ({args.engine})")
        return 0
    if args.cmd == "sim-vllm":
        return _sim_vllm(args)
    runs = {name: json.loads((args.out / f"compare_{name}.json").read_text()) for name in [args.base, *args.runs]}
    print(f"{'run':14} {'hit live':>8} {'hit sim':>8} {'TTFT live':>10} {'TTFT sim':>9} {'wf live':>8} {'wf sim':>7} "
          f"{'live/sim':>8}   (speedups over {args.base}, >1 faster)")
    for row in compare_rows(runs, args.base):
        print(f"{row['run']:14} {row['live_hit_rate']:8.3f} {row['sim_hit_rate']:8.3f} {row['live_ttft_speedup']:10.3f} "
              f"{row['sim_ttft_speedup']:9.3f} {row['live_workflow_speedup']:8.3f} {row['sim_workflow_speedup']:7.3f} "
              f"{row['live_over_sim']:8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
