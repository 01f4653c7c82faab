"""The PBKV plugin in SGLang on CPU: hit rate and overhead per policy, two ways.

1. Cache level (default): a seeded multi-agent workload (workflows of plan -> code -> test
   loops; each prompt = app preamble + agent role + workflow task + the workflow's growing
   history) served through SGLang's own cache calls as the scheduler makes them (``match_prefix``
   with the request, insert after prefill, eviction when the KV pool is short), closed loop with C
   workflows in flight, each ending with the workflow-end signal. Printed per policy: device hit
   rate (matched prompt tokens / prompt tokens), evicted tokens, mean wall time per request of
   match + insert + hint bookkeeping, and per eviction call (SGLang's eviction walk with
   ``get_priority``).

       .venv-sglang/bin/python benchmarks/sglang_plugin_overhead.py [--workflows 120] [--kv-tokens 6000]

2. Live servers (``--live TRACE``): one real SGLang server per policy (tiny random model, CPU
   engine, ``pbkv-server --engine sglang``, all started at once), the trace live-replayed on each
   in turn, the order rotated every round (this machine is noisy, so only same-round ratios
   count). Printed per policy: requests/s and mean request latency (median over rounds), the
   throughput ratio to ``lru`` and the speedup vs ``lru`` (lru latency / the policy's, >1 faster;
   medians of the per-round ratios), the live hit rate (median, min-max over
   rounds: concurrent interleaving varies from run to run), and the simulator's hit rate
   for the same requests at the same capacity and concurrency
   (:mod:`pbkv_server.loadgen.live_compare`, timing measured from the policy's first live round).

       .venv-sglang/bin/python benchmarks/sglang_plugin_overhead.py --live runs/swe_autogen/test.jsonl \
           --max-total-tokens 40241 --concurrency 24 --rounds 3

Needs .venv-sglang (bash scripts/setup_sglang.sh). CPU only; the GPU data path (HiCache loads,
CUDA kernels) is not involved, and a tiny model's latency on a CPU says nothing about a GPU.
"""

from __future__ import annotations

import random
import sys
import time
from array import array
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _cli import OneLineParser  # noqa: E402
from pbkv_contract.hints import BODY_KEY  # noqa: E402
from pbkv_server.engine.policies import (  # noqa: E402
    BASELINE_POLICY, parse_sglang_policy_list, policy_info, sglang_policy_names,
)


def workload(n_workflows: int, seed: int):
    """Yield per workflow: list of (agent, prompt tokens) in step order."""
    rng = random.Random(seed)
    next_id = iter(range(10_000, 10**9))
    fresh = lambda n: [next(next_id) for _ in range(n)]  # noqa: E731  (unique token ids)
    preamble = fresh(256)
    roles = {a: fresh(rng.randint(96, 192)) for a in ("plan", "code", "test")}
    for w in range(n_workflows):
        task = fresh(rng.randint(64, 256))
        rounds = rng.choice((1, 1, 2, 3))
        agents = ["plan"] + ["code", "test"] * rounds
        history: list[int] = []
        steps = []
        for agent in agents:
            steps.append((agent, preamble + roles[agent] + task + history))
            history = history + fresh(rng.randint(48, 160))
        yield f"wf{w}", steps


