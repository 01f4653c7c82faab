"""Simulator speed: 1,000 synthetic workflows (~10 invocations each) replayed under every policy.

Target: at most 60 s for the replays of every online policy together on the 2-core CI machine.
The offline policies run too and count in a second total: the reference (``opt``, an exact bound
that replays the trace several times) is slower by design. Prints the
seconds of trace generation, of each policy's replay and the replay total, in wall-clock time and
in this process's CPU time (the fair figure on a shared machine, where other processes' load
stretches wall time), with the load average.

    .venv/bin/python benchmarks/sim_speed.py [--workflows 1000] [--concurrency 32]

With ``--trace`` it replays a trace file instead (a real one, ``pbkv-sdk import kv-cache-tester``
say) under ``--policies`` and prints, per policy, CPU seconds and invocations per CPU second (an
offline policy's figure covers all of its order runs), and each policy's CPU over the first's:

    .venv/bin/python benchmarks/sim_speed.py --trace cc40.jsonl --policies lru,opt \\
        --profile a6000x8-qwen3-32b-tp8 --host-ratio 1 --predictor markov

``--repeat N`` replays each policy N times and reports its least CPU (the figure least stretched
by other processes). ``--order-runs 3,8`` replays ``opt`` once per count (default: ``pbkv-bench
advise``'s ``ADVISE_ORDER_RUNS``), each a row of its own (``order_runs_limit``). ``--json FILE``
adds the setting's figures (and, for ``opt``, the mean latency after each order run) to FILE
under a key naming the trace and setting; ``scripts/make_replay_cost_docs.py`` tables
docs/replay-cost.md from it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from pbkv_contract.settings import list_items
from pbkv_server.engine.policies import REPLAY, available_policies, parse_policy_list, policy_info
from pbkv_server.predictors import make_predictor
from pbkv_server.predictors.factory import check_predictor_spec
from pbkv_server.hardware.profiles import get_profile
from pbkv_server.sim.advise import ADVISE_ORDER_RUNS
from pbkv_server.sim.simulator import MAX_CONCURRENCY, ORDER_RUNS_LIMIT, ReplayConfig, ReplayOptions, load_workload, simulate
from pbkv_server.sim.synth.agents import generate

from _cli import OneLineParser, check_output, git_commit, run_script, write_json


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; bad input raises (``run_script`` prints it as one line)."""
    parser = OneLineParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workflows", type=int, default=None,
                        help="synthetic workflows (default 1000; not with --trace, which replays its own)")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--profile", default="h100-qwen2.5-32b")
    parser.add_argument("--device-tokens", type=int, default=None,
                        help="device KV tokens (default: 500,000; with --trace, the profile's)")
    parser.add_argument("--predictor", default="oracle")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--trace", default=None, help="replay this trace file instead of a synthetic one")
    parser.add_argument("--policies", default=None, help="with --trace: comma-separated policies (default lru,opt)")
    parser.add_argument("--host-ratio", type=float, default=None,
                        help="with --trace: host tier = RATIO x device (default: the profile's host size)")
    parser.add_argument("--order-runs", default=None,
                        help=f"with --trace: comma-separated most order runs of opt, one replay each (default "
                             f"{ADVISE_ORDER_RUNS}, pbkv-bench advise's; 1..{ORDER_RUNS_LIMIT})")
    parser.add_argument("--repeat", type=int, default=1,
                        help="with --trace: replay each policy this many times and report its least CPU (the "
                             "figure least stretched by other processes on a shared machine; default 1)")
    parser.add_argument("--json", type=Path, default=None, help="with --trace: add this setting's figures to this JSON file "
                        "(scripts/make_replay_cost_docs.py tables it)")
    args = parser.parse_args(argv)
    # every option that can be refused is refused before the trace is read or generated
    if not 1 <= args.concurrency <= MAX_CONCURRENCY:  # simulate's bound, in the option's name
        raise ValueError(f"--concurrency must be in 1..{MAX_CONCURRENCY:,}, got {args.concurrency:,}")
    check_predictor_spec(args.predictor)
    profile = get_profile(args.profile)  # an unknown name raises
    if args.repeat < 1:
        raise ValueError(f"--repeat must be >= 1, got {args.repeat}")
    if args.device_tokens is not None and args.device_tokens < 1:
        raise ValueError(f"--device-tokens must be >= 1, got {args.device_tokens}")
    if args.trace is not None and args.workflows is not None:
        raise ValueError("--workflows sizes the synthetic workload; with --trace the trace's own workflows are replayed")
    if args.workflows is None:
        args.workflows = 1000
    elif args.workflows < 1:
        raise ValueError(f"--workflows must be >= 1, got {args.workflows}")
    if args.trace is None:
        if (args.policies is not None or args.json is not None or args.host_ratio is not None
                or args.order_runs is not None or args.repeat != 1):
            parser.error("--policies, --host-ratio, --order-runs, --repeat and --json need --trace")
    else:
        check_output(parser, args.json, [args.trace], json_doc=is_speed_result)
        replay_trace(args, profile)
        return 0

    t0 = time.perf_counter()
    records = list(generate("codegen", args.workflows, seed=args.seed))
    workload = load_workload(records)
    t_gen = time.perf_counter() - t0
    print(f"synth + load: {args.workflows} workflows, {workload.invocations} invocations "
          f"({workload.invocations / workload.workflow_count:.1f}/workflow) in {t_gen:.1f} s")
    total = total_cpu = core = core_cpu = 0.0
    for policy in available_policies(REPLAY):
        predictor = make_predictor(args.predictor, 3, records)
        t0, c0 = time.perf_counter(), time.process_time()
        result = simulate(workload, ReplayConfig(policy, profile, device_tokens=args.device_tokens or 500_000),
                          ReplayOptions(concurrency=args.concurrency, predictor=predictor))
        dt, dc = time.perf_counter() - t0, time.process_time() - c0
        total += dt
        total_cpu += dc
        if not policy_info(policy).offline:
            core, core_cpu = core + dt, core_cpu + dc
        print(f"{policy:16s} {dt:6.1f} s wall {dc:6.1f} s CPU   hit rate {result.summary['hit_rate']:.3f}   "
              f"evictions {result.summary['evictions']}")
    names = available_policies(REPLAY)
    online = sum(not policy_info(p).offline for p in names)
    print(f"replay total, {online} online policies: {core:.1f} s wall, {core_cpu:.1f} s CPU "
          f"(target <= 60 s); with the offline ones, {len(names)} policies: {total:.1f} s wall, {total_cpu:.1f} s CPU; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    return 0


def replay_trace(args: argparse.Namespace, profile: Any) -> None:
    """``--trace``: CPU seconds and invocations per CPU second of each of ``--policies``."""
    from pbkv_contract.trace import read_trace
    from pbkv_server.hardware.profiles import host_tokens_for

    # everything that can be refused is refused before the first replay (minutes of CPU each)
    # an unknown name, an empty item or a repeat raises, as in pbkv-bench replay
    policies = parse_policy_list("lru,opt" if args.policies is None else args.policies, REPLAY, "--policies")
    counts = order_run_counts(args.order_runs)
    if args.order_runs is not None and not any(policy_info(p).iterates_order for p in policies):
        raise ValueError("--order-runs: no policy of --policies iterates its order")
    data = _read_json(args.json) if args.json is not None else {}
    device = args.device_tokens if args.device_tokens is not None else profile.device_kv_tokens
    if device < 1:
        raise ValueError(f"--device-tokens must be >= 1, got {device}")
    host = host_tokens_for(profile, device, None, args.host_ratio)
    records = read_trace(args.trace)
    workload = load_workload(records)
    make_predictor(args.predictor, 3, records)  # a model file for another app raises
    n = workload.invocations
    print(f"{args.trace}: {workload.workflow_count} workflows, {n} invocations; C={args.concurrency}, "
          f"{args.profile}, host {host} tok")
    first = None
    rows = []
    for policy, limit in [(p, c) for p in policies for c in (counts if policy_info(p).iterates_order else [1])]:
        cpu = []
        for _ in range(args.repeat):  # a replay is deterministic: every repeat reports the same figures
            predictor = make_predictor(args.predictor, 3, records)
            c0 = time.process_time()
            result = simulate(workload, ReplayConfig(policy, profile, device_tokens=device, host_tokens=host),
                              ReplayOptions(concurrency=args.concurrency, predictor=predictor, order_runs=limit))
            cpu.append(time.process_time() - c0)
        dc = min(cpu)
        first = first or dc
        runs = result.summary.get("order_runs", 1)
        order = f"  ({runs} order run(s) of <= {limit})" if policy_info(policy).iterates_order else ""
        print(f"{policy:16s} {dc:7.1f} s CPU {n / dc:8.1f} inv/s  x{dc / first:5.1f}   "
              f"hit rate {result.summary['hit_rate']:.4f}   evictions {result.summary['evictions']}{order}", flush=True)
        rows.append({"policy": policy, "cpu_s": dc, "cpu_s_each": cpu, "invocations_per_cpu_s": n / dc,
                     "cpu_vs_first": dc / first,
                     "order_runs": runs, "order_runs_limit": limit, "hit_rate": result.summary["hit_rate"],
                     "mean_latency_s": result.summary["mean_latency_s"],
                     "order_run_mean_latency_s": result.summary.get("order_run_mean_latency_s")})
    if args.json is not None:
        key = f"{Path(args.trace).name} {args.profile} C={args.concurrency} device={device} host={host}"
        data[key] = {"trace": Path(args.trace).name, "invocations": n, "workflows": workload.workflow_count,
                     "profile": args.profile, "concurrency": args.concurrency, "device_tokens": device,
                     "host_tokens": host, "predictor": args.predictor, "load_average": os.getloadavg()[0],
                     "commit": git_commit(), "rows": rows}
        write_json(args.json, data)


def order_run_counts(text: str | None) -> list[int]:
    """``--order-runs``: the distinct counts, in order (default ``[ADVISE_ORDER_RUNS]``).

    Raises:
        ValueError: one line for an empty or repeated item, a non-integer or a count outside
            1..ORDER_RUNS_LIMIT.
    """
    if text is None:
        return [ADVISE_ORDER_RUNS]
    counts = []
    for item in list_items(text, "--order-runs", "count"):
        try:
            count = int(item)
        except ValueError:
            raise ValueError(f"--order-runs {item!r}: not a whole number") from None
        if not 1 <= count <= ORDER_RUNS_LIMIT:
            raise ValueError(f"--order-runs {count}: must be in 1..{ORDER_RUNS_LIMIT}")
        if count in counts:
            raise ValueError(f"--order-runs {count} is given twice")
        counts.append(count)
    return counts


#: The keys of every setting :func:`replay_trace` writes under its key.
SETTING_KEYS = frozenset({"trace", "profile", "concurrency", "device_tokens", "host_tokens", "rows"})


def is_speed_result(document: Any) -> bool:
    """Whether a JSON document is an earlier ``--trace ... --json`` of this script: ``{setting key:
    {"trace", "profile", ..., "rows": [...]}}``. ``--json`` adds its setting to that and to nothing
    else (a ``pbkv-bench replay`` result, ``{"x": 1}``, ``"hi"``)."""
    return isinstance(document, dict) and all(
        isinstance(v, dict) and SETTING_KEYS <= v.keys() and isinstance(v["rows"], list) for v in document.values())


def _read_json(path: Path) -> dict:
    """What ``--json`` holds already (other settings are kept); refused unless an earlier result of
    this script (:func:`is_speed_result`, checked before any replay by ``check_output`` too)."""
    if not path.exists() or path.stat().st_size == 0:
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ValueError(f"--json {path}: not JSON ({exc}); move it away or name another file") from None
    if not is_speed_result(data):
        raise ValueError(f"--json {path}: not JSON of this script; move it away or name another file")
    return data


if __name__ == "__main__":
    sys.exit(run_script(main))
