"""``pbkv-predictor``: train the GraphSAGE predictor and compare it with the baselines.

Commands:
  train TRACES... --out MODEL [--app APP]      fit on the traces, save one model file
  eval  TRACES... [--models ...] [--seeds N]   top-1 accuracy at k = 1..K, mean +- std over seeds
  curve TRACES... [--sizes 100,300,1000]       accuracy versus number of training workflows
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import List, NoReturn, Optional, Sequence

import numpy as np
import torch
import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from pbkv_contract.files import ANY_JSON, output_problem, replace_file
from pbkv_contract.prediction import MAX_HORIZON
from pbkv_contract.trace import read_trace
from pbkv_train.backbones import fit_workflows
from pbkv_train.data import DEFAULT_K, DEFAULT_MAX_PREFIX, split_workflows, workflows_from_records
from pbkv_train.model import count_parameters
from pbkv_train.store import save_model
from pbkv_train.train import MODEL_NAMES, TrainConfig, predict_proba, run_experiment, top1_accuracy

app = typer.Typer(help="PBKV workflow predictor: train, evaluate, learning curves.", no_args_is_help=True,
                  add_completion=False)
console = Console()
err_console = Console(stderr=True, soft_wrap=True)  # one-line messages stay one line

#: eval and curve split each app's workflows by workflow into train, validation and test sets.
MIN_SPLIT_WORKFLOWS = 3


@app.callback()
def _main(ctx: typer.Context) -> None:
    """PBKV workflow predictor: train, evaluate, learning curves."""
    # The CPU settings below are process-wide; undo them when the command ends, so that a caller
    # running the CLI in-process (tests, notebooks) gets its own settings back.
    ctx.call_on_close(_restore_cpu_settings)


_SAVED_THREADS: list[int] = []


def _threads(n: int) -> None:
    if not _SAVED_THREADS:
        _SAVED_THREADS.append(torch.get_num_threads())
    # The machines this runs on are shared; a small model gains nothing from more threads.
    torch.set_num_threads(max(1, n))
    # Near-converged training produces denormal floats, which are very slow on x86 CPUs.
    torch.set_flush_denormal(True)


def _restore_cpu_settings() -> None:
    torch.set_flush_denormal(False)
    if _SAVED_THREADS:
        torch.set_num_threads(_SAVED_THREADS.pop())


def _progress() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console)


def _parse_models(models: str) -> list[str]:
    names = [m.strip() for m in models.split(",") if m.strip()]
    if not names:
        _fail("--models names no model")
    bad = [m for m in names if m not in MODEL_NAMES and not (m.startswith("markov") and m[6:].isdigit())]
    if bad:
        raise typer.BadParameter(f"unknown model(s) {bad}; choose from {', '.join(MODEL_NAMES)}")
    return names


def _fail(message: str) -> NoReturn:
    """Print ``error: message`` on one line (no rich wrapping) to stderr and exit with status 2."""
    err_console.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def _check_at_least_one(**options: Optional[int]) -> None:
    """Exit 2 naming the first option (keyword = flag name without dashes) that is below 1.

    ``threads`` is also capped at :data:`MAX_THREADS` (an absurd count makes torch abort), and
    ``k`` at :data:`~pbkv_contract.prediction.MAX_HORIZON`.
    """
    for name, value in options.items():
        if value is not None and value < 1:
            _fail(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    threads = options.get("threads")
    if threads is not None and threads > MAX_THREADS:
        _fail(f"--threads must be at most {MAX_THREADS}, got {threads}")
    k = options.get("k")
    if k is not None and k > MAX_HORIZON:  # the target arrays hold K columns per training row
        _fail(f"--k must be in 1..{MAX_HORIZON} (a score weighs step k by gamma^k: nothing beyond "
              f"{MAX_HORIZON} steps), got {k}")


#: Most torch CPU threads the CLI accepts.
MAX_THREADS = 256


def _parse_sizes(sizes: str) -> list[int]:
    """``"100,300"`` -> ``[100, 300]``; exit 2 on a non-integer, a size below 1, a repeat or no size."""
    out: list[int] = []
    for part in (p.strip() for p in sizes.split(",")):
        if not part:
            continue
        try:
            size = int(part)
        except ValueError:
            _fail(f"--sizes must be comma-separated whole numbers of workflows, got {part!r}")
        if size < 1:
            _fail(f"--sizes must all be at least 1, got {size}")
        if size in out:
            _fail(f"--sizes lists {size} twice")
        out.append(size)
    if not out:
        _fail("--sizes names no training-set size")
    return out


def _check_writable(path: Path, flag: str, inputs: Sequence[Path] = ()) -> None:
    """Exit 2 now, before any training, if ``path`` cannot be written later or is one of ``inputs``
    (:func:`pbkv_contract.files.output_problem`: the nearest existing folder is probed with a
    temporary file, which catches read-only file systems and places where ``os.access`` says yes
    to root; nothing is left behind). A ``--json`` may replace only an existing JSON document (not
    a log, a CSV), as every other command's ``--json``."""
    problem = output_problem(path, inputs, json_doc=ANY_JSON if flag == "--json" else None)
    if problem is not None:
        _fail(f"{flag} {path} {problem}")


