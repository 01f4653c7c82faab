"""``pbkv-bench``: synthetic traces and trace replay under every cache policy.

    pbkv-bench synth --graph codegen --workflows N --seed S --out FILE.jsonl
    pbkv-bench replay FILE.jsonl --policy P[,P...] --predictor SPEC --concurrency C \\
        --profile NAME [--device-tokens T] [--host-ratio R | --host-tokens H] [--threads N] \\
        [--replicas N --router affinity|round-robin|cache-aware] --json OUT.json [--plot OUT.png]
    pbkv-bench profiles
    pbkv-bench advise FILE.jsonl [--profile NAME | --gpu-memory GIB --model M [--tp N] [--gpu h100|a6000]] \
        [--concurrency C] [--host-ratio R] [--engine sglang|vllm|dynamo] [--plot OUT.png] [--json OUT.json]

The options of replay and advise are the fields of ``ReplaySettings`` / ``AdviseSettings``
(:mod:`pbkv_server.cli.bench_settings`); each command checks them in order, before any replay.

Bad input never ends in a traceback: lines the trace reader cannot use are skipped, with one
warning per file that counts them and names the first (``pbkv_contract.trace``); an unknown trace
version, a trace without invocations, a bad option or an output path that cannot be written is an
error message and exit status 2, given before any replay starts.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import typer
from rich.console import Console
from rich.markup import escape

from pbkv_contract.extras import missing_module_line
from pbkv_contract.files import output_problem, replace_file, shared_output
from pbkv_server.cli.bench_settings import MAX_HORIZON, MAX_REPLICAS, AdviseSettings, ReplaySettings
from pbkv_server.cli.settings import command
from pbkv_server.engine.policies import BASELINE_POLICY, REFERENCE_POLICY
from pbkv_server.hardware.profiles import DEFAULT_PROFILE
from pbkv_server.sim.study.cli import study_app
from pbkv_server.predictors.torch_threads import limit_torch_threads

app = typer.Typer(add_completion=False, no_args_is_help=True, help="PBKV trace-driven simulator and benchmarks.")
console = Console()
err_console = Console(stderr=True, soft_wrap=True)  # one-line messages stay one line

def _check_outputs(trace: Path, json_out: Path | None, plot: Path | None, result: Callable[[Any], bool]) -> None:
    """Refuse (one line, exit 2) a ``--json`` / ``--plot`` path that cannot be written (a directory,
    an unwritable place), that is the input ``trace``, that both options name, or that is a file
    the output would destroy (a ``--json`` file that is not an earlier result, one that
    ``result`` accepts; a ``--plot`` file that is not a PNG), before any replay starts. Missing
    folders are fine: :func:`_write_outputs` makes them, as ``synth --out`` and ``pbkv-sdk import
    --out`` do."""
    for option, path in (("--json", json_out), ("--plot", plot)):
        problem = output_problem(path, [trace], image=option == "--plot",
                                 json_doc=result if option == "--json" else None)
        if problem:
            raise _fail(f"{option} {path}: {problem}")
    if (problem := shared_output([("--json", json_out), ("--plot", plot)])) is not None:
        raise _fail(problem)


def _replay_result(document: Any) -> bool:
    """Whether a JSON document is a ``replay --json`` result: ``{policy: {summary}}``, an object of
    objects (a raw kv-cache-tester trace, ``{"id": ..., "requests": [...]}``, is not)."""
    return isinstance(document, dict) and all(isinstance(v, dict) for v in document.values())


def _advise_result(document: Any) -> bool:
    """Whether a JSON document is an ``advise --json`` result (``Advice.to_json()``)."""
    return isinstance(document, dict) and {"profile", "regime", "verdict"} <= document.keys()


#: A trace at least this large is announced before it is read (bytes): a day of coding-agent
#: traffic is gigabytes, read for a minute or more before the first replay's bar appears.
ANNOUNCE_READ_BYTES = 100_000_000


def _say_reading(trace: Path) -> None:
    """One stderr line before a large trace is read, so that a minute of reading is not silence."""
    try:
        size = trace.stat().st_size
    except OSError:
        return  # the read itself says what is wrong
    if size >= ANNOUNCE_READ_BYTES:
        err_console.print(f"reading {trace} ({size / 1e9:.1f} GB) ...", highlight=False, markup=False)


def _check_predictor(spec: str) -> None:
    """Refuse (one line, exit 2) a ``--predictor`` spec that no trace makes good (an unknown name,
    ``noise:2``, a missing model file) before the trace is read: a day of traffic is read for a
    minute. A model file's contents are checked once the trace's app is known."""
    from pbkv_server.predictors.factory import check_predictor_spec

    try:
        check_predictor_spec(spec)
    except ValueError as exc:
        raise _fail(str(exc)) from None


def _as_option(message: str) -> str:
    """An engine setting's message (``gamma must be ...``) in the option's name (``--gamma must be ...``)."""
    return re.sub(r"^([a-z_]+)(?= must )", lambda m: "--" + m.group(1).replace("_", "-"), message)


def _fail(message: str) -> typer.Exit:
    # soft_wrap: no newlines inserted at the console width, so paths in messages stay whole
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(code=2)


def _typed(ctx: typer.Context, name: str) -> bool:
    """Whether option ``name`` was typed on the command line (any value, its default included);
    by name: typer carries its own copy of click's ParameterSource."""
    return getattr(ctx.get_parameter_source(name), "name", None) == "COMMANDLINE"


