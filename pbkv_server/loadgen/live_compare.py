"""``pbkv-bench live-compare``: one trace through a live SGLang server and through the simulator.

The command asks the server for its settings (``GET /server_info``: eviction policy and its
config, KV pool ``max_total_num_tokens``, page size, HiCache), live-replays the trace against it
(:func:`pbkv_server.loadgen.live_replay.replay`, SGLang ``/generate``), then replays the *same* requests in
the simulator with the engine-core policy of the same rule (:func:`sim_policy`), the same device
capacity and page size, no host tier, the same concurrency and predictor, and prints both hit rates side by
side (token-level: cached prompt tokens / prompt tokens).

"The same requests" means what the live server saw, not the raw trace: each block of a prompt
has the token count :class:`~pbkv_server.loadgen.live_replay.PromptBook` gave it (fixed per block hash),
output lengths are capped like the live replay's, and the gaps between a workflow's invocations
are the recorded ones times ``--gap-scale`` (default 0, back to back, as live-replay's), with
the end signal right after the last invocation.

SGLang keeps each finished request's output KV in its radix tree (prompt + output[:-1]), and the
PBKV plugin records the workflow on it; the replayed outputs are never re-sent, so that KV only
takes room. The simulator models it (``cache_outputs=True``): without it, it overstated SGLang's
hit rate by up to 12 % relative on the HoVer and SWE-bench quick traces (README, SGLang).

Timing only decides the interleaving of concurrent workflows. By default the simulator uses a
profile measured from the live run (:func:`measured_profile`: its decode time per output token
and its prefill rate), so both sides interleave alike; ``--profile NAME`` picks a named one.

Limits: HiCache (a host tier) needs a GPU and is refused.
"""

from __future__ import annotations

import asyncio
import json
import statistics
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Optional, Sequence

import httpx
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from pbkv_contract.trace import (
    InvocationRecord,
    TraceFormatError,
    TraceRecord,
    WorkflowEndRecord,
    group_workflows,
    read_trace,
)
from pbkv_contract.files import output_problem, replace_file
from pbkv_server.engine.cost import HardwareProfile
from pbkv_server.engine.policies import BASELINE_POLICY, policy_info, sglang_policy_names
from pbkv_server.loadgen.live_replay import PromptBook, ReplaySummary, check_arguments, replay
from pbkv_server.sim.simulator import MAX_CONCURRENCY, ReplayConfig, ReplayOptions, load_workload, simulate
from pbkv_server.predictors.factory import DEFAULT_ONLINE_PREDICTOR

__all__ = ["sim_policy", "ServerSettings", "server_settings", "matched_records", "measured_profile", "probed_fit",
           "simulate_matched", "command"]

console = Console()
err_console = Console(stderr=True, soft_wrap=True)  # one-line messages stay one line

def sim_policy(server_policy: str) -> str | None:
    """The engine-core policy of SGLang's ``--radix-eviction-policy`` value ``server_policy``:
    the plugin policy registered under that SGLang name, or the baseline for SGLang's own LRU
    (the same rule); ``None`` when the simulator has no counterpart."""
    if server_policy == BASELINE_POLICY:
        return BASELINE_POLICY
    return sglang_policy_names().get(server_policy)


@dataclass(frozen=True)
class ServerSettings:
    """What the simulator must match, read from SGLang's ``/server_info``.

    Attributes:
        policy: the server's ``radix_eviction_policy``; sim_policy: the engine-core name.
        device_tokens: KV pool, tokens (``max_total_num_tokens``).
        page_size: tokens per KV page (the simulator caches whole pages of it too).
        predictor, gamma, horizon: the plugin's settings (its defaults for a built-in policy).
    """

    policy: str
    sim_policy: str
    device_tokens: int
    page_size: int
    predictor: str = DEFAULT_ONLINE_PREDICTOR
    gamma: float = 0.7
    horizon: int = 3


