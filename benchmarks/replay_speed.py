"""Replay speed with a trained predictor: invocations replayed per second (target: >= 1,000/s).

In a temporary folder: writes a synthetic training trace and trains a GraphSAGE model on it with
``pbkv-predictor train`` (a few epochs: speed does not depend on accuracy), writes a ~1,400-invocation
test trace of the same app, then replays it under a predictive policy (the server's default) with the trained model and,
for comparison, with the online ``markov`` predictor. Prints, per predictor, the wall and CPU
seconds of the replay, invocations per second (wall and CPU), the predictor calls, and a digest of
the deterministic replay figures (hit rates, evictions, prefetch, latencies, timeline): a faster
implementation (batched predictions) must print the same digest. torch runs on ``--threads``
threads (1 by default, as ``pbkv-bench``), set before the model loads.

    .venv/bin/python benchmarks/replay_speed.py [--workflows 140] [--policy P] [--model PATH]

On a loaded 2-core machine CPU-time figures are the fair ones (other processes stretch wall time);
the load average is printed with them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pbkv_server.engine.policies import DEFAULT_POLICY
from pbkv_server.predictors import make_predictor
from pbkv_server.hardware.profiles import get_profile
from pbkv_server.sim.report import jsonable
from pbkv_server.sim.simulator import ReplayConfig, ReplayOptions, load_workload, simulate
from pbkv_server.sim.synth.agents import write_trace
from pbkv_server.predictors.torch_threads import limit_torch_threads
from pbkv_contract.trace import read_trace

#: Replay figures that do not depend on the machine: equal digests = identical replays.
DETERMINISTIC = ("hit_rate", "host_hit_rate", "evictions", "evicted_tokens", "prefetched_tokens", "mean_latency_s",
                 "p99_latency_s", "mean_ttft_s", "p99_ttft_s", "workflows", "requests", "timeline")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graph", default="codegen", help="synthetic app of both traces")
    parser.add_argument("--workflows", type=int, default=140, help="workflows of the test trace (~10 invocations each)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the test trace")
    parser.add_argument("--train-workflows", type=int, default=200, help="workflows of the training trace")
    parser.add_argument("--epochs", type=int, default=5, help="training epochs")
    parser.add_argument("--model", type=Path, default=None, help="use this trained model instead of training one")
    parser.add_argument("--policy", default=DEFAULT_POLICY, help="a predictive policy")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--profile", default="h100-qwen2.5-32b")
    parser.add_argument("--device-tokens", type=int, default=200_000)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="pbkv-replay-speed-") as tmp:
        model = args.model
        if model is None:
            train_trace, model = Path(tmp) / "train.jsonl", Path(tmp) / "model.pt"
            write_trace(str(train_trace), graph=args.graph, workflows=args.train_workflows, seed=args.seed + 1000)
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "pbkv_train.cli", "train", str(train_trace), "--out", str(model),
                            "--epochs", str(args.epochs), "--threads", str(args.threads)],
                           check=True, stdout=subprocess.DEVNULL)
            print(f"trained {model.name} on {args.train_workflows} {args.graph} workflows "
                  f"({args.epochs} epochs) in {time.perf_counter() - t0:.1f} s")
        test_trace = Path(tmp) / "test.jsonl"
        write_trace(str(test_trace), graph=args.graph, workflows=args.workflows, seed=args.seed)
        records = read_trace(test_trace)
        workload = load_workload(records)
        n = workload.invocations
        print(f"test trace: {workload.workflow_count} workflows, {n} invocations; policy {args.policy}, "
              f"C={args.concurrency}, {args.profile}, device {args.device_tokens} tok; torch threads {args.threads}")
        limit_torch_threads(args.threads, [str(model)])
        profile = get_profile(args.profile)
        for spec, label in ((str(model), "trained model"), ("markov", "markov (online)")):
            predictor = make_predictor(spec, 3, records, app=args.graph)
            t0, c0 = time.perf_counter(), time.process_time()
            result = simulate(workload, ReplayConfig(args.policy, profile, device_tokens=args.device_tokens),
                              ReplayOptions(concurrency=args.concurrency, predictor=predictor))
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            calls = result.summary.get("latency_ms", {}).get("predictor_call", {}).get("n", "?")
            figures = json.dumps(jsonable({k: result.summary.get(k) for k in DETERMINISTIC}), sort_keys=True)
            digest = hashlib.sha256(figures.encode()).hexdigest()[:16]
            print(f"{label:16s} {wall:6.2f} s wall {cpu:6.2f} s CPU  {n / wall:7.0f} invocations/s wall "
                  f"{n / cpu:7.0f} /s CPU  predictor calls {calls}  hit rate {result.summary['hit_rate']:.4f}  "
                  f"figures {digest}")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (target: >= 1,000 invocations/s "
          "with the trained model)")


if __name__ == "__main__":
    main()