#: The options that describe the hardware by hand, ``(field, flag)``: a setup of ``--gpu-memory``
#: GiB GPUs serving ``--model``, on ``--tp`` GPUs of ``--gpu``'s speeds. ``--profile`` names a
#: whole setup instead, so none of them goes with it (each would be ignored).
CUSTOM_HARDWARE = (("gpu_memory", "--gpu-memory"), ("model", "--model"), ("tp", "--tp"), ("gpu", "--gpu"))


def _check_hardware_options(ctx: typer.Context, s: Any) -> None:
    """Refuse (one line, exit 2) a hardware setup given half or twice, in any command's settings
    ``s`` (only the fields of :data:`CUSTOM_HARDWARE` it has count): ``--profile`` with any of
    them, ``--gpu-memory`` without ``--model`` or the reverse, ``--tp`` or ``--gpu`` without
    ``--gpu-memory``/``--model``. An option counts as given when typed (``--tp 1`` with
    ``--profile`` is refused too) or set off its default."""
    names = {"profile", *(name for name, _ in CUSTOM_HARDWARE)}
    defaults = {f.name: f.default for f in dataclasses.fields(s) if f.name in names}  # plain defaults, no factory

    def given(name: str) -> bool:
        return name in defaults and (_typed(ctx, name) or getattr(s, name) != defaults[name])

    custom = [flag for name, flag in CUSTOM_HARDWARE if given(name)]
    if not custom:
        return
    if given("profile"):
        raise _fail(f"give --profile or --gpu-memory/--model [--tp N] [--gpu G], not both (--profile with "
                    f"{', '.join(custom)})")
    if given("gpu_memory") != given("model"):
        raise _fail("--gpu-memory and --model go together")
    if not given("gpu_memory"):
        raise _fail(f"{' and '.join(custom)} describe{'s' if len(custom) == 1 else ''} the hardware with "
                    f"--gpu-memory/--model; give those too, or --profile alone")


@app.callback()
def _main() -> None:
    """PBKV trace-driven simulator and benchmarks."""
    # Trace-reader warnings (skipped lines) go to stderr without a logging setup of their own.
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")


@app.command()
def synth(
    out: Path = typer.Option(..., "--out", help="output trace file (JSONL); must not exist yet (synth never appends a second workload)"),
    graph: str = typer.Option("codegen", help="call graph: codegen, research, finance, supervisor (routed) or mixed; "
                                               "chat (multi-turn conversations, each turn a workflow) or chat-mix; "
                                               "coding-agent (GitHub Copilot coding-agent sessions, each user turn "
                                               "a workflow; docs/coding-agent-workload.md)"),
    workflows: int = typer.Option(200, min=1, max=1_000_000, help="number of workflows (at most 1,000,000); "
                                                                  "for chat, chat-mix and coding-agent, of sessions "
                                                                  "(a conversation or session; each turn is a workflow)"),
    seed: int = typer.Option(0, help="random seed"),
    block_chars: Optional[int] = typer.Option(None, help="characters per prefix-hash block (multiple of 4; default "
                                                         "256, for coding-agent 4096)"),
) -> None:
    """Write a seeded synthetic multi-agent workload as a v1 trace."""
    from pbkv_server.sim.synth.agents import write_trace

    if out.is_dir():
        raise _fail(f"--out {out} is a directory; give a file path")
    if out.exists():
        raise _fail(f"{out} exists; refusing to append a second workload to it")
    problem = output_problem(out)
    if problem:
        raise _fail(f"--out {out}: {problem}")
    try:
        n_wf, n_inv = write_trace(str(out), graph=graph, workflows=workflows, seed=seed, block_chars=block_chars)
    except ValueError as exc:
        raise _fail(str(exc)) from None
    except OSError as exc:
        raise _fail(f"cannot write {out}: {exc}") from None
    console.print(f"wrote {n_wf} workflows, {n_inv} invocations to {out}")


