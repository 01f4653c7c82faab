"""Live speedup against simulated speedup, paired rounds on real SGLang servers (issue 34, item 4).

    .venv-sglang/bin/python benchmarks/live_paired.py [--trace T.jsonl | --workflows 12] \
        [--policies lru,pbkv,pbkv-he] [--rounds 3] [--concurrency 4] [--max-total-tokens 6000] \
        [--probe-repeats 5] [--side-by-side] [--json out.json] [--work-dir DIR] [--docs PAGE]

1. One real SGLang server per policy (tiny random model, CPU engine, ``pbkv-server --engine
   sglang``, :class:`pbkv_server.testing.sglang.cpu_server.CpuServer`), all started at once.
2. Probes on the baseline's server while every server is idle (``pbkv-bench probe-profile``,
   :mod:`pbkv_server.loadgen.probe`): the simulator's profile comes from them, not from the
   replays it is compared with, with the probed fixed cost per request and cost of cached
   tokens (:mod:`pbkv_server.loadgen.probe_fit`).
3. ``--rounds`` paired rounds: every server's cache flushed, then the trace live-replayed on one
   server after another (the order turned by one each round), so that the servers do not take
   cores from each other; per server and round: mean TTFT, mean workflow latency, wall time, and
   the CPU seconds its process group used (:func:`pbkv_server.loadgen.paired.group_cpu_seconds`).
   With ``--side-by-side`` each round replays on all servers at once instead (so that whatever
   else loads the machine loads them alike; on a two-core machine the servers then take cores
   from each other and the speedups spread two to three times as wide). ``--one-at-a-time``,
   the default, is still accepted.
4. The same requests in the simulator (:func:`pbkv_server.loadgen.live_compare.simulate_matched`)
   under the probed profile, per policy; and again without the per-request and cached-token
   terms, to show what leaving those engine costs out does to the simulated speedup.

Printed per policy: the speedup over the baseline (baseline figure / the policy's, >1 faster)
of live TTFT, live workflow latency and live server CPU, as median (min-max) over the rounds,
next to the simulator's TTFT and workflow-latency speedups, and whether the live workflow
speedup is within 10% of the simulated one. The default trace is prompt-heavy with 2-token
outputs (:func:`pbkv_server.loadgen.paired.prompt_heavy_records`) so that what a policy saves
exceeds the noise. A tiny model on a CPU says nothing about a GPU's times; what is compared is
whether the simulator predicts the *ratio* between policies on the engine it is given.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _cli import OneLineParser  # noqa: E402
from pbkv_server.engine.policies import parse_sglang_policy_list  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line; one at a time is the default mode, ``--side-by-side`` the other."""
    parser = OneLineParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=None, help="v1 trace (default: a prompt-heavy one)")
    parser.add_argument("--workflows", type=int, default=12, help="workflows of the default trace")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--policies", default="lru,pbkv,pbkv-he", help="comma-separated; the first is the baseline")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--max-total-tokens", type=int, default=6000, help="KV pool of each server, tokens")
    parser.add_argument("--sizes", default="64,256,512,1024,2048", help="probe: cold and cached prompt sizes")
    parser.add_argument("--probe-repeats", type=int, default=5,
                        help="probe: repeats per size, the median kept (after 2 discarded warm-up passes)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--side-by-side", action="store_true",
                      help="replay on all servers at once instead of one at a time")
    mode.add_argument("--one-at-a-time", action="store_true",
                      help="replay on one server at a time, the order turned each round (the default)")
    parser.add_argument("--json", type=Path, default=None, help="write every round and the simulated figures here")
    parser.add_argument("--work-dir", type=Path, default=None, help="model and server logs (default: a temp dir)")
    parser.add_argument("--docs", type=Path, default=None,
                        help=f"rewrite the {BEGIN} ... {END} block of this page with the result table")
    parser.add_argument("--render", type=Path, default=None, metavar="JSON",
                        help="run nothing: write --docs from a --json file of an earlier run")
    args = parser.parse_args(argv)
    try:  # the plugin's names and SGLang's lru; a typo must not cost a server start
        args.policies = parse_sglang_policy_list(args.policies)
    except ValueError as exc:
        parser.error(str(exc))
    if args.render is not None and args.docs is None:
        parser.error("--render needs --docs")
    if args.render is None and args.rounds < 3:
        parser.error("--rounds: at least 3 (issue 34: the spread needs three paired rounds)")
    return args


