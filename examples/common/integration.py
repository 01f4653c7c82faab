"""The examples' only contact points with the rest of PBKV (server, predictor, simulator).

Each function wraps one documented API of another package, so the pipeline reads as the main job
and a change of those APIs touches this file only:

* :func:`embedded_server`: ``pbkv_server.http.runner.run_in_thread`` with the sim engine;
* :func:`train_predictor`: the ``pbkv-predictor train`` CLI (run as a subprocess so torch
  threads and memory stay out of the app process);
* :func:`replay`: ``pbkv_server.sim.simulator`` (``load_workload`` + ``simulate``) with
  ``pbkv_train.serving.load_predictor``, one fresh predictor per policy;
* :func:`retime_trace`: ``pbkv_server.sim.nominal.retime`` (nominal, seeded timing of a recording).
"""

from __future__ import annotations

import contextlib
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from rich.console import Console

from examples.common.results import PolicyResult
from pbkv_contract.trace import InvocationRecord, TraceRecord, TraceWriter, read_trace
from pbkv_server.engine.policies import BASELINE_POLICY
from pbkv_server.sim.serving_metrics import SERVING_KEYS, Slo

__all__ = ["EMBEDDED_END_TIMEOUT_S", "embedded_server", "train_predictor", "replay", "read_records",
           "canonicalise_trace", "retime_trace", "summary_to_result"]


#: The end signal's per-phase timeout against the embedded server, seconds. The server runs in a
#: thread of the app's own process (one GIL, 2 cores), so under the app's load its answer can take
#: longer than the SDK's 0.5 s default, which then warns; a lost end only delays the retirement in
#: the app run's engine (the replay reads the recorded ``workflow_end``), but the warning misleads.
EMBEDDED_END_TIMEOUT_S = 5.0


@contextlib.contextmanager
def embedded_server(app: str, *, seed: int = 0, profile: str | None = None) -> Iterator[str]:
    """Run pbkv-server (sim engine, LRU, the app's registered scenario) on 127.0.0.1, a free port.

    The app's scenario must be registered (its module imported) before the call: the server runs
    in this process and looks scenarios up by the hint's app name.

    Yields:
        the server's base URL, e.g. ``http://127.0.0.1:40123``.
    """
    from pbkv_server.http.config import ServerConfig
    from pbkv_server.http.runner import run_in_thread

    # Workflows end by the SDK's signal; no idle retirement during long app runs. The app runs
    # against LRU, as against an unmodified server: the figures come from replaying its trace.
    config = ServerConfig(host="127.0.0.1", port=0, seed=seed, profile=profile, idle_retire_s=None,
                          policy=BASELINE_POLICY)
    with run_in_thread(config) as handle:
        yield handle.url


def train_predictor(traces: Sequence[Path], out: Path, *, app: str, seed: int = 0, epochs: int | None = None,
                    threads: int = 1) -> None:
    """Train the GraphSAGE predictor with ``pbkv-predictor train TRACES --out MODEL``.

    Raises:
        RuntimeError: the command failed (its output is in the message).
    """
    cmd = [sys.executable, "-c", "from pbkv_train.cli import app; app()", "train", *map(str, traces),
           "--out", str(out), "--app", app, "--seed", str(seed), "--threads", str(threads)]
    if epochs is not None:
        cmd += ["--epochs", str(epochs)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "COLUMNS": "120"})
    if proc.returncode != 0 or not out.is_file():
        raise RuntimeError(f"predictor training failed ({' '.join(cmd[3:])}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")


def read_records(path: Path) -> list[TraceRecord]:
    """All records of one trace file (malformed lines skipped with a warning by the reader)."""
    return read_trace(path)


def canonicalise_trace(path: Path) -> int:
    """Rewrite the trace at ``path`` with its records grouped per workflow, in workflow-id order.

    Concurrent workflows append their records in whatever order the scheduler runs them; the
    simulator admits workflows in order of first appearance and the predictor shuffles its
    training set from the file order, so both would change from run to run. Within a workflow
    the invocations are ordered by ``(step, t_start)`` and its end record comes last. The file is
    replaced atomically (written to ``path.tmp`` first).

    Returns:
        the number of records written.
    """
    records = read_records(path)

    def key(rec: TraceRecord) -> tuple[str, int, int, float]:
        if isinstance(rec, InvocationRecord):
            return (rec.workflow_id, 0, rec.step, rec.t_start)
        return (rec.workflow_id, 1, 0, 0.0)

    records.sort(key=key)
    _rewrite(path, records)
    return len(records)