def _help(*paragraphs: str) -> Callable[[Callable], Callable]:
    """Set a command's ``--help`` text: ``paragraphs`` as plain prose, each joined onto one line
    (Typer's rich help keeps a docstring's line breaks and shows reST markup raw)."""
    def set_doc(body: Callable) -> Callable:
        body.__doc__ = "\n\n".join(" ".join(p.split()) for p in paragraphs)
        return body
    return set_doc


@command(app, ReplaySettings)
@_help(
    "Replay a trace under each policy; print tables, optionally write JSON and a plot.",
    f"""Per policy: device hit rate, "device-hit gap closed" = (h - h_base) / (h_ref - h_base) with
    h_base the baseline's ({BASELINE_POLICY}) and h_ref the offline reference's ({REFERENCE_POLICY})
    device hit rate, the device + host hit rate, prefill saved, speedup vs {BASELINE_POLICY} and
    latency capture. A baseline or reference that is not listed is replayed too (unless --no-gap),
    for the scales only. A replay that cannot show a difference between policies says so in one
    line.""",
    """Then the serving figures in SGLang bench_serving's names: TTFT, TPOT, ITL and end-to-end
    latency at mean, median, p90 and p99, workflow (and session) latency, throughput, goodput under
    --slo-ttft / --slo-tpot, and the hit rate against the trace's ceiling.""",
)
def replay(ctx: typer.Context, s: ReplaySettings) -> None:
    # The help text above is the command's doc; the measures are pbkv_server.sim.measures' and the
    # serving figures pbkv_server.sim.serving_metrics'.
    from pbkv_server.sim.report import plot_timelines, write_json

    _check_hardware_options(ctx, s)  # advise's check, shared: a no-op while replay takes --profile only
    # every check before the first replay: one line and exit 2 each
    plan = _replay_plan(s, _typed(ctx, "router"), _typed(ctx, "order_runs"))
    saved_threads = limit_torch_threads(s.threads, [s.predictor])  # before a trained model loads
    if saved_threads is not None:  # in-process callers (tests, notebooks) get their setting back
        ctx.call_on_close(lambda: limit_torch_threads(saved_threads))
    _load_replay_inputs(s, plan)
    results, replayed = _replay_policies(s, plan)
    try:
        _print_replay(s, plan, results, replayed)
    finally:  # minutes of replays are not lost to a closed stdout (`| head`) or a table's bug
        _write_outputs(s.json_out, s.plot, lambda path: write_json(path, results),
                       lambda path: plot_timelines(path, results, plan.title))


@dataclass
class _ReplayPlan:
    """What :func:`replay` checked and derived before the first replay, and what it read."""

    policies: list[str]
    scale_only: list[str]
    hw: Any
    host: int
    gap: bool
    slo: Any = None
    records: list = field(default_factory=list)
    workload: Any = None
    trace_app: str | None = None
    title: str = ""