def _load(traces: list[Path], app_name: Optional[str], min_workflows: int = 1):
    """Workflows of one app from ``traces``; exit 2 with the reason when there is no usable set."""
    try:
        records = read_trace(traces)
    except (ValueError, OSError) as exc:  # TraceFormatError is a ValueError
        _fail(str(exc))
    apps = sorted({r.app for r in records})
    if app_name is None and len(apps) > 1:
        _fail(f"traces mix apps {apps}; choose one with --app")
    if app_name is not None and app_name not in apps:
        _fail(f"no workflows of app {app_name!r}; the traces hold {apps}")
    try:
        workflows = workflows_from_records(records, app=app_name)
    except ValueError as exc:
        _fail(str(exc))
    if len(workflows) < min_workflows:
        _fail(
            f"need at least {min_workflows} workflows (split by workflow into train, validation and test), "
            f"the traces hold {len(workflows)}"
        )
    return workflows


@app.command()
def train(
    traces: List[Path] = typer.Argument(..., exists=True, dir_okay=False, help="v1 trace files (JSONL)"),
    out: Path = typer.Option(..., "--out", "-o", help="model file to write"),
    app_name: Optional[str] = typer.Option(None, "--app", help="app to train for (needed when traces mix apps)"),
    k: int = typer.Option(DEFAULT_K, help=f"horizon K (1..{MAX_HORIZON})"),
    epochs: int = typer.Option(60, help="maximum epochs (early stopping on a 10% validation split)"),
    seed: int = typer.Option(0, min=0, max=2**32 - 1, help="seed of the validation split and the initialisation"),
    threads: int = typer.Option(1, help="torch CPU threads (more only on an idle machine: OpenMP threads spin when cores are shared)"),
) -> None:
    """Train the GraphSAGE predictor on TRACES and save it to one file with its metadata.

    Exits 2 with a one-line message, before any training, on a bad option (K, epochs or threads
    below 1), an --out that cannot be written, or traces without a usable set of workflows.
    """
    _check_at_least_one(k=k, epochs=epochs, threads=threads)
    _check_writable(out, "--out", traces)
    workflows = _load(traces, app_name)
    _threads(threads)
    t0 = time.perf_counter()
    with _progress() as progress:
        task = progress.add_task(f"training on {len(workflows)} workflows", total=epochs)

        def on_epoch(epoch: int, loss: float) -> None:
            progress.update(task, completed=epoch + 1, description=f"epoch {epoch + 1}: loss {loss:.3f}")

        backbone, va = fit_workflows("graphsage", workflows, seed=seed, k=k, epochs=epochs, on_epoch=on_epoch)
        progress.update(task, completed=epochs)
    net, vocab = backbone.model, backbone.vocab
    info = {
        "train_workflows": backbone.info["train_workflows"],
        "train_samples": backbone.info["train_samples"],
        "parameters": count_parameters(net),
        "seconds": round(time.perf_counter() - t0, 2),
    }
    if va is not None and va.mask.any():
        acc = top1_accuracy(predict_proba(net, va), va)
        info["val_top1"] = [None if np.isnan(a) else round(float(a), 4) for a in acc]
    try:
        save_model(out, net, vocab, info)  # type: ignore[arg-type]
    except (OSError, RuntimeError) as exc:  # torch.save reports an unopenable file as RuntimeError
        _fail(f"cannot write the model to {out}: {exc}")
    console.print(f"saved {out} (app {vocab.app!r}, {len(vocab) - 3} agents, K={k}): {json.dumps(info)}")


@app.command("eval")
def evaluate(
    traces: List[Path] = typer.Argument(..., exists=True, dir_okay=False, help="v1 trace files (JSONL)"),
    models: str = typer.Option(",".join(m for m in MODEL_NAMES if m != "graphsage-notxt"), help="comma-separated model names"),
    seeds: int = typer.Option(10, help="seeds (each: a new split and initialisation)"),
    app_name: Optional[str] = typer.Option(None, "--app", help="app to evaluate (needed when traces mix apps)"),
    k: int = typer.Option(DEFAULT_K, help=f"horizon K (1..{MAX_HORIZON})"),
    train_size: Optional[int] = typer.Option(None, help="cap on training workflows per seed"),
    epochs: int = typer.Option(60, help="maximum epochs of the neural models"),
    json_out: Optional[Path] = typer.Option(None, "--json", help="also write the results as JSON"),
    threads: int = typer.Option(1, help="torch CPU threads (more only on an idle machine: OpenMP threads spin when cores are shared)"),
) -> None:
    """Top-1 accuracy at k = 1..K on held-out workflows, mean +- std over seeds (PBKV Table 3 layout).

    Exits 2 with a one-line message on a bad option (seeds, K, train size, epochs or threads
    below 1), a --json that cannot be written, or fewer than 3 workflows of the app.
    """
    _check_at_least_one(seeds=seeds, k=k, train_size=train_size, epochs=epochs, threads=threads)
    names = _parse_models(models)
    if json_out is not None:
        _check_writable(json_out, "--json", traces)
    workflows = _load(traces, app_name, MIN_SPLIT_WORKFLOWS)
    _threads(threads)
    results = _run_seeds(workflows, names, seeds, k, train_size, TrainConfig(epochs=epochs))
    title = f"top-1 accuracy, app {workflows[0].app!r}, {len(workflows)} workflows, {seeds} seeds"
    _print_table(title, {n: results[n] for n in names}, k)
    if json_out is not None:
        _write_json(json_out, {"app": workflows[0].app, "workflows": len(workflows), "seeds": seeds, "train_size": train_size, "results": _summary(results)})


