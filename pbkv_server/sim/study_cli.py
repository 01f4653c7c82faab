"""``pbkv-bench study``: the PBKV paper's sensitivity studies on recorded runs, as figures and a report.

    pbkv-bench study runs/hover_langchain runs/hover_langchain-shared --out-dir docs/study/hover
    pbkv-bench study test.jsonl --model predictor.pt [--train-trace train.jsonl] --out-dir out/

Each RUN is an example's output folder (``test.jsonl``, ``predictor.pt`` and, for the backbone and
horizon studies and for error bars, ``train.jsonl``) or a trace file with ``--model``. For every
run the studies of :mod:`pbkv_server.sim.study` replay its test trace; the command writes one PNG
per study and run (:mod:`pbkv_server.sim.study_plots`), ``report.md``
(:mod:`pbkv_server.sim.study_report`) and ``study.json`` (every run and point) into ``--out-dir``.
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
from typing import List, Optional

import typer

from pbkv_server.hardware.profiles import DEFAULT_PROFILE, PAPER_HOST_RATIO
from pbkv_server.predictors.torch_threads import DEFAULT_TORCH_THREADS, limit_torch_threads

__all__ = ["study"]

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
    concurrency: int = typer.Option(72, help="base concurrency of every study but the sweep (the paper's HoVer 72)"),
    concurrencies: str = typer.Option("8,24,48,72,96,128,192", help="concurrencies of the sweep (Figure 5a)"),
    policies: Optional[str] = typer.Option(None, help="policies of the concurrency sweep (default: every online one)"),
    studies: str = typer.Option("concurrency,backbone,horizon,gamma,rho,noise", help="studies to run"),
    seeds: int = typer.Option(2, help="predictor seeds per point, 1-10 (the model file, then GraphSAGE trained with seeds 1..)"),
    epochs: int = typer.Option(60, help="maximum training epochs of trained backbones (early stopping)"),
    threads: int = typer.Option(DEFAULT_TORCH_THREADS, help="torch CPU threads"),
) -> None:
    """Run the PBKV paper's sensitivity studies (Figures 5a-c, 10-12) and write figures and a report."""
    from rich.console import Console
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from pbkv_server.hardware.profiles import get_profile
    from pbkv_server.sim.study import StudySettings, load_records, run_study, study_steps
    from pbkv_server.sim.study_plots import FIGURES, plot_study
    from pbkv_server.sim.study_report import report_markdown

    err = Console(stderr=True)

    def fail(message: str) -> typer.Exit:
        err.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
        return typer.Exit(code=2)

    try:
        settings = StudySettings(
            profile=profile, device_tokens=device_tokens, host_ratio=host_ratio, concurrency=concurrency,
            concurrencies=_ints(concurrencies, "--concurrencies"), sweep_policies=_names(policies),
            studies=_names(studies) or [], seeds=seeds, epochs=epochs)
        get_profile(profile)
        settings.check()
        inputs = _inputs(runs, model, train_trace, labels)
    except (ValueError, KeyError) as exc:
        raise fail(exc.args[0] if exc.args else str(exc)) from None
    if threads < 1:
        raise fail("--threads must be >= 1")
    problem = _folder_problem(out_dir)
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
            try:
                result = run_study(records, model_path, settings, train_records=train,
                                   on_replay=lambda s, tasks=tasks: progress.advance(tasks[s]) if s in tasks else None,
                                   on_note=lambda note, label=label: progress.console.print(f"{label}: {note}"))
            except (ValueError, RuntimeError) as exc:
                raise fail(f"{label}: {exc}") from None
            results.append((label, result))
            figures[label] = {}
            points = result.points
            for s in settings.studies:
                if any(p.study == s for p in points):
                    name = f"{_slug(label)}_{FIGURES[s][0]}.png"
                    plot_study(s, points, str(out_dir / name), f"{label}, {_setting(result)}")
                    figures[label][s] = name
    command = "pbkv-bench " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:] else "pbkv-bench study"
    report = report_markdown(results, command, figures, time.perf_counter() - t0)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "report.md").write_text(report, encoding="utf-8")
    (out_dir / "study.json").write_text(json.dumps({label: _finite(r.to_json()) for label, r in results}, indent=1),
                                        encoding="utf-8")
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


def _ints(text: str, flag: str) -> list[int]:
    try:
        values = sorted({int(v) for v in text.split(",") if v.strip()})
    except ValueError:
        raise ValueError(f"{flag} must be comma-separated whole numbers, got {text!r}") from None
    if not values:
        raise ValueError(f"{flag} names no value")
    return values


def _names(text: str | None) -> list[str] | None:
    return [v.strip() for v in text.split(",") if v.strip()] if text else None


def _slug(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", label).strip("-") or "run"


def _setting(result) -> str:
    t, s = result.trace, result.settings
    return (f"{t['workflows']} workflows, profile {t['profile']}, device {t['device_tokens']:,} tok, "
            f"host {s.host_ratio:g}x, base C={s.concurrency}, seeds {t['seeds']}")


def _folder_problem(folder: Path) -> str | None:
    """Why ``folder`` cannot hold the outputs (``None``: it can)."""
    if folder.exists() and not folder.is_dir():
        return "exists and is not a folder"
    probe = folder
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        return f"{probe} is not a folder"
    import os

    return None if os.access(probe, os.W_OK | os.X_OK) else f"{probe} is not writable"


def _finite(value):
    """``value`` with NaN/inf replaced by None (strict JSON)."""
    from pbkv_server.sim.report import jsonable

    return jsonable(value)