def retime_trace(path: Path, seed: int, tool_gaps: Mapping[str, tuple[float, float]] | None = None) -> int:
    """Rewrite the trace at ``path`` with nominal, seeded times (:func:`pbkv_server.sim.nominal.retime`).

    The app's recording carries wall-clock times: the gaps between a workflow's calls (framework
    and tool time) and the calls' durations grow with the load of the machine, and a replay keeps
    those gaps. After this rewrite the trace, and so every replayed figure, is a function of the
    seed and of the calls' content only. Replaced atomically, like :func:`canonicalise_trace`.

    Args:
        tool_gaps: per agent, the seconds ``(low, high)`` of the tool that runs after its calls.

    Returns:
        the number of records written.
    """
    from pbkv_server.sim.nominal import retime

    records = retime(read_records(path), seed, tool_gaps)
    _rewrite(path, records)
    return len(records)


def _rewrite(path: Path, records: Sequence[TraceRecord]) -> None:
    """Replace the trace at ``path`` by ``records`` (through ``path.tmp``, so a reader never sees half)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)  # the writer appends
    with TraceWriter(tmp) as writer:
        for rec in records:
            writer.write(rec)
    os.replace(tmp, path)


def replay(trace: Path, policies: Sequence[str], *, model_path: Path, concurrency: int, profile: str,
           device_tokens: int, host_tokens: int, static_graph: Mapping[str, Sequence[str]] | None, app: str,
           console: Console | None = None, slo: Slo | None = None) -> list[PolicyResult]:
    """Replay ``trace`` once per policy and return the results in ``policies`` order.

    Args:
        trace: the test trace.
        policies: engine policy names.
        model_path: trained predictor for the predictive policies.
        concurrency: workflows in flight.
        profile: hardware profile name.
        device_tokens / host_tokens: capacities in tokens.
        static_graph: the app's declared agent graph for graph-reading policies such as kvflow
            (``None``: learned from the trace).
        app: the trace's app name.
        slo: goodput's objectives (``request_goodput`` in each result's ``extra``).
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from pbkv_server.engine.policies import policy_info
    from pbkv_server.hardware.profiles import get_profile
    from pbkv_server.sim.simulator import ReplayConfig, ReplayOptions, load_workload, simulate
    from pbkv_train.serving import load_predictor

    import torch

    # The predictor answers one small batch per request: one thread avoids thread-pool overhead
    # (measured about 9x faster per call than two threads on a loaded 2-core machine).
    torch.set_num_threads(1)
    workload = load_workload(read_records(trace))
    hw = get_profile(profile)
    graphs = {app: {k: list(v) for k, v in static_graph.items()}} if static_graph is not None else None
    results = []
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console or Console()) as progress:
        for policy in policies:
            bar = progress.add_task(f"replay {policy}", total=len(workload.units))
            predictor = load_predictor(model_path, app=app) if policy_info(policy).predictive else None
            sim = simulate(workload, ReplayConfig(policy, hw, device_tokens=device_tokens, host_tokens=host_tokens),
                           ReplayOptions(concurrency=concurrency, predictor=predictor, app_graphs=graphs, slo=slo,
                                         on_workflow_end=lambda n, bar=bar: progress.update(bar, completed=n)))
            results.append(summary_to_result(policy, sim.summary))
    return results


def summary_to_result(policy: str, summary: Mapping[str, Any]) -> PolicyResult:
    """Convert a simulator metrics summary (``MetricsCollector.summary``) to a :class:`PolicyResult`."""
    timeline = [((b["t_start"] + b["t_end"]) / 2, b["hit_rate"]) for b in summary.get("timeline", [])
                if not math.isnan(b["hit_rate"])]
    ends = [b["t_end"] for b in summary.get("timeline", [])]
    starts = [b["t_start"] for b in summary.get("timeline", [])]
    # with the serving figures in bench_serving's names and the trace's hit-rate ceiling
    # (pbkv_server.sim.serving_metrics): the examples' --json carries them per policy
    extra = {k: summary[k] for k in ("evictions", "evicted_tokens", "prefetched_tokens", "latency_ms", "workflows", "requests",
                                     "latency_breakdown_s", "ttft_breakdown_s", "mean_decode_step_s", *SERVING_KEYS)
             if k in summary}
    return PolicyResult(
        policy=policy,
        mean_latency_s=float(summary["mean_latency_s"]),
        p99_latency_s=float(summary["p99_latency_s"]),
        mean_ttft_s=float(summary["mean_ttft_s"]),
        ttft_by_agent=dict(summary.get("per_agent_ttft_s", {})),
        hit_rate=float(summary["hit_rate"]),
        host_hit_rate=float(summary["host_hit_rate"]),
        makespan_s=(max(ends) - min(starts)) if ends else math.nan,
        timeline=timeline,
        extra=extra,
    )