@app.command()
def curve(
    traces: List[Path] = typer.Argument(..., exists=True, dir_okay=False, help="v1 trace files (JSONL)"),
    sizes: str = typer.Option("100,300,1000", help="training-set sizes in workflows"),
    models: str = typer.Option("graphsage", help="comma-separated model names"),
    seeds: int = typer.Option(3, help="seeds per size"),
    app_name: Optional[str] = typer.Option(None, "--app", help="app to evaluate"),
    k: int = typer.Option(DEFAULT_K, help=f"horizon K (1..{MAX_HORIZON})"),
    epochs: int = typer.Option(60, help="maximum epochs"),
    json_out: Optional[Path] = typer.Option(None, "--json", help="also write the results as JSON"),
    threads: int = typer.Option(1, help="torch CPU threads (more only on an idle machine: OpenMP threads spin when cores are shared)"),
) -> None:
    """Learning curve: accuracy at k = 1..K versus the number of training workflows.

    Exits 2 with a one-line message on a bad option (a size, seeds, K, epochs or threads below
    1, or a size above the trace's training split), a --json that cannot be written, or fewer
    than 3 workflows of the app.
    """
    _check_at_least_one(seeds=seeds, k=k, epochs=epochs, threads=threads)
    size_list = _parse_sizes(sizes)
    names = _parse_models(models)
    if json_out is not None:
        _check_writable(json_out, "--json", traces)
    workflows = _load(traces, app_name, MIN_SPLIT_WORKFLOWS)
    # The training split has the same size for every seed; a larger size would silently train on
    # fewer workflows than its row label says.
    available = len(split_workflows(workflows, 0).train)
    too_big = [size for size in size_list if size > available]
    if too_big:
        _fail(f"--sizes {too_big[0]} is more than the {available} training workflows of this trace "
              f"({len(workflows)} workflows, 70% train)")
    _threads(threads)
    all_rows: dict[str, list[np.ndarray]] = {}
    for size in size_list:
        results = _run_seeds(workflows, names, seeds, k, size, TrainConfig(epochs=epochs))
        for n in names:
            all_rows[f"{n} @ {size}"] = results[n]
    _print_table(f"learning curve, app {workflows[0].app!r}, {len(workflows)} workflows, {seeds} seeds", all_rows, k)
    if json_out is not None:
        _write_json(json_out, {"app": workflows[0].app, "seeds": seeds, "results": _summary(all_rows)})


def _run_seeds(workflows, names, seeds, k, train_size, config) -> dict[str, list[np.ndarray]]:
    results: dict[str, list[np.ndarray]] = {n: [] for n in names}
    with _progress() as progress:
        label = f"{len(names)} models x {seeds} seeds" + (f", {train_size} training workflows" if train_size else "")
        task = progress.add_task(label, total=len(names) * seeds)
        for seed in range(seeds):
            out = run_experiment(workflows, names, seed, k, DEFAULT_MAX_PREFIX, train_size, config, on_model=lambda _n: progress.advance(task))
            for n in names:
                results[n].append(out[n])
    return results


def _summary(results: dict[str, list[np.ndarray]]) -> dict:
    out = {}
    for name, accs in results.items():
        arr = np.array(accs)
        out[name] = {"mean": np.nanmean(arr, axis=0).tolist(), "std": np.nanstd(arr, axis=0).tolist(), "runs": arr.tolist()}
    return out


def _print_table(title: str, results: dict[str, list[np.ndarray]], k: int) -> None:
    table = Table(title=title)
    table.add_column("model")
    for j in range(1, k + 1):
        table.add_column(f"k={j}", justify="right")
    for name, accs in results.items():
        arr = np.array(accs) * 100
        cells = [f"{np.nanmean(arr[:, j]):.1f} +- {np.nanstd(arr[:, j]):.1f}" for j in range(k)]
        table.add_row(name, *cells)
    console.print(table)


def _write_json(path: Path, data: dict) -> None:
    try:  # written aside and renamed: a stopped run keeps the previous file whole
        replace_file(path, lambda tmp: tmp.write_text(json.dumps(data, indent=1), encoding="utf-8"))
    except OSError as exc:  # checked before the run; this is the rare race (disk full, removed dir)
        _fail(f"cannot write {path}: {exc.strerror or exc}")
    console.print(f"wrote {path}")


if __name__ == "__main__":
    app()
