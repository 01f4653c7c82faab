"""The main job of every example, end to end (``docs/architecture.md``, "Pipeline").

1. start the embedded pbkv-server (sim engine) on 127.0.0.1 with the example's scenario;
2. run the real app over training and test tasks with real concurrency, recording traces
   through the PBKV SDK (one JSONL file per split);
   then give the traces nominal, seeded timing (``--timing nominal``, the default:
   :func:`pbkv_server.sim.nominal.retime`), so the rest depends on the seed, not on how loaded
   the machine was while the app ran;
3. train the workflow predictor on the training traces (``pbkv-predictor train``);
4. replay the test traces under every policy at the paper's concurrency and a named hardware
   profile, with the capacities of the chosen setup (:mod:`examples.common.capacity`: ``paper``,
   the device from the profile's GPU memory and a host tier of the same size, or ``trace``);
5. print the Table-1-style comparison, save the plots, optionally write JSON.

Each example supplies an :class:`ExampleSpec`; everything else is shared here.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable, Mapping, Sequence

from rich.console import Console

from examples.common import capacity as cap
from examples.common import integration as integ
from examples.common.data import DataError, describe_tasks
from examples.common.report import plot_bars, plot_hit_rate_over_time, print_results
from examples.common.results import PolicyResult, compare, to_json
from pbkv_contract.files import shared_output, special_file, write_target
from pbkv_server.engine.policies import (
    BASELINE_POLICY, DEFAULT_POLICY, REFERENCE_POLICY, REPLAY, available_policies, policy_info,
)
from pbkv_server.sim.measures import host_value
from pbkv_server.sim.serving_metrics import Slo
from pbkv_server.sim.shipped import DEFAULT_ENGINE, ENGINES, alternative_label, best_shipped
from pbkv_server.hardware.profiles import DEFAULT_PROFILE, get_profile

__all__ = ["ExampleSpec", "RunOptions", "run_example", "check_outputs", "OutputPathError", "seeded_split",
           "RESULT_FILES", "replay_policies", "run_name", "summary_line", "TIMINGS"]

#: Trace timings a run can replay: ``nominal`` (seeded model, :mod:`pbkv_server.sim.nominal`; the
#: same seed gives the same traces and figures on any machine) or ``recorded`` (the app run's wall clock).
TIMINGS = ("nominal", "recorded")

#: Predictor epochs of a --quick run (the CLI default, 60 with early stopping, is for full runs).
QUICK_EPOCHS = 15


@dataclass
class ExampleSpec:
    """What an example plugs into the shared pipeline.

    Attributes:
        name: module name, e.g. ``"hover_langchain"`` (output folder name).
        app: hint app name (selects the scenario and the predictor).
        title: human title for tables and plots.
        replay_concurrency: the paper's concurrency for this workload (workflows in flight).
        load_tasks: returns all tasks of the data set (raises ``DataError``).
        split: ``(tasks, n_train, n_test, seed) -> (train, test)``, disjoint.
        run_tasks: ``async (tasks, server_url, trace_path, concurrency, on_done) -> outcomes``:
            runs the real app over ``tasks`` with at most ``concurrency`` in flight, recording a
            trace; ``on_done()`` is called once per finished task. Outcomes are JSON-ready dicts.
        sizes: ``{"full": (n_train, n_test), "quick": (n_train, n_test)}``.
        static_graph: the app's declared static agent graph (for policies that read one, such as
            kvflow), or ``None`` (they learn it from the trace).
        summarise_outcomes: ``outcomes -> dict`` of app-level figures (loops per task property, ...).
        message_conventions: the ways the app can build its prompts, default first (empty: one
            way); a chosen one reaches ``run_tasks`` as ``messages=NAME``.
        tool_gaps: per agent, the ``(low, high)`` seconds of the tool the app runs after that
            agent's calls, for nominal timing (:func:`pbkv_server.sim.nominal.retime`); agents
            not named hand off after :data:`pbkv_server.sim.nominal.HANDOFF_GAP_S`.
    """

    name: str
    app: str
    title: str
    replay_concurrency: int
    load_tasks: Callable[[], list[Any]]
    split: Callable[[list[Any], int, int, int], tuple[list[Any], list[Any]]]
    run_tasks: Callable[..., Awaitable[list[dict[str, Any]]]]
    sizes: Mapping[str, tuple[int, int]]
    static_graph: Mapping[str, Sequence[str]] | None = None
    summarise_outcomes: Callable[[list[dict[str, Any]]], dict[str, Any]] | None = None
    message_conventions: tuple[str, ...] = ()
    tool_gaps: Mapping[str, tuple[float, float]] = field(default_factory=dict)


@dataclass
class RunOptions:
    """Options of one run (the runner's CLI flags).

    Attributes:
        quick: reduced sizes (``spec.sizes["quick"]``) for CI.
        n_train / n_test: override the task counts.
        app_concurrency: workflows the app runs at once against the live server.
        replay_concurrency: override of the paper's replay concurrency.
        profile: hardware profile name (``pbkv_server.hardware.profiles``).
        setup: replay capacities, ``"paper"`` (device from the profile's GPU memory, host tier =
            device: the PBKV paper's SGLang HiCache with ``HICACHE_RATIO=1``) or ``"trace"`` (the
            working-set rule of :mod:`examples.common.capacity`, host tier 2x).
        pressure: device capacity as a fraction of the live working set (``trace`` setup).
        host_ratio: host-tier KV capacity / device capacity; ``None``: the setup's (1 for
            ``paper``, SGLang HiCache's default 2 for ``trace``); 0 = no host tier.
        messages: the app's prompt convention (``ExampleSpec.message_conventions``); ``None``:
            the default one. A non-default convention runs in ``OUT_DIR/<example>-<messages>``.
        seed: seeds task split, scenario and training.
        out_dir: where traces, model, plots and JSON go.
        json_out: path of the JSON summary, or ``None``.
        belady: also replay the offline reference policy (``REFERENCE_POLICY``).
        epochs: predictor training epochs (``None``: :data:`QUICK_EPOCHS` with ``quick``, else
            the predictor's default).
        timing: the traces' times (:data:`TIMINGS`): ``nominal`` (default; deterministic per
            seed) or ``recorded`` (the wall clock of the app run: tool and framework gaps as this
            machine ran them, so figures move with its load).
        slo_ttft_ms / slo_tpot_ms: goodput's objectives, ms (``None``: not checked; with neither,
            no goodput), :class:`pbkv_server.sim.serving_metrics.Slo`.
    """

    quick: bool = False
    n_train: int | None = None
    n_test: int | None = None
    app_concurrency: int = 16
    replay_concurrency: int | None = None
    profile: str = DEFAULT_PROFILE
    setup: str = cap.DEFAULT_SETUP
    pressure: float = cap.DEFAULT_PRESSURE
    host_ratio: float | None = None
    messages: str | None = None
    seed: int = 0
    out_dir: Path = Path("runs")
    json_out: Path | None = None
    belady: bool = True
    epochs: int | None = None
    timing: str = TIMINGS[0]
    slo_ttft_ms: float | None = None
    slo_tpot_ms: float | None = None


class OutputPathError(ValueError):
    """An output path of the run (``--json``, ``--out-dir`` and the files under it) cannot be written."""


#: Files one run leaves in ``OUT_DIR/<example>`` (all replaced together, only when the run succeeds).
RESULT_FILES = ("train.jsonl", "test.jsonl", "predictor.pt", "hit_rate_over_time.png", "bars.png")


def check_outputs(spec: ExampleSpec, opts: RunOptions) -> None:
    """Check, before any work, that every output path of the run can be written.

    Checked: ``--json`` is not a directory and its folder exists or can be created; ``--out-dir``
    and ``OUT_DIR/<example>`` are directories or can be created; no result file name
    (:data:`RESULT_FILES`) is taken by a directory; ``--json`` is neither one of the result files
    nor in the staging folder. "Can be created" means the nearest existing ancestor is a writable
    directory.

    Raises:
        OutputPathError: naming the path and the reason.
    """
    out = Path(opts.out_dir) / run_name(spec, opts)
    for folder, flag in ((Path(opts.out_dir), "--out-dir"), (out, "--out-dir"), (_staging_dir(out), "--out-dir")):
        if folder.exists() and not folder.is_dir():
            raise OutputPathError(f"{flag}: {folder} exists and is not a directory")
    _check_creatable(out, "--out-dir")
    for name in RESULT_FILES:
        if (out / name).is_dir():
            raise OutputPathError(f"--out-dir: {out / name} is a directory; the run writes a file there")
    if opts.json_out is not None:
        path = Path(opts.json_out)
        if path.is_dir():
            raise OutputPathError(f"--json: {path} is a directory; give a file path such as {path / (spec.name + '.json')}")
        if (kind := special_file(path)) is not None:  # a device or fifo would be replaced by a file
            raise OutputPathError(f"--json: {path} is {kind}, not a regular file; give a file path")
        if path.exists() and not os.access(path, os.W_OK):
            raise OutputPathError(f"--json: {path} is not writable")
        _check_creatable(path.parent, "--json")
        # The result files are moved into OUT_DIR/<example> before the summary is written: a
        # --json on one of them would replace it; in the staging folder it would be removed.
        problem = shared_output([("--out-dir file", out / name) for name in RESULT_FILES] + [("--json", path)])
        if problem is not None:
            raise OutputPathError(problem)
        if path.absolute().resolve().is_relative_to(_staging_dir(out).absolute().resolve()):
            raise OutputPathError(f"--json: {path} is in the staging folder {_staging_dir(out)}, which the run removes")


def run_example(spec: ExampleSpec, opts: RunOptions, console: Console | None = None) -> dict[str, Any]:
    """Run the whole main job of one example and return its JSON summary.

    Results are written only when the run succeeds: every file goes to a staging folder
    ``OUT_DIR/<example>.partial`` first, and only a finished run moves the whole set
    (:data:`RESULT_FILES`) into ``OUT_DIR/<example>`` and writes the ``--json`` summary. A failed
    run removes its staging folder, so ``OUT_DIR/<example>`` keeps the previous complete run
    (traces, model and plots that belong together) and never a mix of old and new files.

    Raises:
        OutputPathError: an output path cannot be written (checked before the run starts).
        ValueError: unknown hardware profile (checked before the run starts).
        examples.common.data.DataError: the data set is missing, malformed or too small.
        RuntimeError: a stage failed (the message names the stage).
    """
    console = console or Console()
    t0 = time.perf_counter()
    try:
        get_profile(opts.profile)
    except KeyError as exc:
        raise ValueError(exc.args[0]) from None
    if opts.timing not in TIMINGS:
        raise ValueError(f"unknown timing {opts.timing!r}; choose from {', '.join(TIMINGS)}")
    if opts.setup not in cap.SETUPS:
        raise ValueError(f"unknown setup {opts.setup!r}; choose from {', '.join(cap.SETUPS)}")
    if opts.messages is not None and opts.messages not in spec.message_conventions:
        offered = ", ".join(spec.message_conventions) or "none: this app builds its prompts one way"
        raise ValueError(f"--messages {opts.messages!r} is not a message convention of {spec.name} ({offered})")
    check_outputs(spec, opts)
    n_train, n_test = spec.sizes["quick" if opts.quick else "full"]
    n_train, n_test = opts.n_train or n_train, opts.n_test or n_test
    # Load and split before creating any folder: a missing data set leaves nothing behind.
    tasks = spec.load_tasks()
    try:
        train, test = spec.split(tasks, n_train, n_test, opts.seed)
    except ValueError as exc:
        raise DataError(f"{exc}; {describe_tasks(tasks)}") from None

    out = Path(opts.out_dir) / run_name(spec, opts)
    stage = _staging_dir(out)
    shutil.rmtree(stage, ignore_errors=True)  # leftovers of a killed run
    stage.mkdir(parents=True)
    try:
        summary = _run_stages(spec, opts, console, train, test, stage, out, t0)
        out.mkdir(parents=True, exist_ok=True)
        for name in RESULT_FILES:
            if (stage / name).is_file():
                os.replace(stage / name, out / name)
        if opts.json_out:
            _write_json_atomic(Path(opts.json_out), summary)
            console.print(f"JSON summary: {opts.json_out}")
    except BaseException:
        console.print(f"[yellow]run failed: nothing of it was kept; {out} still holds the previous complete run, if any[/yellow]")
        raise
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return summary


def _run_stages(spec: ExampleSpec, opts: RunOptions, console: Console, train: list[Any], test: list[Any],
                stage: Path, out: Path, t0: float) -> dict[str, Any]:
    """Stages 1-5 of the main job, writing into ``stage``; the summary names the final paths under ``out``."""
    console.rule(f"[bold]{spec.title}")
    console.print(f"{len(train)} training tasks, {len(test)} test tasks; app concurrency {opts.app_concurrency}")

    traces = {"train": stage / "train.jsonl", "test": stage / "test.jsonl"}
    outcomes: dict[str, list[dict[str, Any]]] = {}
    timings: dict[str, float] = {}
    with integ.embedded_server(spec.app, seed=opts.seed, profile=opts.profile) as url:
        console.print(f"embedded pbkv-server at {url}")
        for split_name, tasks in (("train", train), ("test", test)):
            t = time.perf_counter()
            outcomes[split_name] = _run_with_progress(spec, tasks, url, traces[split_name], opts, split_name)
            timings[f"app_{split_name}_s"] = time.perf_counter() - t
    for path in traces.values():
        # Workflows finish in scheduling order; training and replay must not depend on it.
        integ.canonicalise_trace(path)
        if opts.timing == "nominal":
            # Nor on the machine's load: wall-clock gaps between calls grow with it.
            integ.retime_trace(path, opts.seed, spec.tool_gaps)
    console.print("trace timing: " + ("nominal (seeded tool and framework gaps, pbkv_server.sim.nominal)"
                                      if opts.timing == "nominal" else "recorded (this run's wall clock)"))
    app_summary = spec.summarise_outcomes(outcomes["train"] + outcomes["test"]) if spec.summarise_outcomes else {}

    t = time.perf_counter()
    model_path = stage / "predictor.pt"
    epochs = opts.epochs or (QUICK_EPOCHS if opts.quick else None)
    integ.train_predictor([traces["train"]], model_path, app=spec.app, seed=opts.seed, epochs=epochs)
    timings["train_s"] = time.perf_counter() - t
    console.print(f"predictor trained on {len(train)} workflows -> {out / model_path.name}")

    concurrency = opts.replay_concurrency or spec.replay_concurrency
    records = integ.read_records(traces["test"])
    ws = cap.working_set(records)
    profile = get_profile(opts.profile)
    capacity = cap.replay_capacity(opts.setup, ws, concurrency, profile.device_kv_tokens, profile.name,
                                   opts.host_ratio, opts.pressure)
    device, host = capacity.device_tokens, capacity.host_tokens
    console.print(
        f"reusable working set W: shared {ws.shared_tokens} tok + {min(concurrency, ws.workflows)} x "
        f"{ws.mean_private_tokens:.0f} tok per workflow = {ws.live_tokens(concurrency):.0f} tok; in flight A = "
        f"{ws.in_flight_tokens(concurrency):.0f} tok"
    )
    console.print(f"{capacity.rule}; concurrency {concurrency}; profile {opts.profile}")
    policies = replay_policies(reference=opts.belady)
    t = time.perf_counter()
    results = integ.replay(
        traces["test"], policies, model_path=model_path, concurrency=concurrency, profile=opts.profile,
        device_tokens=device, host_tokens=host, static_graph=spec.static_graph, app=spec.app, console=_bars(),
        slo=Slo(opts.slo_ttft_ms, opts.slo_tpot_ms),
    )
    timings["replay_s"] = time.perf_counter() - t
    comparisons = compare(results, baseline=BASELINE_POLICY, reference=REFERENCE_POLICY if opts.belady else None,
                          host_value=host_value(profile))
    conv = f", messages {opts.messages}" if opts.messages else ""
    setting = (f"setup {opts.setup}: device {device} tok, host {capacity.host_ratio:g}x, profile {opts.profile}, "
               f"concurrency {concurrency}{conv}")
    title = f"{spec.title}: simulated timing, {setting}"
    print_results(title, results, comparisons, console)
    for graph_policy in (p for p in policies if spec.static_graph is not None and policy_info(p).uses_app_graph):
        # the app declared its graph: compare PBKV with the graph-based baseline (the paper's KVFlow row)
        pb = next(c for c in compare(results, baseline=graph_policy, reference=None) if c.policy == DEFAULT_POLICY)
        console.print(f"{DEFAULT_POLICY} over {graph_policy}: speedup {pb.latency_speedup:.2f}x (>1 faster), "
                      f"hit rate {pb.hit_rate_ratio:.2f}x")
    plot_title = f"{spec.title}\nsimulated timing, {setting}"
    plot_hit_rate_over_time(results, str(stage / "hit_rate_over_time.png"), plot_title)
    plot_bars(results, str(stage / "bars.png"), plot_title)
    plots = {"hit_rate_over_time": str(out / "hit_rate_over_time.png"), "bars": str(out / "bars.png")}
    timings["total_s"] = time.perf_counter() - t0
    console.print(f"plots: {plots['hit_rate_over_time']}, {plots['bars']}; total {timings['total_s']:.0f} s")
    console.print(summary_line(results, opts.profile, concurrency), highlight=False, soft_wrap=True)
    return {
        "example": spec.name, "app": spec.app, "quick": opts.quick, "profile": opts.profile,
        "replay_concurrency": concurrency, "app_concurrency": opts.app_concurrency, "seed": opts.seed,
        "timing": opts.timing,
        "train_tasks": len(train), "test_tasks": len(test),
        "working_set": asdict(ws), "setup": opts.setup, "messages": opts.messages or (spec.message_conventions or (None,))[0],
        "pressure": opts.pressure, "device_tokens": device, "host_tokens": host, "host_ratio": capacity.host_ratio,
        "app_outcomes": app_summary, "timings_s": timings, "plots": plots,
        "traces": {k: str(out / v.name) for k, v in traces.items()},
        "model": str(out / model_path.name), **to_json(results, comparisons),
    }


def summary_line(results: Sequence[PolicyResult], profile: str, concurrency: int) -> str:
    """The run's last line: what the app ran against, where the figures come from, and PBKV's
    speedup over LRU and over the best alternative SGLang ships (by mean latency; issue 35: the
    main job printed 14 policies and no conclusion)."""
    latency = {r.policy: r.mean_latency_s for r in results}
    head = (f"summary: the app ran against pbkv-server's simulator serving {BASELINE_POLICY.upper()} (a scenario wrote "
            f"the replies); the figures replay its recorded test trace in simulated time on profile {profile} at "
            f"concurrency {concurrency}")
    base, ours = latency.get(BASELINE_POLICY), latency.get(DEFAULT_POLICY)
    if not base or not ours:
        return head
    speedup = {p: base / lat for p, lat in latency.items() if lat > 0}
    alternative = best_shipped(speedup, DEFAULT_ENGINE)
    line = f"{head}: {DEFAULT_POLICY} {base / ours:.2f}x faster than LRU"
    if alternative == BASELINE_POLICY:
        return f"{line}, which is the best that {ENGINES[DEFAULT_ENGINE]} ships here"
    return (f"{line} and {latency[alternative] / ours:.2f}x faster than {alternative_label(alternative, DEFAULT_ENGINE)} "
            f"({alternative}, the best alternative {ENGINES[DEFAULT_ENGINE]} ships)")


def run_name(spec: ExampleSpec, opts: RunOptions) -> str:
    """Folder name of a run under ``--out-dir``: the example's name, plus ``-<messages>`` for a
    message convention other than the app's default (so both conventions' runs can be kept)."""
    if opts.messages is None or not spec.message_conventions or opts.messages == spec.message_conventions[0]:
        return spec.name
    return f"{spec.name}-{opts.messages}"


def replay_policies(reference: bool = True) -> list[str]:
    """Policies an example replays: every registered policy the simulator runs online, in
    registration order, then the offline :data:`REFERENCE_POLICY` if ``reference``."""
    online = [p for p in available_policies(REPLAY) if not policy_info(p).offline]
    return online + ([REFERENCE_POLICY] if reference else [])


def _staging_dir(out: Path) -> Path:
    return out.with_name(out.name + ".partial")


def _check_creatable(folder: Path, flag: str) -> None:
    """``folder`` is a directory, or its nearest existing ancestor is a writable directory."""
    probe = folder
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        raise OutputPathError(f"{flag}: cannot create {folder}: {probe} is not a directory")
    # A real probe, not os.access: for root, os.access says "writable" even under /proc.
    try:
        tempfile.TemporaryDirectory(dir=probe, prefix=".pbkv-probe-").cleanup()
    except OSError as exc:
        raise OutputPathError(f"{flag}: cannot write under {probe} ({exc.strerror or exc})") from None


def _write_json_atomic(path: Path, summary: dict[str, Any]) -> None:
    """Write the summary to ``path`` through a temporary file, so a reader never sees half of it; a
    symbolic link is written through (its target replaced, the link kept:
    :func:`pbkv_contract.files.write_target`)."""
    path = write_target(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(_finite(summary), indent=2), encoding="utf-8")
    os.replace(tmp, path)


def _bars() -> Console:
    """The console of the progress bars: stderr, as SGLang's bench_serving puts its bar, so that
    stdout (``> report.txt``) holds the stages and tables and ``2> log`` shows the progress."""
    return Console(stderr=True)


def _run_with_progress(spec: ExampleSpec, tasks: list[Any], url: str, trace: Path, opts: RunOptions,
                       label: str) -> list[dict[str, Any]]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn(f"app run ({label})"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=_bars(), transient=False) as progress:
        bar = progress.add_task(label, total=len(tasks))
        options = {"messages": opts.messages or spec.message_conventions[0]} if spec.message_conventions else {}
        return asyncio.run(spec.run_tasks(tasks, url, str(trace), opts.app_concurrency,
                                          lambda: progress.advance(bar), **options))


def _finite(obj: Any) -> Any:
    """Replace NaN/inf floats by None so the JSON is strict."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def seeded_split(tasks: list[Any], n_train: int, n_test: int, seed: int, reserve: int = 0,
                 note: str = "") -> tuple[list[Any], list[Any], list[Any]]:
    """Shuffle ``tasks`` with ``seed`` and cut ``(reserved, train, test)`` of sizes reserve/n_train/n_test.

    Args:
        note: why ``tasks`` may be fewer than the data file's rows (added to the error message).

    Raises:
        ValueError: not enough tasks for the requested sizes.
    """
    need = reserve + n_train + n_test
    if need > len(tasks):
        why = f" ({note})" if note else ""
        raise ValueError(f"need {need} tasks (reserve {reserve} + train {n_train} + test {n_test}), "
                         f"only {len(tasks)} usable{why}")
    order = list(tasks)
    random.Random(seed).shuffle(order)
    return order[:reserve], order[reserve:reserve + n_train], order[reserve + n_train:need]
