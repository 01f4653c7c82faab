"""PBKV inside SGLang's real radix cache on CPU pools: hit rate and bookkeeping cost per policy.

A seeded multi-agent workload (workflows of plan -> code -> test loops; each prompt = app preamble
+ agent role + workflow task + the workflow's growing history) is served through SGLang's own
cache calls as the scheduler makes them (``match_prefix`` with the request, insert after
prefill, eviction when the KV pool is short), closed loop with C workflows in flight, each ending
with the workflow-end signal. Printed per policy: device hit rate (matched prompt tokens / prompt
tokens), evicted tokens, mean wall time per request of match + insert + hint bookkeeping, and per
eviction call (SGLang's eviction walk with ``get_priority``).

    .venv-sglang/bin/python benchmarks/sglang_plugin_overhead.py [--workflows 120] [--kv-tokens 6000]

Needs .venv-sglang (bash scripts/setup_sglang.sh). CPU only; the GPU data path is not involved.
"""

from __future__ import annotations

import argparse
import random
import time
from array import array

from pbkv_contract.hints import BODY_KEY
from pbkv_server.engine.policies import BASELINE_POLICY, policy_info, sglang_policy_names


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

    from pbkv_server.backends.sglang.cpu_cache import build_cpu_cache

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workflows", type=int, default=120)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--kv-tokens", type=int, default=6000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

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