def main() -> None:
    args = parse_args()
    if args.render is not None:
        write_docs(args.docs, json.loads(args.render.read_text()))
        return

    from pbkv_contract.trace import read_trace
    from pbkv_server.loadgen.live_compare import matched_records, server_settings, simulate_matched
    from pbkv_server.loadgen.live_replay import PromptBook, replay
    from pbkv_server.loadgen.paired import group_cpu_seconds, prompt_heavy_records, speedups
    from pbkv_server.loadgen.probe import run_probes
    from pbkv_server.loadgen.probe_fit import fit_probes
    from pbkv_server.testing.sglang.cpu_server import CpuServer
    from pbkv_server.testing.sglang.tiny_model import build_tiny_model

    import httpx

    policies = args.policies
    base = policies[0]
    records = read_trace(args.trace) if args.trace else prompt_heavy_records(args.workflows, args.seed)
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="pbkv-paired-"))
    work.mkdir(parents=True, exist_ok=True)
    model = build_tiny_model(work / "tiny-model")
    servers = {p: CpuServer(p, model, work / f"{p}.log", args.max_total_tokens).launch() for p in policies}
    rounds = []
    try:
        for s in servers.values():
            s.wait_ready()
        settings = {p: server_settings(httpx.get(f"{s.url}/server_info", timeout=30).json()) for p, s in servers.items()}
        sizes = [int(v) for v in args.sizes.split(",")]
        prefill, decode = asyncio.run(run_probes(servers[base].url, sizes, args.probe_repeats, [1, 4], [64, 512], 16))
        fit = fit_probes(prefill, decode)
        profile = fit.profile(args.max_total_tokens, source=f"probes of the {base} server")
        print(f"probed profile: fixed {1e3 * fit.fixed_s:.1f} ms, {fit.prefill_tokens_per_s:,.0f} tok/s, attention "
              f"{fit.attn_pair_s:.3g} s/pair, cached token {1e6 * fit.cached_token_s:.2f} us + {fit.cached_pair_s:.3g} "
              f"s/cached pair (worst error: cold {fit.cold_rel_err:.0%}, cached {fit.cached_rel_err:.0%}, held-out mixed "
              f"{fit.held_out_rel_err:.0%}), decode {1e3 * fit.decode_base_s:.2f} ms + {1e3 * fit.decode_per_seq_s:.3f} "
              f"ms/seq + {1e6 * fit.decode_per_token_s:.3f} us/token; cached prompt costs "
              f"{', '.join(f'{s:.0%}' for s in fit.cached_share)} of cold (raw TTFT ratios "
              f"{', '.join(f'{r:.2f}' for r in fit.cached_ratio)})", flush=True)
        groups = {p: os.getpgid(s.proc.pid) for p, s in servers.items()}
        for r in range(args.rounds):
            for s in servers.values():
                s.flush()
            cpu0 = {p: group_cpu_seconds(g) for p, g in groups.items()}

            async def side_by_side():
                return await asyncio.gather(*(replay(records, servers[p].url, args.concurrency, "generate")
                                              for p in policies))

            if not args.side_by_side:  # each server alone, the order turned by one policy per round
                order = policies[r % len(policies):] + policies[:r % len(policies)]
                results, cpu = {}, {}
                for p in order:
                    c0 = group_cpu_seconds(groups[p])
                    results[p] = asyncio.run(replay(records, servers[p].url, args.concurrency, "generate"))
                    cpu[p] = group_cpu_seconds(groups[p]) - c0
                results = {p: results[p] for p in policies}
            else:
                results = dict(zip(policies, asyncio.run(side_by_side())))
                cpu = {p: group_cpu_seconds(g) - cpu0[p] for p, g in groups.items()}
            row = {p: {"ttft_s": res.ttft_mean_s, "workflow_s": res.workflow_latency_mean_s, "wall_s": res.wall_s,
                       "cpu_s": cpu[p], "hit_rate": res.hit_rate, "errors": res.errors} for p, res in results.items()}
            rounds.append(row)
            print(f"round {r + 1}: " + "; ".join(f"{p} TTFT {1e3 * v['ttft_s']:.0f} ms, workflow {v['workflow_s']:.2f} s, "
                                                 f"CPU {v['cpu_s']:.1f} s, hit {v['hit_rate']:.3f}, errors {v['errors']}"
                                                 for p, v in row.items()), flush=True)
    finally:
        for s in servers.values():
            s.terminate()
        for s in servers.values():
            s.stop()
    matched = matched_records(records, PromptBook(), 0.0, None)
    sim = {p: simulate_matched(matched, settings[p], profile, args.concurrency) for p in policies}
    # the same profile without the probed per-request and cached-token terms: what the model
    # credits a policy with when it leaves those engine costs out
    without = {"request": replace(profile, prefill_request_s=0.0),
               "cached": replace(profile, cached_token_s=0.0, cached_pair_s=0.0),
               "both": replace(profile, prefill_request_s=0.0, cached_token_s=0.0, cached_pair_s=0.0)}
    left_out = {k: {p: simulate_matched(matched, settings[p], prof, args.concurrency)["mean_latency_s"] for p in policies}
                for k, prof in without.items()}
    live = {k: speedups([{p: rd[p][k] for p in policies} for rd in rounds], base) for k in ("ttft_s", "workflow_s", "cpu_s")}
    n_inv = sum(1 for r in matched if type(r).__name__ == "InvocationRecord")
    print(f"\n{n_inv} requests, C={args.concurrency}, KV pool {args.max_total_tokens} tokens, {args.rounds} paired rounds; "
          f"speedup over {base} = {base}'s figure / the policy's, median (min-max) over rounds; logs in {work}")
    print(f"{'policy':9} {'live TTFT':>22} {'live workflow':>22} {'live server CPU':>22} {'sim TTFT':>9} "
          f"{'sim workflow':>12} {'live/sim':>8}  within 10%")
    out = {}
    for p in policies:
        s_ttft = sim[base]["mean_ttft_s"] / sim[p]["mean_ttft_s"]
        s_wf = sim[base]["mean_latency_s"] / sim[p]["mean_latency_s"]
        ratio = live["workflow_s"][p].median / s_wf
        print(f"{p:9} {str(live['ttft_s'][p]):>22} {str(live['workflow_s'][p]):>22} {str(live['cpu_s'][p]):>22} "
              f"{s_ttft:9.3f} {s_wf:12.3f} {ratio:8.3f}  {'yes' if abs(ratio - 1) <= 0.10 else 'no'}")
        out[p] = {"live": {k: vars(v[p]) for k, v in live.items()}, "sim_ttft_speedup": s_ttft,
                  "sim_workflow_speedup": s_wf, "sim_hit_rate": sim[p]["hit_rate"],
                  "sim_workflow_speedup_plain": left_out["both"][base] / left_out["both"][p],
                  "sim_workflow_speedup_without": {k: v[base] / v[p] for k, v in left_out.items()},
                  "live_hit_rate": statistics.median(rd[p]["hit_rate"] for rd in rounds)}
    result = {"rounds": rounds, "fit": vars(fit), "probes": [vars(p) for p in prefill] + [vars(d) for d in decode],
              "policies": out, "concurrency": args.concurrency, "settings": {p: vars(v) for p, v in settings.items()},
              "max_total_tokens": args.max_total_tokens, "requests": n_inv, "base": base,
              "mode": "side by side" if args.side_by_side else "one at a time",
              "flags": " ".join([f"--rounds {args.rounds}", f"--max-total-tokens {args.max_total_tokens}",
                                 f"--probe-repeats {args.probe_repeats}", *(["--side-by-side"] if args.side_by_side
                                                                           else []),
                                 *([f"--trace {args.trace}"] if args.trace else [])]),
              "trace": str(args.trace) if args.trace else f"prompt-heavy, {args.workflows} workflows, seed {args.seed}"}
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1))
    if args.docs is not None:
        write_docs(args.docs, result)