def run(policy: str, args) -> dict:
    import torch
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams, InsertParams, MatchPrefixParams
    from sglang.srt.mem_cache.radix_cache import RadixKey
    from sglang.srt.sampling.sampling_params import SamplingParams

    from pbkv_server.testing.sglang.cpu_cache import build_cpu_cache

    pbkv = policy != BASELINE_POLICY
    cache, allocator = build_cpu_cache(policy, args.kv_tokens, {"predictor": "markov"} if pbkv else None, pbkv=pbkv)
    flows = list(workload(args.workflows, args.seed))
    active: list[tuple[str, list, int]] = []
    queue = iter(flows)
    prompt = hit = evicted = requests = evict_calls = 0
    t_req = t_evict = 0.0
    rid = 0
    while True:
        while len(active) < args.concurrency:
            nxt = next(queue, None)
            if nxt is None:
                break
            active.append((nxt[0], nxt[1], 0))
        if not active:
            break
        wf, steps, i = active.pop(0)
        agent, tokens = steps[i]
        rid += 1
        hints = {"workflow_id": wf, "agent": agent, "step": i, "app": "bench"}
        req = Req(f"r{rid}", "", array("q", tokens), SamplingParams(max_new_tokens=1, custom_params={BODY_KEY: hints}))
        key = RadixKey(array("q", tokens))
        t0 = time.perf_counter()
        match = cache.match_prefix(MatchPrefixParams(key=key, req=req))
        lock = cache.lock(match.last_device_node)  # the scheduler pins the matched prefix while it runs
        t_req += time.perf_counter() - t0
        need = len(tokens) - match.device_prefix_len
        short = need - allocator.available_size()
        if short > 0:
            t0 = time.perf_counter()
            res = cache.evict(EvictParams(num_tokens=short))
            t_evict += time.perf_counter() - t0
            evict_calls += 1
            evicted += res.num_tokens_evicted
            if allocator.available_size() < need:
                raise SystemExit(f"KV pool of {args.kv_tokens} tokens too small for a {len(tokens)}-token prompt")
        t0 = time.perf_counter()
        value = torch.cat([cache.path_device_indices(match.last_device_node), allocator.alloc(need)])
        result = cache.insert(InsertParams(key=key, value=value, prev_prefix_len=match.device_prefix_len))
        cache.unlock(lock)
        if pbkv:
            cache.observe_request(req, result.last_device_node)
        t_req += time.perf_counter() - t0
        hit += match.device_prefix_len
        prompt += len(tokens)
        requests += 1
        if i + 1 < len(steps):
            active.append((wf, steps, i + 1))
        elif pbkv:
            cache.end_workflow(wf)
    return {"policy": policy, "requests": requests, "hit_rate": hit / prompt, "evicted_tokens": evicted,
            "req_us": 1e6 * t_req / requests, "evict_calls": evict_calls,
            "evict_us": 1e6 * t_evict / evict_calls if evict_calls else 0.0}


def live(args) -> None:
    """Live mode: see the module docstring (2)."""
    import asyncio
    import statistics
    import tempfile
    from pathlib import Path

    from pbkv_contract.trace import read_trace
    from pbkv_server.testing.sglang.cpu_server import CpuServer
    from pbkv_server.testing.sglang.tiny_model import build_tiny_model
    from pbkv_server.loadgen.live_replay import PromptBook, replay
    from pbkv_server.loadgen.live_compare import matched_records, measured_profile, server_settings, simulate_matched

    policies = args.policies
    records = read_trace(args.live)
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="pbkv-live-"))
    model = build_tiny_model(work / "tiny-model")
    servers = {p: CpuServer(p, model, work / f"{p}.log", args.max_total_tokens).launch() for p in policies}
    rounds: list[dict] = []
    try:
        for server in servers.values():
            server.wait_ready()
        settings = {p: server_settings(_server_info(s.url)) for p, s in servers.items()}
        for r in range(args.rounds):
            order = policies[r % len(policies):] + policies[:r % len(policies)]
            results = {}
            for p in order:
                servers[p].flush()
                results[p] = asyncio.run(replay(records, servers[p].url, args.concurrency, "generate",
                                                max_output_tokens=args.max_output_tokens))
                s = results[p]
                print(f"round {r + 1} {p:9} {s.requests / s.wall_s:7.2f} req/s  mean latency {s.latency_mean_s:7.3f} s  "
                      f"hit rate {s.hit_rate:.4f}  errors {s.errors}", flush=True)
            rounds.append(results)
    finally:
        for server in servers.values():
            server.terminate()
        for server in servers.values():
            server.stop()
    matched = matched_records(records, PromptBook(), 0.0, args.max_output_tokens)
    print(f"\n{args.live}: {len(rounds[0][policies[0]].results)} requests, C={args.concurrency}, "
          f"KV pool {args.max_total_tokens} tokens, page size 1, {args.rounds} rounds; logs in {work}")
    # Throughput as a ratio to lru; latency as the speedup vs lru (lru latency / the policy's, >1
    # faster), the convention of every table (pbkv_server/sim/measures.py).
    print(f"{'policy':9} {'req/s':>7} {'x lru':>6} {'latency s':>9} {'speedup':>7} {'live hit':>8} {'(min-max)':>13} "
          f"{'sim hit':>8} {'sim/live':>8}")
    med = statistics.median
    for p in policies:
        rps = [rd[p].requests / rd[p].wall_s for rd in rounds]
        lat = [rd[p].latency_mean_s for rd in rounds]
        base = BASELINE_POLICY
        rps_x = med(rd[p].requests / rd[p].wall_s / (rd[base].requests / rd[base].wall_s) for rd in rounds) \
            if base in policies else float("nan")
        lat_x = med(rd[base].latency_mean_s / rd[p].latency_mean_s for rd in rounds) if base in policies \
            else float("nan")
        hits = [rd[p].hit_rate for rd in rounds]
        live_hit = med(hits)
        sim = simulate_matched(matched, settings[p], measured_profile(rounds[0][p], args.max_total_tokens),
                               args.concurrency)
        print(f"{p:9} {med(rps):7.2f} {rps_x:6.3f} {med(lat):9.3f} {lat_x:6.3f}x {live_hit:8.4f} "
              f"{f'({min(hits):.4f}-{max(hits):.4f})':>13} {sim['hit_rate']:8.4f} "
              f"{sim['hit_rate'] / live_hit if live_hit else float('nan'):8.3f}", flush=True)


