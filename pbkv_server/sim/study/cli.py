"""``pbkv-bench study``: the PBKV paper's sensitivity studies on recorded runs, as figures and a report.

    pbkv-bench study runs/hover_langchain runs/hover_langchain-shared --out-dir docs/study/hover
    pbkv-bench study test.jsonl --model predictor.pt [--train-trace train.jsonl] --out-dir out/

Each RUN is an example's output folder (``test.jsonl``, ``predictor.pt`` and, for the backbone and
horizon studies and for error bars, ``train.jsonl``) or a trace file with ``--model``. For every
run the studies of :mod:`pbkv_server.sim.study.paper` replay its test trace; the command writes one PNG
per study and run (:mod:`pbkv_server.sim.study.plots`), ``report.md``
(:mod:`pbkv_server.sim.study.report`) and ``study.json`` (every run and point) into ``--out-dir``.
Bad input (a missing file, a bad option, an unwritable folder) is one error line and exit status
2, before any replay.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
import time
from pathlib import Path
from typing import Callable, List, Optional

import math

import typer
import typer.core

from pbkv_contract.files import folder_problem, replace_file
from pbkv_contract.settings import first_repeat, list_items
from pbkv_server.engine.policies import DEFAULT_POLICY, REFERENCE_POLICY
from pbkv_server.hardware.profiles import DEFAULT_PROFILE, PAPER_HOST_RATIO
from pbkv_server.predictors.torch_threads import DEFAULT_TORCH_THREADS, limit_torch_threads
from pbkv_server.sim.simulator import MAX_CONCURRENCY
from pbkv_server.predictors.factory import DEFAULT_ONLINE_PREDICTOR

__all__ = ["study", "regime", "study_app"]

#: Files of an example's output folder that a study reads.
TEST_TRACE, TRAIN_TRACE, MODEL = "test.jsonl", "train.jsonl", "predictor.pt"


def study(
    ctx: typer.Context,
    runs: List[Path] = typer.Argument(..., help="example output folders (test.jsonl, predictor.pt, train.jsonl) "
                                                "or one trace file with --model"),
    out_dir: Path = typer.Option(Path("study"), "--out-dir", help="where report.md, study.json and the PNGs go"),
    model: Optional[Path] = typer.Option(None, "--model", help="trained predictor of a trace-file RUN"),
    train_trace: Optional[Path] = typer.Option(None, "--train-trace", help="training trace of a trace-file RUN"),
    labels: Optional[str] = typer.Option(None, "--labels", help="comma-separated run labels (default: folder names)"),
    profile: str = typer.Option(DEFAULT_PROFILE, help="hardware profile (pbkv-bench profiles)"),
    device_tokens: Optional[int] = typer.Option(None, help="device KV tokens (default: the profile's GPU memory)"),
    host_ratio: float = typer.Option(PAPER_HOST_RATIO, help="host tier / device (default 1 = the PBKV paper's HiCache "
                                                            "setting, as pbkv-bench replay; 0 = none)"),
    concurrency: int = typer.Option(72, min=1, max=MAX_CONCURRENCY, help="base concurrency of every study but the sweep (the paper's HoVer 72)"),
    concurrencies: str = typer.Option("8,24,48,72,96,128,192", help="concurrencies of the sweep (Figure 5a)"),
    policies: Optional[str] = typer.Option(None, help="policies of the concurrency sweep (default: every online one)"),
    studies: str = typer.Option("concurrency,backbone,horizon,gamma,rho,noise", help="studies to run"),
    seeds: int = typer.Option(2, help="predictor seeds per point, 1-10 (the model file, then GraphSAGE trained with seeds 1..)"),
    epochs: int = typer.Option(60, help="maximum training epochs of trained backbones (early stopping)"),
    threads: int = typer.Option(DEFAULT_TORCH_THREADS, help="torch CPU threads"),
) -> None:
    """Run the PBKV paper's sensitivity studies (Figures 5a-c, 10-12) and write figures and a report."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from pbkv_server.hardware.profiles import get_profile
    from pbkv_server.sim.progress import StepLines
    from pbkv_server.sim.study.paper import StudySettings, load_records, run_study, study_steps
    from pbkv_server.sim.study.plots import FIGURES, plot_study
    from pbkv_server.sim.study.report import report_markdown

    err = Console(stderr=True, soft_wrap=True)
    fail = _failer(err)

    try:
        settings = StudySettings(
            profile=profile, device_tokens=device_tokens, host_ratio=host_ratio, concurrency=concurrency,
            concurrencies=_ints(concurrencies, "--concurrencies"), sweep_policies=_policies(policies),
            studies=_names(studies) or [], seeds=seeds, epochs=epochs)
        get_profile(profile)
        settings.check()
        inputs = _inputs(runs, model, train_trace, labels)
    except (ValueError, KeyError) as exc:
        raise fail(exc.args[0] if exc.args else str(exc)) from None
    if threads < 1:
        raise fail("--threads must be >= 1")
    problem = folder_problem(out_dir)
    if problem:
        raise fail(f"--out-dir {out_dir}: {problem}")
    saved = limit_torch_threads(threads, [str(m) for _, _, m, _ in inputs])  # before a model loads
    if saved is not None:
        import torch

        torch.set_flush_denormal(True)  # near-converged training makes denormals, slow on x86 CPUs
        ctx.call_on_close(lambda: (limit_torch_threads(saved), torch.set_flush_denormal(False)))
    try:
        loaded = [(label, load_records(trace), str(model_path), load_records(train) if train else None)
                  for label, trace, model_path, train in inputs]
    except (OSError, ValueError) as exc:
        raise fail(str(exc)) from None

    t0 = time.perf_counter()
    results, figures = [], {}
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, transient=False) as progress:
        for label, records, model_path, train in loaded:
            seeds_here = settings.seeds if train is not None else 1
            tasks = {s: progress.add_task(f"{label}: {s}", total=n)
                     for s, n in study_steps(settings, seeds_here,
                                             [s for s in settings.studies
                                              if train is not None or s not in ("backbone", "horizon")]).items()}
            lines = StepLines(progress, label, tasks)  # a log (stderr not a terminal) gets lines
            try:
                result = run_study(records, model_path, settings, train_records=train, on_replay=lines.advance,
                                   on_note=lambda note, label=label: progress.console.print(f"{label}: {note}"))
            except (ValueError, RuntimeError) as exc:
                raise fail(f"{label}: {exc}") from None
            lines.say()
            results.append((label, result))
            figures[label] = {}
            points = result.points
            for s in settings.studies:
                if any(p.study == s for p in points):
                    name = f"{file_slug(label)}_{FIGURES[s][0]}.png"
                    plot_study(s, points, str(out_dir / name), f"{label}, {_setting(result)}")
                    figures[label][s] = name
    command = "pbkv-bench " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:] else "pbkv-bench study"
    report = report_markdown(results, command, figures, time.perf_counter() - t0)
    out_dir.mkdir(parents=True, exist_ok=True)
    payload = json.dumps({label: _finite(r.to_json()) for label, r in results}, indent=1)
    _write_text(out_dir / "report.md", report)
    _write_text(out_dir / "study.json", payload)
    Console().print(f"wrote {out_dir / 'report.md'}, {out_dir / 'study.json'} and "
                    f"{sum(len(f) for f in figures.values())} figures")


