"""The regime study (``pbkv-bench study regime``): where in (device, host, concurrency) a cache
policy can change latency, and how much of the offline reference's (`opt`'s) gain each policy gets there.

Grid, per workload (a recorded or synthetic trace, its predictor, base concurrency ``C0`` and
hardware profile):

* concurrency ``C = round(factor x C0)`` per ``concurrency_factors`` (default 1x and 2x); a
  factor whose ``min(C, n)`` equals an earlier one's (a trace of ``n`` workflows already has all
  of them in flight) replays the same thing and is skipped, which the workload's notes say;
* device ``ceil(A + f x W)`` KV tokens per device fraction ``f`` (default 0.25 .. 1.5), where
  ``W`` is the reusable working set and ``A`` the in-flight demand at ``C``
  (:meth:`~pbkv_server.sim.capacity.WorkingSet.live_tokens`, ``in_flight_tokens``, counted by
  session as ``pbkv-bench advise`` does). This is the trace rule of
  :func:`pbkv_server.sim.capacity.device_capacity` (``A + pressure x W``) with the pressure
  extended past 1: ``f`` is the share of ``W`` the device holds once every running request has its
  own KV, so ``f = 1`` is exactly the ``fits in device`` boundary of advise. Never below the
  largest request (prompt + completion), which no device smaller than it can serve;
* host tier ``round(h x device)`` per host ratio ``h`` (default 0, 1 and 2).

Each cell replays every policy of ``policies`` (default :data:`POLICIES`, advise's list) plus the
baseline (LRU) and the offline reference (``opt``), which the measures need. Figures per policy:
mean workflow latency and TTFT, device and host hit rate, speedup vs LRU (``L_lru / L``), latency
capture (``(L_lru - L) / (L_lru - L_opt)``) and prefill saved (:mod:`pbkv_server.sim.measures`).
Each cell also carries advise's regime and one-line verdict (:mod:`pbkv_server.sim.advise`).

Order and determinism: workloads in the given order, cells by concurrency, then host ratio, then
device fraction, policies in list order; the simulator is deterministic, an online predictor
(context, markov) starts fresh for every replay, and a trained model's predictions are memoised per query
(:class:`MemoPredictor`; a query holds only trace facts, so every replay asks the same ones), so
two runs of the same command give the same JSON.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from pbkv_contract.prediction import Prediction, PredictionQuery, Predictor
from pbkv_contract.trace import InvocationRecord, TraceRecord
from pbkv_server.engine.policies import (BASELINE_POLICY, DEFAULT_POLICY, REFERENCE_POLICY, REPLAY,
                                         available_policies, policy_info)
from pbkv_server.sim.advise import POLICIES, Advice, regime_of, verdict_of
from pbkv_server.sim.capacity import WorkingSet, working_set
from pbkv_server.sim.measures import host_value, latency_capture, latency_speedup, prefill_saved
from pbkv_server.hardware.profiles import get_profile

__all__ = ["POLICIES", "OPT_GAIN", "CAPTURE_TARGET", "SLOWER_LIMIT", "RegimeSettings", "QUICK", "RegimeWorkload",
           "Cell", "MemoPredictor", "grid", "run_workload", "acceptance"]

#: opt at least this much faster than LRU (speedup) marks a cell where a policy can matter
#: (issue 24's "opt is at least 5% faster than LRU").
OPT_GAIN = 1.05
#: Issue 24's target: in every cell with an opt gain, PBKV's latency capture reaches this.
CAPTURE_TARGET = 0.7
#: PBKV's speedup vs LRU below this anywhere is a regression (the simulator is deterministic).
SLOWER_LIMIT = 0.999


@dataclass(frozen=True)
class RegimeSettings:
    """The grid (module docstring). ``policies``: replayed per cell, baseline and reference added."""

    device_fractions: tuple[float, ...] = (0.25, 0.5, 0.75, 1.0, 1.5)
    host_ratios: tuple[float, ...] = (0.0, 1.0, 2.0)
    concurrency_factors: tuple[float, ...] = (1.0, 2.0)
    policies: tuple[str, ...] = POLICIES

    def check(self) -> None:
        """Raise ``ValueError`` naming the first bad setting (before any replay)."""
        for name, values in (("device fractions", self.device_fractions), ("host ratios", self.host_ratios),
                             ("concurrency factors", self.concurrency_factors)):
            if not values or any(not math.isfinite(v) for v in values):
                raise ValueError(f"{name} must be one or more numbers")
        if min(self.device_fractions) <= 0 or min(self.host_ratios) < 0 or min(self.concurrency_factors) <= 0:
            raise ValueError("device fractions and concurrency factors must be > 0, host ratios >= 0")
        known = available_policies(REPLAY)
        bad = [p for p in self.policies if p not in known]
        if bad:
            raise ValueError(f"unknown policy {bad[0]!r}; choose from {', '.join(known)}")

    def replayed(self) -> list[str]:
        """The policies each cell replays: the baseline first, then ``policies``, the reference last."""
        middle = [p for p in dict.fromkeys(self.policies) if p not in (BASELINE_POLICY, REFERENCE_POLICY)]
        return [BASELINE_POLICY, *middle, REFERENCE_POLICY]


#: ``--quick``: two device fractions, two host ratios, both concurrencies (a minute on a tiny trace).
QUICK = RegimeSettings(device_fractions=(0.25, 1.0), host_ratios=(0.0, 1.0))


@dataclass(frozen=True)
class RegimeWorkload:
    """One workload of the study.

    Attributes:
        label: its name in tables, figures and file names.
        trace: the trace file (JSONL, v1).
        predictor: ``context`` / ``markov`` / ``oracle`` / a trained model file (``make_predictor`` spec).
        concurrency: the base concurrency ``C0`` (the paper's or the workload's own).
        profile: hardware profile name (speeds; capacities come from the grid).
        source: how the trace was made (a command or the example run), for the report.
    """

    label: str
    trace: str
    predictor: str
    concurrency: int
    profile: str
    source: str = ""


@dataclass
class Cell:
    """One (concurrency, host ratio, device fraction) point and its replays.

    Attributes:
        concurrency: C, workflows in flight.
        device_fraction: f, (device - A) / W.
        host_ratio: host tier / device.
        device_tokens, host_tokens: the capacities replayed.
        live_tokens, in_flight_tokens: W and A at C, tokens.
        device_over_w: device / W (the raw ratio, for readers who want it).
        regime: advise's regime (``fits in device``, ``fits with host``, ``short``).
        opt_gain: opt's speedup reaches :data:`OPT_GAIN`.
        verdict: advise's one line for this cell.
        policies: policy -> figures (module docstring; NaN where a measure is undefined).
    """

    concurrency: int
    device_fraction: float
    host_ratio: float
    device_tokens: int
    host_tokens: int
    live_tokens: float
    in_flight_tokens: float
    device_over_w: float
    regime: str = ""
    opt_gain: bool = False
    verdict: str = ""
    policies: dict[str, dict[str, float]] = field(default_factory=dict)


class MemoPredictor(Predictor):
    """A trained (not online-learning) predictor whose predictions are kept per query.

    A :class:`~pbkv_contract.prediction.PredictionQuery` holds only trace facts (app, workflow,
    step, agent history, request features), so every replay of one trace asks the same queries;
    the model runs once per distinct query (in the first replay's batches) instead of once per
    replay. Predictions are shared objects: the engine only reads them.
    """

    def __init__(self, inner: Predictor):
        if inner.learns_online:
            raise ValueError("an online-learning predictor cannot be memoised")
        self.inner = inner
        self.horizon = inner.horizon
        self.learns_online = False
        self._cache: dict[PredictionQuery, Prediction] = {}

    def predict(self, queries: Sequence[PredictionQuery]) -> list[Prediction]:
        missing = [q for q in dict.fromkeys(queries) if q not in self._cache]
        if missing:
            for q, p in zip(missing, self.inner.predict(missing)):
                self._cache[q] = p
        return [self._cache[q] for q in queries]


def _smallest_device(records: Sequence[TraceRecord]) -> int:
    """The largest request's prompt + completion tokens: no smaller device can serve it."""
    return max((r.prompt_tokens + r.completion_tokens for r in records if isinstance(r, InvocationRecord)), default=1)


def grid(ws: WorkingSet, base_concurrency: int, settings: RegimeSettings, smallest_device: int = 1,
         notes: list[str] | None = None) -> list[Cell]:
    """The cells of one workload in run order (module docstring), without replays.

    Args:
        ws: the trace's working set (by session, as advise counts it).
        base_concurrency: C0.
        settings: the grid.
        smallest_device: the least device tokens a cell may have (the largest request).
        notes: receives one line per skipped concurrency factor and per raised device.
    """
    cells: list[Cell] = []
    seen_live: set[int] = set()
    for factor in settings.concurrency_factors:
        c = max(1, round(factor * base_concurrency))
        live_units = min(c, ws.workflows)
        if live_units in seen_live:
            if notes is not None:
                notes.append(f"concurrency {c} ({factor:g}x) skipped: the trace's {ws.workflows} replay units are "
                             f"all in flight already at a lower concurrency (same replay)")
            continue
        seen_live.add(live_units)
        live, flight = ws.live_tokens(c), ws.in_flight_tokens(c)
        for h in settings.host_ratios:
            for f in settings.device_fractions:
                device = math.ceil(flight + f * live)
                if device < smallest_device:
                    if notes is not None:
                        notes.append(f"C={c}, f={f:g}: device raised from {device:,} to {smallest_device:,} tok "
                                     f"(the largest request)")
                    device = smallest_device
                cells.append(Cell(c, f, h, device, round(h * device), live, flight,
                                  device / live if live > 0 else math.nan))
    return cells


def run_workload(workload: RegimeWorkload, settings: RegimeSettings, *,
                 records: Sequence[TraceRecord] | None = None,
                 on_cell: Callable[[Cell], None] = lambda cell: None) -> dict[str, Any]:
    """Replay every cell of ``workload`` and return its JSON-ready result.

    Returns:
        ``{"label", "trace", "source", "profile", "predictor", "base_concurrency", "working_set",
        "smallest_device_tokens", "notes", "cells": [asdict(Cell)], "acceptance"}``.

    Raises:
        ValueError: a bad setting, a trace without invocations, a bad predictor spec.
        pbkv_server.sim.simulator.SimulationError: the engine stalls.
    """
    from pbkv_server.predictors import make_predictor
    from pbkv_server.sim.simulator import ReplayConfig, ReplayOptions, load_workload, simulate
    from pbkv_server.sim.study.paper import load_records

    settings.check()
    if records is None:
        records = load_records(workload.trace)
    profile = get_profile(workload.profile)
    ws = working_set(records, by_session=True)
    notes: list[str] = []
    smallest = _smallest_device(records)
    cells = grid(ws, workload.concurrency, settings, smallest, notes)
    apps = {r.app for r in records if isinstance(r, InvocationRecord)}
    app = next(iter(apps)) if len(apps) == 1 else None
    trained = None
    probe = make_predictor(workload.predictor, 3, records, app=app)
    if not probe.learns_online:
        trained = MemoPredictor(probe)  # one model, asked once per distinct query
    replay = load_workload(records)
    value = host_value(profile)
    policies = settings.replayed()
    for cell in cells:
        for name in policies:
            predictor = None
            if policy_info(name).predictive:
                predictor = trained or make_predictor(workload.predictor, 3, records, app=app)
            s = simulate(replay, ReplayConfig(name, profile, device_tokens=cell.device_tokens,
                                              host_tokens=cell.host_tokens),
                         ReplayOptions(concurrency=cell.concurrency, predictor=predictor)).summary
            cell.policies[name] = {"mean_latency_s": s["mean_latency_s"], "mean_ttft_s": s["mean_ttft_s"],
                                   "hit_rate": s["hit_rate"], "host_hit_rate": s["host_hit_rate"],
                                   "prefill_saved": prefill_saved(s["hit_rate"], s["host_hit_rate"], value)}
        base = cell.policies[BASELINE_POLICY]["mean_latency_s"]
        ref = cell.policies[REFERENCE_POLICY]["mean_latency_s"]
        for figures in cell.policies.values():
            speedup = latency_speedup(base, figures["mean_latency_s"])
            capture = latency_capture(figures["mean_latency_s"], base, ref)
            figures["latency_speedup"] = math.nan if speedup is None else speedup
            figures["latency_capture"] = math.nan if capture is None else capture
        cell.opt_gain = cell.policies[REFERENCE_POLICY]["latency_speedup"] >= OPT_GAIN
        advice = Advice(profile.name, cell.concurrency, ws, cell.live_tokens, cell.in_flight_tokens,
                        cell.device_tokens, cell.host_tokens,
                        regime_of(cell.live_tokens + cell.in_flight_tokens, ws.max_prompt_tokens,
                                  cell.device_tokens, cell.host_tokens),
                        latency_s={p: f["mean_latency_s"] for p, f in cell.policies.items()},
                        speedup={p: f["latency_speedup"] for p, f in cell.policies.items()})
        cell.regime, cell.verdict = advice.regime, verdict_of(advice)
        on_cell(cell)
    out = {"label": workload.label, "trace": str(workload.trace), "source": workload.source,
           "profile": profile.name, "predictor": workload.predictor, "base_concurrency": workload.concurrency,
           "working_set": asdict(ws), "smallest_device_tokens": smallest, "notes": notes,
           "cells": [asdict(c) for c in cells]}
    out["acceptance"] = acceptance(out["cells"])
    return out


def _cell_key(cell: dict[str, Any]) -> dict[str, Any]:
    return {"concurrency": cell["concurrency"], "device_fraction": cell["device_fraction"],
            "host_ratio": cell["host_ratio"]}


def acceptance(cells: Sequence[dict[str, Any]], policy: str = DEFAULT_POLICY) -> dict[str, Any]:
    """Issue 24's criteria for ``policy`` over a workload's cells (``asdict(Cell)`` form).

    Returns:
        ``{"policy", "opt_gain_cells": n, "capture_below": [...], "slower_than_lru": [...]}``: the
        cells with an opt gain where the policy's latency capture is below :data:`CAPTURE_TARGET`,
        and every cell where its speedup is below :data:`SLOWER_LIMIT`, each as its key plus the
        policy's speedup and capture and opt's speedup.
    """
    below, slower = [], []
    for cell in cells:
        figures = cell["policies"].get(policy)
        if figures is None:
            continue
        row = {**_cell_key(cell), "speedup": figures["latency_speedup"], "capture": figures["latency_capture"],
               "opt_speedup": cell["policies"][REFERENCE_POLICY]["latency_speedup"]}
        capture = figures["latency_capture"]
        if cell["opt_gain"] and (capture is None or not capture >= CAPTURE_TARGET):
            below.append(row)
        if figures["latency_speedup"] is not None and figures["latency_speedup"] < SLOWER_LIMIT:
            slower.append(row)
    return {"policy": policy, "opt_gain_cells": sum(1 for c in cells if c["opt_gain"]),
            "capture_below": below, "slower_than_lru": slower}


def example_workload(folder: Path, concurrency: int, profile: str) -> RegimeWorkload:
    """An example's output folder as a workload: its test trace and trained predictor."""
    return RegimeWorkload(folder.name, str(folder / "test.jsonl"), str(folder / "predictor.pt"), concurrency,
                          profile, f"example run {folder.name}: test.jsonl, trained predictor.pt")