def _replay_plan(s: ReplaySettings, router_given: bool = False, order_runs_given: bool = False) -> _ReplayPlan:
    """The checks of ``replay``'s options, in order; each failure is one line and exit 2.
    ``router_given``: ``--router`` was typed (any value, the default included): it needs a cluster.
    ``order_runs_given``: ``--order-runs`` was typed: some replayed policy must iterate its order."""
    from pbkv_server.engine.policies import (BASELINE_POLICY, REFERENCE_POLICY, REPLAY, available_policies,
                                             parse_policy_list, policy_info)
    from pbkv_server.hardware.profiles import PAPER_HOST_RATIO, get_profile, host_tokens_for
    from pbkv_server.sim.cluster import ROUTERS

    known = available_policies(REPLAY)
    try:  # an empty item or a repeat is refused, as in study and the benchmark scripts
        policies = known if s.policy is None else parse_policy_list(s.policy, REPLAY)
    except ValueError as exc:
        raise _fail(str(exc)) from None
    if s.concurrency < 1:
        raise _fail("--concurrency must be >= 1")
    _check_predictor(s.predictor)
    try:
        hw = get_profile(s.profile)
    except KeyError as exc:
        raise _fail(exc.args[0]) from None
    if s.horizon > MAX_HORIZON:
        raise _fail(f"--horizon must be in 1..{MAX_HORIZON} (a score weighs step k by gamma^k: nothing beyond "
                    f"{MAX_HORIZON} steps), got {s.horizon}")
    # The engine checks its settings when its config is made (EngineConfig): make one now, so a bad
    # value fails before the first policy runs, in the option's name.
    try:
        _replay_config(s, policies[0], hw, s.host_tokens).engine_config()
    except ValueError as exc:
        raise _fail(_as_option(str(exc))) from None
    if s.timeline_bins < 1:
        raise _fail("--timeline-bins must be >= 1")
    if s.threads < 1:
        raise _fail("--threads must be >= 1")
    if not 1 <= s.replicas <= MAX_REPLICAS or s.router not in ROUTERS:
        raise _fail(f"--replicas must be in 1..{MAX_REPLICAS} (each is a whole engine) and --router one of "
                    f"{', '.join(ROUTERS)}")
    if router_given and s.replicas == 1:  # one replica replays on one engine: no router would run
        raise _fail("--router needs --replicas > 1 (one replica replays on one engine, without a router)")
    gap = s.gap
    if s.replicas > 1:  # offline references need one engine's future: no gap closed on a cluster
        offline = [p for p in policies if policy_info(p).offline]
        if offline:
            raise _fail(f"{', '.join(offline)}: offline references cannot run with --replicas")
        gap = False
    # gap closed needs both ends of the scale: replay the missing ones too, after the listed ones
    scale_only = [p for p in (BASELINE_POLICY, REFERENCE_POLICY) if gap and p not in policies and p in known]
    if order_runs_given and not any(policy_info(p).iterates_order for p in policies + scale_only):
        raise _fail(f"--order-runs: no policy replayed iterates its order ({REFERENCE_POLICY} does; --no-gap "
                    f"leaves it out unless listed)")
    # Check outputs before the runs: a bad path must not cost a whole study.
    _check_outputs(s.trace, s.json_out, s.plot, _replay_result)
    try:
        # one default host tier for replay and study (PAPER_HOST_RATIO), with or without --device-tokens
        ratio = PAPER_HOST_RATIO if s.host_ratio is None and s.host_tokens is None else s.host_ratio
        host = host_tokens_for(hw, s.device_tokens, s.host_tokens, ratio)
    except ValueError as exc:
        raise _fail(f"--host-ratio: {exc}") from None
    device = s.device_tokens if s.device_tokens is not None else hw.device_kv_tokens
    if s.page_size is not None and s.page_size > device:  # before the trace is read
        raise _fail(f"--page-size {s.page_size:,} is larger than the device ({device:,} tok): a KV pool of whole "
                    f"pages would hold none (SGLang then stops: not enough memory); give --page-size <= {device}")
    return _ReplayPlan(policies, scale_only, hw, host, gap, _slo(s.slo_ttft, s.slo_tpot))


def _slo(ttft_ms: float | None, tpot_ms: float | None) -> Any:
    """Goodput's objectives of ``--slo-ttft`` / ``--slo-tpot`` (one line and exit 2 for a bad one)."""
    from pbkv_server.sim.serving_metrics import Slo

    try:
        return Slo(ttft_ms, tpot_ms)
    except ValueError as exc:  # its message names the flag
        raise _fail(str(exc)) from None


def _replay_config(s: ReplaySettings, policy: str, hw: Any, host_tokens: int | None) -> Any:
    from pbkv_server.sim.simulator import ReplayConfig

    return ReplayConfig(policy, hw, device_tokens=s.device_tokens, host_tokens=host_tokens, horizon=s.horizon,
                        gamma=s.gamma, rho=s.rho, page_size=s.page_size, lru_guard=s.lru_guard,
                        prefill_cost=s.prefill_cost, engine_model=s.engine_model,
                        chunked_prefill_size=s.chunked_prefill_size)


def _trace_problem(trace: Path, exc: Exception) -> str:
    """The one line for an exception met reading ``trace`` or replaying it: a folder or an unreadable
    file named as such (not ``[Errno 21]``), and a file with no PBKV record pointed to the
    importers (a raw kv-cache-tester, ChatDev or GHCP log is the usual case)."""
    from pbkv_contract.trace import TraceFormatError

    if isinstance(exc, IsADirectoryError):
        return f"{trace} is a directory; give a trace file (.jsonl)"
    if isinstance(exc, OSError) and exc.strerror:
        return f"cannot read {trace}: {exc.strerror}"
    if isinstance(exc, TraceFormatError) and "no trace version" in str(exc):
        return f"{exc}; if it is another tool's log, convert it first (pbkv-sdk import --help lists the converters)"
    return str(exc)