def _inputs(runs: list[Path], model: Path | None, train_trace: Path | None,
            labels: str | None) -> list[tuple[str, Path, Path, Path | None]]:
    """(label, test trace, model, training trace or None) per RUN; ``ValueError`` for a missing file."""
    names = _names(labels)
    if names and len(names) != len(runs):
        raise ValueError(f"--labels names {len(names)} runs, {len(runs)} given")
    out = []
    for i, run in enumerate(runs):
        if run.is_dir():
            trace, model_path, train = run / TEST_TRACE, run / MODEL, run / TRAIN_TRACE
            if not trace.is_file() or not model_path.is_file():
                raise ValueError(f"{run} holds no {TEST_TRACE} and {MODEL} (an example's output folder)")
            out.append((names[i] if names else run.name, trace, model_path, train if train.is_file() else None))
        elif run.is_file():
            if model is None or len(runs) > 1:
                raise ValueError("a trace-file RUN needs --model (and is the only RUN)")
            if not model.is_file():
                raise ValueError(f"--model {model}: no such file")
            if train_trace is not None and not train_trace.is_file():
                raise ValueError(f"--train-trace {train_trace}: no such file")
            out.append((names[i] if names else run.stem, run, model, train_trace))
        else:
            raise ValueError(f"{run}: no such file or folder")
    return out