def server_settings(info: dict[str, Any]) -> ServerSettings:
    """Parse SGLang's ``/server_info`` JSON.

    Raises:
        ValueError: a policy without an engine-core counterpart, a page size < 1, HiCache on, or
            a missing field.
    """
    try:
        policy = info["radix_eviction_policy"]
        device = int(info.get("max_total_num_tokens") or info["internal_states"][0]["memory_usage"]["token_capacity"])
        page = int(info["page_size"])
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise ValueError(f"/server_info lacks a field this command needs ({exc!r}); is the target SGLang?") from None
    sim = sim_policy(policy)
    if sim is None:
        known = sorted([BASELINE_POLICY, *sglang_policy_names()])
        raise ValueError(f"server policy {policy!r} has no simulator counterpart; known: {known}")
    if page < 1:
        raise ValueError(f"server page size is {page}; expected >= 1")
    if info.get("enable_hierarchical_cache"):
        raise ValueError("the server runs HiCache (a host tier); this comparison covers the device tier only")
    config = info.get("radix_eviction_policy_config") or {}
    if isinstance(config, str):
        config = json.loads(config)
    from pbkv_server.backends.sglang.settings import PluginSettings  # imports no SGLang

    plugin = PluginSettings.from_kwargs(policy, config if sim != BASELINE_POLICY else {})
    return ServerSettings(policy, sim, device, page, plugin.predictor, plugin.gamma, plugin.horizon)


def matched_records(records: Sequence[TraceRecord], book: PromptBook, gap_scale: float = 0.0,
                    max_output_tokens: int | None = None) -> list[TraceRecord]:
    """The trace as the live replay sent it (see the module docstring), for :func:`load_workload`.

    Args:
        records: v1 trace records.
        book: a fresh :class:`PromptBook` (block counts depend only on the records, taken in the live
            replay's order, which this function follows).
        gap_scale: factor on the recorded gaps between a workflow's invocations (>= 0).
        max_output_tokens: cap on each invocation's output tokens, or ``None``.

    Returns:
        Invocations with ``block_tokens`` / ``prompt_tokens`` as sent and times rebuilt so that each
        gap is ``gap_scale`` x the recorded one; each workflow's end record right after its last
        invocation.
    """
    ends = {r.workflow_id: r for r in records if isinstance(r, WorkflowEndRecord)}
    out: list[TraceRecord] = []
    for wf, invocations in group_workflows(records).items():  # the live replay's order (PromptBook counts)
        t = prev_end = None
        for rec in invocations:
            counts = book.block_counts(rec)
            completion = max(1, rec.completion_tokens)
            if max_output_tokens is not None:
                completion = min(completion, max_output_tokens)
            start = rec.t_start if t is None else t + gap_scale * max(0.0, rec.t_start - prev_end)
            t, prev_end = start + max(0.0, rec.t_end - rec.t_start), rec.t_end
            out.append(replace(rec, block_tokens=counts, prompt_tokens=sum(counts), completion_tokens=completion,
                               t_start=start, t_end=t))
        status = ends[wf].status if wf in ends else "completed"
        out.append(WorkflowEndRecord(app=invocations[0].app, workflow_id=wf, t=t, status=status))
    return out


def measured_profile(summary: ReplaySummary, device_tokens: int) -> HardwareProfile:
    """A cost model of the live server from its replay: decode time per output token (median over
    requests with two or more output tokens of ``(latency - TTFT) / (output - 1)``) and a prefill
    rate (uncached prompt tokens / summed TTFT; queueing included, so a lower bound).

    Raises:
        ValueError: the replay holds no successful request with a first token.
    """
    ok = [r for r in summary.results if r.ok and r.ttft_s is not None]
    if not ok:
        raise ValueError("the live replay has no successful request to measure the server by")
    per_token = [(r.latency_s - r.ttft_s) / (r.completion_tokens - 1) for r in ok if r.completion_tokens >= 2]
    fresh = sum(max(0, r.prompt_tokens - r.cached_tokens) for r in ok)
    ttft = sum(r.ttft_s for r in ok)
    return HardwareProfile(
        name="measured", description=f"measured from a live replay of {summary.target}",
        source="pbkv-bench live-compare", prefill_tokens_per_s=max(1.0, fresh / ttft) if ttft > 0 else 1e6,
        decode_base_s=statistics.median(per_token) if per_token else 0.01, decode_per_seq_s=0.0,
        pcie_bytes_per_s=25e9, kv_bytes_per_token=1, device_kv_tokens=device_tokens, host_kv_tokens=0)