def _load_replay_inputs(s: ReplaySettings, plan: _ReplayPlan) -> None:
    """Read the trace into ``plan`` and check the predictor spec and the plot's extra, before any run."""
    from pbkv_contract.trace import InvocationRecord, TraceFormatError, read_trace, trace_meta
    from pbkv_server.predictors import make_predictor
    from pbkv_server.sim.capacity import largest_request
    from pbkv_server.sim.plain_client import client_signal_note, without_hints
    from pbkv_server.sim.simulator import load_workload

    try:
        if s.plot is not None:  # before the runs: a missing plotting extra fails at once, not after them
            importlib.import_module("matplotlib")
        _say_reading(s.trace)
        plan.records = read_trace(s.trace)
        plan.workload = load_workload(plan.records)
        if not s.hints:
            plan.workload = without_hints(plan.workload)
            if (note := client_signal_note(plan.policies)) is not None:  # not refused: a do-no-harm check may want it
                err_console.print(f"note: {note}", highlight=False, markup=False)
        # A trained model must belong to the trace's app (when it holds one): a model for another
        # app would silently predict uniform distributions for every query.
        apps = {rec.app for rec in plan.records if isinstance(rec, InvocationRecord)}
        plan.trace_app = next(iter(apps)) if len(apps) == 1 else None
        make_predictor(s.predictor, s.horizon, plan.records, app=plan.trace_app)  # the spec, before the first run
    except (TraceFormatError, OSError, ValueError, ImportError) as exc:
        raise _fail(missing_module_line("pbkv-bench", exc, "server") or _trace_problem(s.trace, exc)) from None
    # A request larger than the device cannot be served under any policy: say so before the runs.
    largest, need = largest_request(plan.records)
    device = s.device_tokens if s.device_tokens is not None else plan.hw.device_kv_tokens
    if need > device:
        raise _fail(f"request too large: {largest} needs {need:,} tokens of KV cache (prompt + output), the device "
                    f"holds {device:,}; no cache policy can serve it (give --device-tokens >= {need} or a larger "
                    f"profile)")
    _check_page_size(s.page_size, plan.records)
    meta = trace_meta(s.trace)
    if meta is not None and meta.note:
        console.print(f"trace written by {escape(meta.writer)}: {escape(meta.note)}", highlight=False, soft_wrap=True)


def _check_page_size(page_size: int | None, records: list) -> None:
    """Refuse (one line, exit 2) a ``--page-size`` larger than every prompt of the trace, before the
    runs: only whole pages are cached (SGLang's paged pool; a prompt's tail is prefilled every
    time), so no prompt would put anything in the cache and every policy would replay alike."""
    from pbkv_contract.trace import InvocationRecord

    if page_size is None:
        return
    # the tokens the engine pages (its prompt's blocks), as to_units counts them
    longest = max((sum(rec.tokens_per_block()) for rec in records if isinstance(rec, InvocationRecord)), default=0)
    if page_size > longest:
        raise _fail(f"--page-size {page_size:,}: no prompt of the trace fills one page (the longest has {longest:,} "
                    f"tokens); only whole pages are cached, as in SGLang, so nothing would be cached and every "
                    f"policy would replay alike; give --page-size <= {longest}")