def _failer(err) -> Callable[[str], typer.Exit]:
    """The ``fail(message)`` of a command: prints one error line on ``err`` (a rich console on
    stderr) and returns the ``typer.Exit`` (status 2) for the caller to raise."""
    from rich.markup import escape

    def fail(message: str) -> typer.Exit:
        err.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
        return typer.Exit(code=2)
    return fail


def _ints(text: str, flag: str) -> list[int]:
    """``text`` as sorted distinct concurrencies (each 1.. :data:`MAX_CONCURRENCY`)."""
    values = sorted(_number_list(text, flag, int, "whole numbers"))
    if not 1 <= values[0] <= values[-1] <= MAX_CONCURRENCY:
        raise ValueError(f"{flag} must be in 1..{MAX_CONCURRENCY:,}, got {text!r}")
    return values


def _number_list(text: str, flag: str, kind: Callable[[str], float], what: str) -> list:
    """The items of a comma-separated number option, read as every list option is read (a
    policy list too): an empty item (a doubled or trailing comma) or a value given twice is
    refused, as are values that are not finite numbers.

    Raises:
        ValueError: one line naming ``flag``.
    """
    items = list_items(text, flag)
    try:
        values = [kind(v) for v in items]
    except ValueError:
        raise ValueError(f"{flag} must be comma-separated {what}, got {text!r}") from None
    bad = next((v for v in values if not math.isfinite(v)), None)
    if bad is not None:
        raise ValueError(f"{flag} must be finite numbers, got {bad!r}")
    twice = first_repeat(values)
    if twice is not None:
        raise ValueError(f"{flag} {text!r}: {twice:g} is listed twice")
    return values


def _names(text: str | None) -> list[str] | None:
    return [v.strip() for v in text.split(",") if v.strip()] if text else None


def _policies(text: str | None) -> list[str] | None:
    """``--policies`` read as every command line reads a policy list (an empty item or a repeat
    is refused); ``None`` when not given."""
    from pbkv_server.engine.policies import REPLAY, parse_policy_list

    return None if text is None else parse_policy_list(text, REPLAY, "--policies")