BEGIN, END = "<!-- live-paired:begin -->", "<!-- live-paired:end -->"


def render(result: dict) -> str:
    """The result as a Markdown table: per policy the live speedups (median, min-max) and the
    simulated ones, and the live workflow speedup over the simulated one."""
    base = result["base"]
    rounds = result["rounds"]
    fit = result["fit"]
    lines = ["| policy | live TTFT | live workflow latency | live server CPU | sim TTFT | sim workflow latency | "
             "live / sim (workflow) | sim workflow, no fixed or cached-token cost | live hit rate | sim hit rate |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]

    def spread(v: dict) -> str:
        return f"{v['median']:.3f} ({v['low']:.3f}-{v['high']:.3f})"

    for p, v in result["policies"].items():
        live = v["live"]
        plain = v.get("sim_workflow_speedup_plain")
        lines.append(f"| {p} | {spread(live['ttft_s'])} | {spread(live['workflow_s'])} | {spread(live['cpu_s'])} | "
                     f"{v['sim_ttft_speedup']:.3f} | {v['sim_workflow_speedup']:.3f} | "
                     f"{live['workflow_s']['median'] / v['sim_workflow_speedup']:.3f} | "
                     f"{'-' if plain is None else f'{plain:.3f}'} | {v['live_hit_rate']:.3f} | {v['sim_hit_rate']:.3f} |")
    ratios = ", ".join(f"{r:.2f}" for r in fit.get("cached_ratio", ()))
    mode = result.get("mode", "side by side")  # results written before the mode was recorded ran side by side
    flags = result.get("flags")
    if flags is not None and mode == "side by side" and "--side-by-side" not in flags.split():
        flags += " --side-by-side"  # side by side was the default when it was written; now it takes the flag
    parts = [(p, v["sim_workflow_speedup_without"]) for p, v in result["policies"].items()
             if p != base and "sim_workflow_speedup_without" in v]
    left_out = ("" if not parts else " Simulated workflow speedup without the per-request cost / without the "
                "cached-token cost / without both: " + "; ".join(
                    f"{p} {w['request']:.3f} / {w['cached']:.3f} / {w['both']:.3f}" for p, w in parts) + ".")
    lines += ["", f"Speedup over {base} = {base}'s figure / the policy's (>1 faster), median (min-max) over "
                  f"{len(rounds)} paired rounds; trace: {result.get('trace', '?')}, {result.get('requests', '?')} "
                  f"requests, C = {result['concurrency']}, KV pool {result['max_total_tokens']} tokens. Probed profile "
                  f"(idle {base} server): fixed {1e3 * fit['fixed_s']:.1f} ms per request, "
                  f"{fit['prefill_tokens_per_s']:,.0f} tok/s, attention {fit['attn_pair_s']:.3g} s per pair, a cached "
                  f"token {1e6 * fit.get('cached_token_s', 0):.2f} us + {fit.get('cached_pair_s', 0):.3g} s per pair of "
                  f"cached tokens (worst error of the fit: cold probes {fit['cold_rel_err']:.0%}, cached "
                  f"{fit.get('cached_rel_err', 0):.0%}, held-out mixed probes {fit.get('held_out_rel_err', 0):.0%}), decode "
                  f"{1e3 * fit['decode_base_s']:.2f} ms + {1e3 * fit['decode_per_seq_s']:.3f} ms per sequence + "
                  f"{1e6 * fit['decode_per_token_s']:.3f} us per token of context; cached/cold TTFT of the same prompt: "
                  f"{ratios or '-'}.{left_out} Written by `.venv-sglang/bin/python benchmarks/live_paired.py "
                  f"{flags + ' ' if flags is not None else ''}--docs PAGE` "
                  f"(tiny model, CPU engine, the servers {mode} on a shared machine)."]
    return "\n".join(lines)


def write_docs(page: Path, result: dict) -> None:
    """Rewrite ``page``'s block with :func:`render` of ``result``.

    Raises:
        SystemExit: the page has not exactly one block (one line saying so).
    """
    text = page.read_text(encoding="utf-8")
    if text.count(BEGIN) != 1 or text.count(END) != 1:
        raise SystemExit(f"--docs {page}: needs one {BEGIN} ... {END} block")
    head, rest = text.split(BEGIN)
    page.write_text(f"{head}{BEGIN}\n{render(result)}\n{END}{rest.split(END, 1)[1]}", encoding="utf-8")


if __name__ == "__main__":
    main()