def _replay_policies(s: ReplaySettings, plan: _ReplayPlan) -> tuple[dict[str, dict], dict[str, dict]]:
    """Replay every listed policy, then the scale-only ones; ``(listed results, all replayed)``,
    each ``{policy: summary}`` with the gap-closed and latency measures added to the listed ones."""
    from pbkv_server.engine.policies import BASELINE_POLICY, REFERENCE_POLICY
    from pbkv_server.predictors import make_predictor
    from pbkv_server.sim.measures import add_measures, host_value
    from pbkv_server.sim.report import add_gap_closed
    from pbkv_server.sim.simulator import ReplayOptions, SimulationError, simulate

    from pbkv_server.sim.progress import ReplayBar, replay_progress

    results, scale = {}, {}
    with replay_progress(err_console) as progress:
        for name in plan.policies + plan.scale_only:
            label = f"{name} (gap)" if name in plan.scale_only else name
            bar = ReplayBar(progress, label, name, len(plan.workload.units), order_runs=s.order_runs)
            options = ReplayOptions(
                concurrency=s.concurrency, timeline_bins=s.timeline_bins, slo=plan.slo, order_runs=s.order_runs,
                predictor_factory=lambda: make_predictor(s.predictor, s.horizon, plan.records, app=plan.trace_app),
                on_workflow_end=bar)
            try:
                # one replica replays on one engine (no router), as a single server
                result = simulate(plan.workload, _replay_config(s, name, plan.hw, plan.host), options,
                                  replicas=s.replicas, router=s.router if s.replicas > 1 else None)
            except (SimulationError, ValueError) as exc:
                raise _fail(f"{name}: {exc}") from None
            bar.finish()
            device, host_size = result.engine.cache.device_capacity, result.engine.cache.host_capacity
            result.summary.update(predictor=s.predictor, profile=plan.hw.name, concurrency=s.concurrency,
                                  device_tokens=device, host_tokens=host_size, host_ratio=host_size / device,
                                  page_size=s.page_size, hints=s.hints)  # hints: False under --no-hints
            (scale if name in plan.scale_only else results)[name] = result.summary
    replayed = {**results, **scale}
    ends = {p: (replayed.get(p) or {}).get("hit_rate") for p in (BASELINE_POLICY, REFERENCE_POLICY)}
    add_gap_closed(results, BASELINE_POLICY, ends[BASELINE_POLICY], REFERENCE_POLICY, ends[REFERENCE_POLICY])
    add_measures(results, replayed.get(BASELINE_POLICY), replayed.get(REFERENCE_POLICY), host_value(plan.hw))
    return results, replayed


def _print_replay(s: ReplaySettings, plan: _ReplayPlan, results: dict[str, dict], replayed: dict[str, dict]) -> None:
    """The three tables, the no-difference line and the cluster lines; sets ``plan.title`` (the plot's)."""
    from pbkv_server.engine.policies import BASELINE_POLICY, REFERENCE_POLICY
    from pbkv_server.sim.capacity import largest_request
    from pbkv_server.sim.cluster import cluster_line
    from pbkv_server.sim.measures import CAPTURE_NOTE, no_difference_verdict, trace_block_tokens
    from pbkv_server.sim.report import breakdown_table, latency_table, results_table
    from pbkv_server.sim.serving_report import serving_tables

    hw, workload = plan.hw, plan.workload
    ends = {p: (replayed.get(p) or {}).get("hit_rate") for p in (BASELINE_POLICY, REFERENCE_POLICY)}
    first = results[plan.policies[0]]
    tier = (f"device {first['device_tokens']} tok, host {first['host_tokens']} tok ({first['host_ratio']:.3g}x)")
    title = (f"{s.trace.name}: {workload.workflow_count} workflows, {workload.invocations} invocations, "
             f"predictor {s.predictor}, C={s.concurrency}, {hw.name}, {tier}; device-hit gap closed: 0 = "
             f"{BASELINE_POLICY} {_rate(ends[BASELINE_POLICY])}, 1 = {REFERENCE_POLICY} {_rate(ends[REFERENCE_POLICY])} "
             "(above 1: more device hits than opt, which does not prefetch: a prefetched host block "
             "hits on the device)")
    if s.replicas > 1:
        title += f"; {s.replicas} replicas ({first['device_tokens']} device tok each), router {s.router}"
    plan.title = title
    saved_note = (f"prefill saved = device hits + {first['host_value']:.3f} x host hits, share of prompt tokens "
                  f"(a host hit saves 1 - load/prefill time of a token under {hw.name})")
    console.print(results_table(results, title, caption=saved_note))
    speedup = f"speedup vs {BASELINE_POLICY} = {BASELINE_POLICY} mean latency / policy mean latency (x, >1 faster)"
    console.print(latency_table(results, f"latency (simulated seconds), {tier}; {speedup}", caption=CAPTURE_NOTE))
    console.print(breakdown_table(results, f"where the mean workflow latency goes (simulated seconds), {tier}; "
                                           f"{speedup}"))
    for table in serving_tables(results, tier):
        console.print(table)
    verdict = no_difference_verdict(replayed, BASELINE_POLICY, trace_block_tokens(plan.records, s.page_size),
                                    first["device_tokens"], first["host_tokens"], largest_request(plan.records)[1],
                                    s.page_size)
    if verdict is not None:
        console.print(f"[bold]{escape(verdict)}[/]", highlight=False, soft_wrap=True)
    for name in results if s.replicas > 1 else ():
        console.print(cluster_line(name, results[name]), highlight=False)
    for line in engine_model_lines(results):
        console.print(escape(line), highlight=False, soft_wrap=True)