def _server_info(url: str) -> dict:
    import httpx

    return httpx.get(f"{url}/server_info", timeout=30).json()


def main(argv: list[str] | None = None) -> None:
    parser = OneLineParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workflows", type=int, default=120)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--kv-tokens", type=int, default=6000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--live", metavar="TRACE", help="live mode: replay this v1 trace on real servers")
    parser.add_argument("--max-total-tokens", type=int, default=40000, help="live: KV pool of each server, tokens")
    parser.add_argument("--rounds", type=int, default=3, help="live: replays per policy (order rotated)")
    parser.add_argument("--policies", default="lru,pbkv-lae,pbkv-he,pbkv", help="live: comma-separated")
    parser.add_argument("--max-output-tokens", type=int, default=None, help="live: cap each output (both sides)")
    parser.add_argument("--work-dir", default=None, help="live: model and logs go here (default: a temp dir)")
    args = parser.parse_args(argv)
    try:  # the plugin's names and SGLang's lru, refused before a model is built or a server starts
        args.policies = parse_sglang_policy_list(args.policies)
    except ValueError as exc:
        parser.error(str(exc))
    if args.live:
        live(args)
        return

    from sglang.srt.plugins import load_plugins
    from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler

    load_plugins()
    set_global_server_args_for_scheduler(ServerArgs(model_path="dummy", page_size=1))
    print(f"workflows={args.workflows} concurrency={args.concurrency} kv_tokens={args.kv_tokens} seed={args.seed}")
    print(f"{'policy':10} {'requests':>8} {'hit rate':>9} {'evicted':>9} {'us/request':>11} {'evict calls':>11} "
          f"{'us/evict':>9}")
    # the baseline and every plugin policy that needs no host tier (prefetch needs a GPU)
    plugin = [n for n, engine_name in sglang_policy_names().items() if not policy_info(engine_name).prefetches]
    for policy in (BASELINE_POLICY, *plugin):
        r = run(policy, args)
        print(f"{r['policy']:10} {r['requests']:8d} {r['hit_rate']:9.3f} {r['evicted_tokens']:9d} {r['req_us']:11.1f} "
              f"{r['evict_calls']:11d} {r['evict_us']:9.1f}")


if __name__ == "__main__":
    main()