def file_slug(label: str) -> str:
    """``label`` as a file name stem (runs of other characters than ``A-Za-z0-9._-`` become ``-``;
    ``run`` if nothing is left): the figures of a study are named after their run's label."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", label).strip("-") or "run"


def _setting(result) -> str:
    t, s = result.trace, result.settings
    return (f"{t['workflows']} workflows, profile {t['profile']}, device {t['device_tokens']:,} tok, "
            f"host {s.host_ratio:g}x, base C={s.concurrency}, seeds {t['seeds']}")


def _finite(value):
    """``value`` with NaN/inf replaced by None (strict JSON)."""
    from pbkv_server.sim.report import jsonable

    return jsonable(value)


# --------------------------------------------------------------------------- regime study

#: The paper's replay concurrency of each example (``ExampleSpec.replay_concurrency`` in
#: ``examples/*/run.py``), used when the run folder has no ``--json`` summary next to it.
EXAMPLE_CONCURRENCY = {"hover_langchain": 72, "swe_autogen": 24, "finance_crewai": 48}
#: Synthetic workloads' profile and concurrency (issue 24's codegen rows: h100-qwen2.5-32b, C=16).
SYNTH_PROFILE, SYNTH_CONCURRENCY = "h100-qwen2.5-32b", 16
#: The study's workloads when none is named: the three examples' runs and three synthetic graphs.
DEFAULT_WORKLOADS = ("runs/hover_langchain", "runs/swe_autogen", "runs/finance_crewai",
                     "synth:codegen:40:1", "synth:research:60:1", "synth:supervisor:40:1")
#: Most workflows of a synthetic workload under ``--quick``.
QUICK_SYNTH_WORKFLOWS = 12


def regime(
    ctx: typer.Context,
    workloads: Optional[List[str]] = typer.Argument(None, help="example run folders (test.jsonl + predictor.pt), "
                                                               "synth:GRAPH[:WORKFLOWS[:SEED]] or trace files "
                                                               f"(default: {' '.join(DEFAULT_WORKLOADS)})"),
    out_dir: Path = typer.Option(Path("study-regime"), "--out-dir", help="where study.json, report.md and the PNGs go"),
    quick: bool = typer.Option(False, "--quick", help="small grid (device 0.25, 1; host 0, 1) and at most "
                                                      f"{QUICK_SYNTH_WORKFLOWS} synthetic workflows"),
    policies: Optional[str] = typer.Option(None, help="comma-separated policies (default: lru,lae,he,pbkv,"
                                                      "sglang-session,opt; lru and opt are always replayed)"),
    device_fractions: Optional[str] = typer.Option(None, help="f values: device = A + f x W (default 0.25,0.5,0.75,1,1.5)"),
    host_ratios: Optional[str] = typer.Option(None, help="host tier / device (default 0,1,2)"),
    concurrency_factors: Optional[str] = typer.Option(None, help="x the base concurrency (default 1,2)"),
    predictor: str = typer.Option(DEFAULT_ONLINE_PREDICTOR, help="predictor of trace-file and synthetic workloads "
                                                                 "(example runs use their predictor.pt)"),
    concurrency: int = typer.Option(SYNTH_CONCURRENCY, min=1, max=MAX_CONCURRENCY, help="base concurrency of trace-file and synthetic workloads"),
    profile: str = typer.Option(SYNTH_PROFILE, help="profile of trace-file and synthetic workloads"),
    threads: int = typer.Option(DEFAULT_TORCH_THREADS, help="torch CPU threads (trained predictors)"),
) -> None:
    """Sweep device, host and concurrency around the working set; figures, report and JSON."""
    import dataclasses
    import tempfile

    from rich.console import Console

    from pbkv_server.hardware.profiles import get_profile
    from pbkv_server.sim.study.regime import QUICK, RegimeSettings, run_workload
    from pbkv_server.sim.simulator import SimulationError
    from pbkv_server.sim.study.paper import load_records
    from pbkv_server.sim.study.plots import plot_regime
    from pbkv_server.sim.study.report import regime_markdown

    err = Console(stderr=True, soft_wrap=True)
    fail = _failer(err)

    try:
        settings = QUICK if quick else RegimeSettings()
        changes = {k: tuple(_floats(v, f"--{k.replace('_', '-')}")) for k, v in
                   (("device_fractions", device_fractions), ("host_ratios", host_ratios),
                    ("concurrency_factors", concurrency_factors)) if v is not None}
        if policies is not None:
            changes["policies"] = tuple(_policies(policies) or ())
        settings = dataclasses.replace(settings, **changes)
        settings.check()
        if concurrency < 1:
            raise ValueError("--concurrency must be >= 1")
        get_profile(profile)
    except (ValueError, KeyError) as exc:
        raise fail(exc.args[0] if exc.args else str(exc)) from None
    problem = folder_problem(out_dir)
    if problem:
        raise fail(f"--out-dir {out_dir}: {problem}")
    t0 = time.perf_counter()
    command = "pbkv-bench " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:] else "pbkv-bench study regime"
    results, figures = [], {}
    with tempfile.TemporaryDirectory(prefix="pbkv-regime-") as tmp:
        try:
            specs = [_regime_workload(w, Path(tmp), quick, predictor, concurrency, profile)
                     for w in (workloads or DEFAULT_WORKLOADS)]
            loaded = [(spec, load_records(path)) for spec, path in specs]
            saved = limit_torch_threads(threads, [spec.predictor for spec, _ in specs])  # before a model loads
        except (OSError, ValueError, KeyError) as exc:
            raise fail(exc.args[0] if exc.args else str(exc)) from None
        if saved is not None:
            ctx.call_on_close(lambda: limit_torch_threads(saved))
        for spec, records in loaded:
            err.print(f"{spec.label}: {len(settings.replayed())} policies per cell", highlight=False)
            try:
                result = run_workload(spec, settings, records=records, on_cell=lambda c, label=spec.label: err.print(
                    f"  {label}: C={c.concurrency} host {c.host_ratio:g}x f={c.device_fraction:g} "
                    f"({c.regime}) {DEFAULT_POLICY} {c.policies.get(DEFAULT_POLICY, {}).get('latency_speedup', math.nan):.3f}x "
                    f"{REFERENCE_POLICY} {c.policies[REFERENCE_POLICY]['latency_speedup']:.3f}x", highlight=False))
            except (ValueError, RuntimeError, SimulationError) as exc:
                raise fail(f"{spec.label}: {exc}") from None
            results.append(result)
            name = f"{file_slug(spec.label)}_regime.png"
            plot_regime(result, str(out_dir / name))
            figures[spec.label] = name
            # written after every workload, so a stopped study keeps the workloads it finished
            payload = _finite({"settings": dataclasses.asdict(settings), "workloads": results})
            _write_text(out_dir / "study.json", json.dumps(payload, indent=1) + "\n")
            _write_text(out_dir / "report.md", regime_markdown(payload, command, figures, time.perf_counter() - t0))
    Console().print(f"wrote {out_dir / 'report.md'}, {out_dir / 'study.json'} and {len(figures)} figures")


def _write_text(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` whole or not at all (a study stopped while it writes keeps
    the last complete file; :func:`~pbkv_contract.files.replace_file`)."""
    replace_file(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def _regime_workload(text: str, tmp: Path, quick: bool, predictor: str, concurrency: int, profile: str):
    """``(RegimeWorkload, trace path)`` of one WORKLOAD argument; ``ValueError`` for a bad one."""
    from pbkv_server.hardware.profiles import DEFAULT_PROFILE as EXAMPLE_PROFILE
    from pbkv_server.sim.study.regime import RegimeWorkload, example_workload
    from pbkv_server.sim.synth.agents import write_trace

    if text.startswith("synth:"):
        parts = text.split(":")[1:]
        if not 1 <= len(parts) <= 3 or not parts[0]:
            raise ValueError(f"{text!r}: expected synth:GRAPH[:WORKFLOWS[:SEED]]")
        try:
            workflows = int(parts[1]) if len(parts) > 1 else 60
            seed = int(parts[2]) if len(parts) > 2 else 1
        except ValueError:
            raise ValueError(f"{text!r}: WORKFLOWS and SEED must be whole numbers") from None
        if quick:
            workflows = min(workflows, QUICK_SYNTH_WORKFLOWS)
        path = tmp / f"{file_slug(text)}.jsonl"
        write_trace(str(path), graph=parts[0], workflows=workflows, seed=seed)
        source = f"pbkv-bench synth --graph {parts[0]} --workflows {workflows} --seed {seed}"
        label = f"synth-{parts[0]}"
        return RegimeWorkload(label, source, predictor, concurrency, profile, source), path
    run = Path(text)
    if run.is_dir():
        if not (run / TEST_TRACE).is_file() or not (run / MODEL).is_file():
            raise ValueError(f"{run} holds no {TEST_TRACE} and {MODEL} (an example's output folder)")
        summary = run.parent / f"{run.name}.json"  # the example's --json summary, when it was written there
        c, prof = EXAMPLE_CONCURRENCY.get(run.name, concurrency), EXAMPLE_PROFILE
        if summary.is_file():
            data = json.loads(summary.read_text(encoding="utf-8"))
            c, prof = int(data.get("replay_concurrency", c)), data.get("profile", prof)
        return example_workload(run, c, prof), run / TEST_TRACE
    if run.is_file():
        return RegimeWorkload(run.stem, str(run), predictor, concurrency, profile, f"trace file {run}"), run
    raise ValueError(f"{text}: no such file or folder (nor synth:GRAPH)")


def _floats(text: str, flag: str) -> list[float]:
    """``text`` as sorted distinct numbers (:func:`_number_list`), at most :data:`MAX_CONCURRENCY`."""
    values = sorted(_number_list(text, flag, float, "numbers"))
    if values[-1] > MAX_CONCURRENCY:  # fractions and 0 are valid; RegimeSettings.check() bounds them below
        raise ValueError(f"{flag} must be at most {MAX_CONCURRENCY:,}, got {text!r}")
    return values


class _StudyGroup(typer.core.TyperGroup):
    """``pbkv-bench study``: ``regime`` (and ``paper``) are subcommands, and ``pbkv-bench study
    RUN...`` stays the paper's studies (the form every earlier command line used)."""

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and args[0] != "--help":
            args = ["paper", *args]
        return super().parse_args(ctx, args)


study_app = typer.Typer(cls=_StudyGroup, no_args_is_help=True, add_completion=False,
                        help="Studies on recorded runs: the paper's sensitivity studies (paper, the default: "
                             "pbkv-bench study RUN...) and the regime sweep (regime).")
study_app.command("paper")(study)
study_app.command("regime")(regime)