def engine_model_lines(results: dict[str, dict]) -> list[str]:
    """One line per policy whose replay retracted requests or ran out of memory (engine model
    sglang): how often, and that the real engine would have aborted a request (OOM)."""
    lines = []
    for name, r in results.items():
        if r.get("retractions"):
            lines.append(f"{name}: {r['retractions']} requests retracted when the KV cache ran out "
                         f"({r.get('retracted_tokens', 0):,} tokens prefilled again)")
        if r.get("oom_events"):
            lines.append(f"{name}: could not have fit: {r['oom_events']} decode steps where one request alone had no "
                         f"KV room; the real engine aborts it (out of memory)")
    return lines


def _write_outputs(json_out: Path | None, plot: Path | None, write_json_to: Callable[[Path], None],
                   plot_to: Callable[[Path], None]) -> None:
    """Write the ``--json`` and ``--plot`` files that were asked for, saying so; an OS error is one line.

    Each is written aside and renamed (:func:`~pbkv_contract.files.replace_file`, its folders
    made): a run stopped while writing keeps the previous results file whole."""
    written = []
    try:
        for path, write in ((json_out, write_json_to), (plot, plot_to)):
            if path is not None:
                replace_file(path, write)
                written.append(path)
    except OSError as exc:
        raise _fail(f"cannot write the results: {exc}") from None
    for path in written:  # after the writes: a closed stdout is not "cannot write the results"
        console.print(f"wrote {path}")


@command(app, AdviseSettings)
def advise(ctx: typer.Context, s: AdviseSettings) -> None:
    """Say whether PBKV pays on this trace and hardware: working set, capacity, regime, every
    policy's speedup over LRU (L_lru / L_policy) and the offline reference's, and one verdict line."""
    import json as _json

    from pbkv_contract.trace import TraceFormatError, read_trace, trace_meta
    from pbkv_server.engine.policies import REFERENCE_POLICY
    from pbkv_server.sim.advise import advice_lines, advise as run_advise, advised_policies, plot_advice
    from pbkv_server.sim.progress import ReplayBar, replay_progress
    from pbkv_server.sim.simulator import SimulationError

    if not s.reference and _typed(ctx, "order_runs"):
        raise _fail("--order-runs sets the offline reference's runs and --no-reference skips it: give one of them")
    _check_hardware_options(ctx, s)
    hw = _advise_hardware(s)  # every check before the first replay: one line and exit 2 each
    slo = _slo(s.slo_ttft, s.slo_tpot)
    try:
        _say_reading(s.trace)
        records = read_trace(s.trace)
        meta = trace_meta(s.trace)
        if meta is not None and meta.note:
            console.print(f"trace written by {meta.writer}: {meta.note}", highlight=False, markup=False, soft_wrap=True)
        policies = None if s.reference else [p for p in advised_policies(s.engine) if p != REFERENCE_POLICY]
        with replay_progress(err_console) as progress:  # a bar with time left per replay (stderr)
            advice = run_advise(records, hw, concurrency=s.concurrency, host_ratio=s.host_ratio,
                                predictor=s.predictor, engine=s.engine, trace=s.trace.name, slo=slo,
                                policies=policies, order_runs=s.order_runs,
                                bar=lambda name, units, runs: ReplayBar(progress, name, name, units, order_runs=runs))
    except (TraceFormatError, OSError, ValueError, ImportError, SimulationError) as exc:
        raise _fail(missing_module_line("pbkv-bench", exc, "server") or _trace_problem(s.trace, exc)) from None
    try:
        for line in advice_lines(advice):
            console.print(line, highlight=False, markup=False, soft_wrap=True)
    finally:  # as replay's: a closed stdout loses no result file
        _write_outputs(s.json_out, s.plot,
                       lambda path: path.write_text(_json.dumps(advice.to_json(), indent=2) + "\n"),
                       lambda path: plot_advice(str(path), advice))