def probed_fit(path: Path):
    """The :class:`~pbkv_server.loadgen.probe_fit.ProbeFit` of a ``pbkv-bench probe-profile --json`` file.

    Raises:
        ValueError: the file cannot be read or holds no fit (one line saying which).
    """
    from pbkv_server.loadgen.probe_fit import ProbeFit

    try:
        return ProbeFit.from_json(json.loads(path.read_text())["fit"])
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"--profile {path}: not a probe-profile JSON file ({type(exc).__name__}: {exc})") from None
    except ValueError as exc:
        raise ValueError(f"--profile {path}: {exc}") from None


def simulate_matched(records: Sequence[TraceRecord], settings: ServerSettings, profile: HardwareProfile,
                     concurrency: int) -> dict[str, Any]:
    """Replay ``records`` (from :func:`matched_records`) in the simulator as the server is set up.

    Returns:
        The simulator's summary (:meth:`pbkv_server.sim.metrics.MetricsCollector.summary`).
    """
    from pbkv_server.predictors import make_predictor

    predictor = None
    if policy_info(settings.sim_policy).predictive:
        apps = {r.app for r in records if isinstance(r, InvocationRecord)}
        predictor = make_predictor(settings.predictor, settings.horizon, records,
                                   app=next(iter(apps)) if len(apps) == 1 else None)
    result = simulate(load_workload(records), ReplayConfig(settings.sim_policy, profile,
                                                           device_tokens=settings.device_tokens, host_tokens=0,
                                                           horizon=settings.horizon, gamma=settings.gamma,
                                                           page_size=settings.page_size, cache_outputs=True),
                      ReplayOptions(concurrency=concurrency, predictor=predictor))
    return result.summary


def command(
    trace: Path = typer.Argument(..., help="trace file (JSONL, v1)"),
    target: str = typer.Option(..., "--target", help="SGLang server base URL, e.g. http://127.0.0.1:30000"),
    concurrency: int = typer.Option(8, "--concurrency", min=1, max=MAX_CONCURRENCY, help="most workflows in flight, live and simulated"),
    gap_scale: float = typer.Option(0.0, "--gap-scale", help="recorded gaps x this, on both sides (0 = back to back)"),
    max_output_tokens: Optional[int] = typer.Option(None, "--max-output-tokens", help="cap each output, both sides"),
    limit: Optional[int] = typer.Option(None, "--limit", help="only the first N workflows"),
    profile: str = typer.Option("measured", "--profile",
                                help="simulator timing: 'measured' (from the live run), a named profile, or a "
                                     "probe-profile --json file (fitted on the idle server: issue 34 item 4)"),
    vocab_size: Optional[int] = typer.Option(None, "--vocab-size",
                                             help="token ids are drawn below this (default: the model's)"),
    json_out: Optional[Path] = typer.Option(None, "--json", help="write both summaries here"),
    timeout_s: float = typer.Option(600.0, "--timeout", help="per-request timeout, seconds"),
) -> None:
    """Replay a trace on a live SGLang server and in the simulator at its capacity; print both hit rates."""
    def fail(message: str) -> typer.Exit:
        err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
        return typer.Exit(code=2)

    try:
        check_arguments(target=target, concurrency=concurrency, api="generate", gap_scale=gap_scale,
                        timeout_s=timeout_s, max_output_tokens=max_output_tokens, limit=limit, vocab_size=vocab_size)
        records = read_trace(trace)
        if limit is not None:
            keep = list(dict.fromkeys(r.workflow_id for r in records if isinstance(r, InvocationRecord)))[:limit]
            records = [r for r in records if r.workflow_id in set(keep)]
        if profile.endswith(".json"):
            probed = probed_fit(Path(profile))
        elif profile != "measured":
            from pbkv_server.hardware.profiles import get_profile

            get_profile(profile)
        if (problem := output_problem(json_out, [trace], json_doc=_is_live_compare_result)) is not None:
            raise ValueError(f"--json {json_out}: {problem}")
    except (ValueError, KeyError, OSError, TraceFormatError) as exc:
        raise fail(exc.args[0] if isinstance(exc, KeyError) else str(exc)) from None
    try:
        info = httpx.get(target.rstrip("/") + "/server_info", timeout=30).json()
        settings = server_settings(info)
    except (httpx.HTTPError, ValueError) as exc:
        raise fail(f"{target}: {exc}") from None
    try:
        live = asyncio.run(replay(records, target, concurrency, "generate", vocab_size, gap_scale, timeout_s=timeout_s,
                                  max_output_tokens=max_output_tokens))
    except ValueError as exc:
        raise fail(str(exc)) from None
    if live.errors:
        raise fail(f"{live.errors} of {live.requests} live requests failed; first: "
                   f"{next(r.error for r in live.results if not r.ok)}")
    matched = matched_records(records, PromptBook(), gap_scale, max_output_tokens)
    if profile == "measured":
        hw = measured_profile(live, settings.device_tokens)
    elif profile.endswith(".json"):
        hw = probed.profile(settings.device_tokens, name="probed", source=profile)
    else:
        from pbkv_server.hardware.profiles import get_profile

        hw = get_profile(profile)
    sim = simulate_matched(matched, settings, hw, concurrency)
    sim["prompt_tokens"] = sum(r.prompt_tokens for r in matched if isinstance(r, InvocationRecord))
    _print(trace, settings, concurrency, live, sim, hw)
    if json_out is not None:
        payload = {"settings": settings.__dict__, "concurrency": concurrency, "profile": hw.name,
                   "live": {k: v for k, v in live.to_json().items() if k != "results"},
                   "sim": {k: v for k, v in sim.items() if k != "timeline"}}
        replace_file(json_out, lambda tmp: tmp.write_text(json.dumps(payload, indent=1, default=str)))


