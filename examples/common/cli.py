"""The shared command line of the example runners (``python -m examples.<name>``)."""

from __future__ import annotations

import logging
import math
import sys
from pathlib import Path
from typing import Callable, Optional

import typer
from rich.console import Console
from rich.markup import escape

from examples.common.data import DataError
from pbkv_server.hardware.profiles import DEFAULT_PROFILE
from examples.common.capacity import DEFAULT_SETUP
from examples.common.pipeline import ExampleSpec, RunOptions, run_example
from pbkv_server.sim.serving_metrics import Slo

__all__ = ["make_app", "main"]


def make_app(spec_factory: Callable[[], ExampleSpec], help_text: str) -> typer.Typer:
    """A typer app whose single command runs :func:`run_example` for the spec ``spec_factory()`` builds."""
    app = typer.Typer(help=help_text, add_completion=False)

    @app.command()
    def main(
        quick: bool = typer.Option(False, "--quick", help="reduced task counts (CI; about 2 minutes)"),
        json_out: Optional[Path] = typer.Option(None, "--json", help="write the JSON summary here"),
        out_dir: Path = typer.Option(Path("runs"), "--out-dir", help="traces, model and plots go to OUT_DIR/<example> "
                                     "(OUT_DIR/<example>-<messages> for a non-default --messages)"),
        train: Optional[int] = typer.Option(None, "--train", min=1, help="training tasks (default per size)"),
        test: Optional[int] = typer.Option(None, "--test", min=1, help="test tasks (default per size)"),
        app_concurrency: int = typer.Option(16, "--app-concurrency", min=1, help="workflows the app runs at once"),
        concurrency: Optional[int] = typer.Option(None, "--concurrency", min=1, help="replay concurrency (default: the paper's)"),
        profile: str = typer.Option(DEFAULT_PROFILE, "--profile", help="hardware profile (pbkv_server.hardware.profiles)"),
        setup: str = typer.Option(DEFAULT_SETUP, "--setup", help="replay capacities: paper (device from the profile's GPU "
                                  "memory, host tier = device, the PBKV paper's) or trace (device A + pressure x W "
                                  "from the test trace, host tier 2x)"),
        # float bounds are checked below, not by click: its range check says "<= 64" of a nan
        pressure: float = typer.Option(0.5, "--pressure", help="device capacity / live working set, 0.01..1 (--setup trace)"),
        host_ratio: Optional[float] = typer.Option(None, "--host-ratio",
                                                   help="host KV tier / device, 0..64 (default: 1 with --setup paper, "
                                                        "2 = HiCache's default with --setup trace; 0 = none)"),
        messages: Optional[str] = typer.Option(None, "--messages", help="prompt convention of the app, where it offers "
                                               "several (HoVer: shared, the default, or per-agent)"),
        seed: int = typer.Option(0, "--seed", min=0, max=2**32 - 1, help="task split, scenario and training seed"),
        epochs: Optional[int] = typer.Option(None, "--epochs", min=1, help="predictor training epochs"),
        timing: str = typer.Option("nominal", "--timing", help="trace times: nominal (seeded tool and framework "
                                   "gaps: the same seed gives the same figures on any machine) or recorded (this "
                                   "run's wall clock, which moves with the machine's load)"),
        no_belady: bool = typer.Option(False, "--no-opt", "--no-belady",
                                       help="skip the offline reference opt, the reference every gap is measured "
                                            "against (--no-belady is its former name)"),
        slo_ttft: Optional[float] = typer.Option(None, "--slo-ttft", help="goodput's TTFT objective, ms "
                                                 "(request_goodput in the JSON; bench_serving --goodput ttft:MS)"),
        slo_tpot: Optional[float] = typer.Option(None, "--slo-tpot", help="goodput's TPOT objective, ms "
                                                 "(bench_serving --goodput tpot:MS)"),
    ) -> None:
        """Run the example end to end: app -> traces -> predictor -> replay under every policy -> table, plots."""
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
        # CrewAI warns on every call that the sim model has no native token counter.
        logging.getLogger("crewai.llms.base_llm").setLevel(logging.ERROR)
        # Piped output (CI logs, README capture) keeps the full table width instead of 80 columns.
        console = Console() if sys.stdout.isatty() else Console(width=160)
        try:
            for flag, value, low, high in (("--pressure", pressure, 0.01, 1.0), ("--host-ratio", host_ratio, 0.0, 64.0)):
                if value is not None and not (math.isfinite(value) and low <= value <= high):
                    raise ValueError(f"{flag} must be a finite number in {low:g}..{high:g}, got {value:g}")
            opts = RunOptions(quick=quick, n_train=train, n_test=test, app_concurrency=app_concurrency,
                              replay_concurrency=concurrency, profile=profile, setup=setup, pressure=pressure,
                              host_ratio=host_ratio, messages=messages, seed=seed,
                              out_dir=out_dir, json_out=json_out, belady=not no_belady, epochs=epochs,
                              timing=timing, slo_ttft_ms=slo_ttft, slo_tpot_ms=slo_tpot)
            Slo(slo_ttft, slo_tpot)  # a bad objective (nan, <= 0) fails now, not after the app run
            run_example(spec_factory(), opts, console)
        except (DataError, ValueError, KeyError) as exc:
            # str(KeyError) wraps its message in quotes; args[0] is the message itself.
            message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
            Console(stderr=True, soft_wrap=True).print("[red]error:[/red] " + escape(str(message)))
            raise typer.Exit(2) from None

    return app


def main(app: typer.Typer, prog: str) -> None:
    """Run an example's ``app`` as ``pbkv-bench`` runs: a usage error (a bad number, an unknown
    option) is one line naming ``prog``, not a boxed usage text; exits with the command's status."""
    from pbkv_contract.extras import run

    sys.exit(run(prog, lambda: app, "all"))