def _advise_hardware(s: AdviseSettings) -> Any:
    """The checks of ``advise``'s options, in order (one line and exit 2 each; the hardware options'
    own, :func:`_check_hardware_options`, come first); the hardware profile."""
    from pbkv_server.hardware.profiles import get_profile, host_tokens_for
    from pbkv_server.sim.advise import MAX_TP, custom_profile
    from pbkv_server.sim.shipped import ENGINES

    if s.engine not in ENGINES:
        raise _fail(f"unknown --engine {s.engine!r}; known: {', '.join(ENGINES)}")
    for flag, value in (("--concurrency", s.concurrency), ("--tp", s.tp)):
        if value < 1:
            raise _fail(f"{flag} must be >= 1, got {value}")
    if s.tp > MAX_TP:
        raise _fail(f"--tp must be at most {MAX_TP} GPUs (GB200 NVL72, the largest NVLink domain), got {s.tp}")
    _check_predictor(s.predictor)
    _check_outputs(s.trace, s.json_out, s.plot, _advise_result)
    try:
        hw = (custom_profile(s.gpu_memory, s.model, s.tp, s.gpu) if s.gpu_memory is not None
              else get_profile(s.profile or DEFAULT_PROFILE))
    except (KeyError, ValueError) as exc:
        raise _fail(exc.args[0]) from None
    try:
        host_tokens_for(hw, None, None, s.host_ratio)
    except ValueError as exc:
        raise _fail(f"--host-ratio: {exc}") from None
    if s.plot is not None:  # before the runs: a missing plotting extra fails at once, not after them
        try:
            importlib.import_module("matplotlib")
        except ImportError as exc:
            raise _fail(missing_module_line("pbkv-bench", exc, "server") or str(exc)) from None
    return hw


def _rate(value: float | None) -> str:
    return "(not run)" if value is None else f"{value:.3f}"


@app.command()
def policies() -> None:
    """List the registered cache policies: what each needs and does, and where it runs."""
    from rich import box
    from rich.table import Table

    from pbkv_server.engine.policies import available_policies, policy_info

    # Whole names at any width (80 columns when piped): names and SGLang names never wrap or get
    # cut, one backend per line, two-line headers; only the rule wraps.
    names = available_policies()
    infos = [policy_info(name) for name in names]
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("name", no_wrap=True, min_width=max(map(len, names)))
    for col in ("pre-\ndicts", "pre-\nfetch", "off-\nline", "runs\non"):
        table.add_column(col, no_wrap=True)
    table.add_column("SGLang\nname", no_wrap=True, min_width=max((len(i.sglang_name or "-") for i in infos), default=1))
    table.add_column("rule", min_width=16)
    for name, info in zip(names, infos):
        table.add_row(name, _yes(info.predictive), _yes(info.prefetches), _yes(info.offline),
                      "\n".join(sorted(info.backends)), info.sglang_name or "-", info.summary)
    console.print(table)


def _yes(flag: bool) -> str:
    return "yes" if flag else "-"


@app.command()
def profiles() -> None:
    """List the hardware profiles and where their numbers come from."""
    from rich import box
    from rich.table import Table

    from pbkv_server.hardware.profiles import PROFILES
    from pbkv_server.sim.report import _tokens

    # Fits 80 columns with whole names: light box, two-line headers, the name column never
    # wrapped or cut (the numeric columns are narrow enough to take what is left).
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, padding=(0, 1, 0, 0))
    table.add_column("name", no_wrap=True, min_width=max((len(n) for n in PROFILES), default=4))
    for col in ("prefill\ntok/s", "decode\nbase ms", "ms per\n1k ctx", "PCIe\nGB/s", "KV\nKiB", "device\ntok",
                "host\ntok"):
        table.add_column(col, justify="right", no_wrap=True)
    for p in PROFILES.values():
        table.add_row(p.name, f"{p.prefill_tokens_per_s:.0f}",
                      f"{p.decode_base_s * 1e3:.1f}", f"{p.decode_per_token_s * 1e6:.3f}",
                      f"{p.pcie_bytes_per_s / 1e9:.1f}", f"{p.kv_bytes_per_token / 1024:g}",
                      _tokens(p.device_kv_tokens), _tokens(p.host_kv_tokens))
    console.print(table)
    for p in PROFILES.values():
        console.print(f"[bold]{p.name}[/]: {p.description}. Source: {p.source}", highlight=False)


def _register_live_replay() -> None:
    """Add ``live-replay`` if the SGLang helper's ``pbkv_server.loadgen.live_replay`` module exists."""
    try:
        if importlib.util.find_spec("pbkv_server.loadgen.live_replay") is None:
            return
        command = importlib.import_module("pbkv_server.loadgen.live_replay").command
    except Exception as exc:  # a broken optional module must not take the whole CLI down
        logging.getLogger(__name__).debug("live-replay unavailable: %s", exc)
        return
    app.command("live-replay")(command)


_register_live_replay()
app.command("live-compare")(importlib.import_module("pbkv_server.loadgen.live_compare").command)
app.command("probe-profile")(importlib.import_module("pbkv_server.loadgen.probe").command)
app.add_typer(study_app, name="study")  # pbkv_server/sim/study/cli.py: paper sensitivity studies, regime sweep


if __name__ == "__main__":
    app()