def _print(trace: Path, s: ServerSettings, concurrency: int, live: ReplaySummary, sim: dict, hw) -> None:
    table = Table(title=f"{trace.name}: {live.workflows} workflows, {live.requests} requests, C={concurrency}, "
                        f"KV pool {s.device_tokens} tokens, page size {s.page_size}")
    for col in ("side", "policy", "hit rate", "prompt tokens", "requests"):
        table.add_column(col, justify="left" if col in ("side", "policy") else "right")
    table.add_row("SGLang (live)", s.policy, f"{live.hit_rate:.3f}", str(live.prompt_tokens), str(live.requests))
    table.add_row(f"simulator ({hw.name} timing)", s.sim_policy, f"{sim['hit_rate']:.3f}", str(sim["prompt_tokens"]),
                  str(sim["requests"]))
    console.print(table)
    rel = (sim["hit_rate"] - live.hit_rate) / live.hit_rate if live.hit_rate else float("nan")
    console.print(f"simulator - live: {sim['hit_rate'] - live.hit_rate:+.3f} ({rel:+.1%} of live)")
    # the serving figures side by side, in bench_serving's names (pbkv_server.sim.serving_metrics);
    # the simulator's are in its profile's seconds, so they compare only under a measured or calibrated one
    figures = Table(title=f"serving figures (bench_serving names), live vs simulated under {hw.name} timing")
    for col in ("metric", "SGLang (live)", "simulator"):
        figures.add_column(col, justify="left" if col == "metric" else "right")
    for key in SERVING_ROWS:
        figures.add_row(key, _fmt(live.serving.get(key)), _fmt(sim.get(key)))
    console.print(figures)


#: The figures live-compare prints on both sides.
SERVING_ROWS = ("median_ttft_ms", "p90_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_tpot_ms", "mean_itl_ms",
                "p99_itl_ms", "median_e2e_latency_ms", "p99_e2e_latency_ms", "request_throughput", "output_throughput")


def _fmt(value: Any) -> str:
    return "-" if not isinstance(value, (int, float)) or value != value else f"{value:.3f}" if value < 10 else f"{value:.1f}"


def _is_live_compare_result(document: Any) -> bool:
    """Whether a JSON document is an earlier ``--json`` result of this command (it may be replaced)."""
    return isinstance(document, dict) and {"settings", "live", "sim"} <= document.keys()
