"""The markdown report of ``pbkv-bench study``: settings, findings, one table and figure per study.

Findings are computed from the points, never written by hand: for the default policy against
the baseline, the concurrency with the largest latency gain and the one with the largest hit-rate
gain, each policy's admission limit, and where the latency goes at the base concurrency.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

from pbkv_server.engine import EngineConfig
from pbkv_server.engine.policies import BASELINE_POLICY, DEFAULT_POLICY, REFERENCE_POLICY
from pbkv_server.sim.measures import CAPTURE_NOTE, MIN_DIFFERENCE
from pbkv_server.sim.metrics import BREAKDOWN_PARTS
from pbkv_server.sim.study.paper import Point, StudyResult, admission_limits
from pbkv_server.sim.study.plots import FIGURES

__all__ = ["report_markdown", "best_regime", "regime_markdown"]

#: Engine defaults (gamma, horizon K) that the summary's "at the base concurrency" figures assume.
_ENGINE_DEFAULTS = {f.name: f.default for f in dataclasses.fields(EngineConfig)}

_X_NAMES = {"concurrency": "concurrency", "backbone": "backbone", "horizon": "K", "gamma": "gamma", "rho": "rho",
            "noise": "lambda"}


def best_regime(points: Sequence[Point], key: str) -> Point | None:
    """The concurrency-study point of the default policy with the largest mean ``key``
    (``latency_speedup`` or ``hit_ratio``); ``None`` without such points."""
    own = [p for p in points if p.study == "concurrency" and p.policy == DEFAULT_POLICY and math.isfinite(p.mean[key])]
    return max(own, key=lambda p: p.mean[key], default=None)


def report_markdown(runs: Sequence[tuple[str, StudyResult]], command: str, figures: dict[str, dict[str, str]],
                    seconds: float) -> str:
    """The whole report for one or more studied runs.

    Args:
        runs: ``(label, result)`` per studied trace (e.g. one per message convention).
        command: the command line that produced it.
        figures: ``label -> study -> figure path`` relative to the report.
        seconds: wall time of the whole study.
    """
    out = ["# PBKV sensitivity studies (simulated)", "",
           f"Command: `{command}` ({seconds / 60:.1f} min wall on this machine). All times are engine seconds of "
           "the simulator under the hardware profile; hit rates are token level; `hit x LRU` is the device hit "
           f"rate over `{BASELINE_POLICY}`'s and `speedup vs {BASELINE_POLICY}` its mean latency over the policy's "
           f"(x, >1 faster), both against `{BASELINE_POLICY}` replayed in the same setup and concurrency; "
           f"{CAPTURE_NOTE}, with `{REFERENCE_POLICY}` replayed there too; prefill saved = device hits + host value x "
           "host hits as a share of prompt tokens (host value = 1 - load/prefill time of a token under the profile). "
           "Error bars and `±` are one standard deviation over predictor seeds (n = runs per point).", ""]
    out += _summary(runs)
    for label, result in runs:
        out += _run_section(label, result, figures.get(label, {}))
    return "\n".join(out) + "\n"


def _summary(runs: Sequence[tuple[str, StudyResult]]) -> list[str]:
    lines = ["## Summary", "",
             f"Device hit rates at the base concurrency; the largest gains over the concurrency sweep, with the "
             f"device + host hit rates of {BASELINE_POLICY} and {DEFAULT_POLICY} at the concurrency of the largest "
             "latency gain.", "",
             f"| run | setup | {BASELINE_POLICY} hit @ base C | {DEFAULT_POLICY} hit @ base C | hit x {BASELINE_POLICY} "
             f"| speedup vs {BASELINE_POLICY} (x, >1 faster) | largest latency gain | dev+host hit {BASELINE_POLICY} / {DEFAULT_POLICY} "
             f"there | largest hit-rate gain | admission limit {BASELINE_POLICY} / {DEFAULT_POLICY} |",
             "|---|---|---:|---:|---:|---:|---|---|---|---|"]
    for label, result in runs:
        pts = result.points
        s, t = result.settings, result.trace
        base = result.baselines.get(s.concurrency)
        own = _default_point(pts, s.concurrency)
        lat, hit = best_regime(pts, "latency_speedup"), best_regime(pts, "hit_ratio")
        limits = admission_limits(pts)
        setup = (f"{t['profile']}, device {t['device_tokens']:,} tok, host {s.host_ratio:g}x, base C {s.concurrency}")
        at = next((p for p in pts if lat is not None and p.study == "concurrency" and p.x == lat.x
                   and p.policy == BASELINE_POLICY), None)
        there = f"{_pct(_both(at))} / {_pct(_both(lat))}" if at is not None and lat is not None else "-"
        lines.append(
            f"| {label} | {setup} | {_pct(base['hit_rate']) if base else '-'} | "
            f"{_pct(own.mean['hit_rate']) if own else '-'} | {_x(own, 'hit_ratio')} | {_x(own, 'latency_speedup')} | "
            f"{_regime(lat, 'latency_speedup')} | {there} | {_regime(hit, 'hit_ratio')} | "
            f"{_limit(limits.get(BASELINE_POLICY, 'n/a'))} / {_limit(limits.get(DEFAULT_POLICY, 'n/a'))} |")
    lines.append("")
    return lines


def _default_point(points: Sequence[Point], concurrency: int) -> Point | None:
    """The default policy at the base concurrency with the engine's default settings: its point of
    the concurrency study, else its point at the default gamma or horizon (studies replayed at the
    base concurrency); ``None`` if no study has it."""
    defaults = {"concurrency": concurrency, "gamma": _ENGINE_DEFAULTS["gamma"], "horizon": _ENGINE_DEFAULTS["horizon"]}
    return next((p for study, x in defaults.items() for p in points
                 if p.study == study and p.policy == DEFAULT_POLICY and p.x == x), None)


def _run_section(label: str, result: StudyResult, figures: dict[str, str]) -> list[str]:
    s, t = result.settings, result.trace
    out = [f"## {label}", "",
           f"Trace: {t['workflows']} workflows, {t['invocations']} invocations (app {t['app']}); profile "
           f"`{t['profile']}`, device {t['device_tokens']:,} tokens, host tier {t['host_tokens']:,} tokens "
           f"({s.host_ratio:g}x), base concurrency {s.concurrency}; predictor seeds per point: {t['seeds']}; "
           f"training epochs at most {s.epochs}.", ""]
    out += [f"- {note}" for note in result.notes] + ([""] if result.notes else [])
    pts = result.points
    for study in s.studies:
        own = [p for p in pts if p.study == study]
        if not own:
            continue
        stem, paper = FIGURES[study]
        out += [f"### {study} ({paper})", ""]
        if study in figures:
            out += [f"![{label}: {study}]({figures[study]})", ""]
        if study == "concurrency":
            out += _concurrency_findings(own, result)
        out += _table(study, own, f"Host tier {s.host_ratio:g}x device ({t['host_tokens']:,} tok); speedup vs "
                                  f"{BASELINE_POLICY} = its mean latency / the policy's (x, >1 faster).")
    return out


def _concurrency_findings(points: Sequence[Point], result: StudyResult) -> list[str]:
    lines = []
    limits = admission_limits(points)
    reached = {p: c for p, c in limits.items() if c is not None}
    top = max(p.x for p in points)
    if reached:
        lines.append("Admission limit (first concurrency at which on average at least one request waits to be "
                     "admitted, i.e. the device no longer holds the KV of every request in flight): "
                     + ", ".join(f"{p} C={c}" for p, c in reached.items())
                     + (f"; not reached up to C={top}: " + ", ".join(p for p, c in limits.items() if c is None)
                        if len(reached) < len(limits) else "") + ".")
    else:
        lines.append(f"No policy reaches the admission limit up to C={top} (mean queue below 1 request).")
    lat, hit = best_regime(points, "latency_speedup"), best_regime(points, "hit_ratio")
    if lat is not None and hit is not None:
        lines.append(f"{DEFAULT_POLICY} gains most in latency at C={lat.x} ({_x(lat, 'latency_speedup')} {BASELINE_POLICY}"
                     f"{_none(lat, 'latency_speedup')}) and in hit rate at C={hit.x} ({_x(hit, 'hit_ratio')}"
                     f"{_none(hit, 'hit_ratio')}).")
    base_c = result.settings.concurrency
    rows = [p for p in points if p.x == base_c and p.policy in (BASELINE_POLICY, DEFAULT_POLICY)]
    if lat is not None and lat.x != base_c:
        rows += [p for p in points if p.x == lat.x and p.policy in (BASELINE_POLICY, DEFAULT_POLICY)]
    if rows:
        lines += ["", "Where the mean workflow latency goes (s):", "",
                  "| C | policy | mean latency | admission wait | host load | prefill | decode | tool gaps |",
                  "|---:|---|---:|---:|---:|---:|---:|---:|"]
        for p in rows:
            parts = " | ".join(f"{p.mean.get('breakdown_' + k, math.nan):.1f}" for k in BREAKDOWN_PARTS)
            lines.append(f"| {p.x} | {p.policy} | {p.mean['mean_latency_s']:.1f} | {parts} |")
    return lines + [""]


def _table(study: str, points: Sequence[Point], setting: str) -> list[str]:
    """The study's points as a markdown table, after the line ``setting`` (the host tier and the
    speedup convention)."""
    extra = study == "backbone"
    head = f"| {_X_NAMES[study]} | policy | n | device hit | host hit | dev+host | prefill saved | " \
           f"hit x {BASELINE_POLICY} | speedup vs {BASELINE_POLICY} | latency capture | mean latency s | mean TTFT s | waiting |" + \
           (" accuracy (k=1..K) | accuracy k=1 |" if extra else "")
    lines = [setting, "", head, "|" + "---|" * (head.count("|") - 1)]
    for p in points:
        row = (f"| {p.x} | {p.policy} | {p.n} | {_pm(p, 'hit_rate', 100, '%')} | {_pm(p, 'host_hit_rate', 100, '%')} | "
               f"{_pct(_both(p))} | {_pm(p, 'prefill_saved', 100, '%')} | {_pm(p, 'hit_ratio', 1, 'x', 3)} | "
               f"{_pm(p, 'latency_speedup', 1, 'x', 3)} | {_pm(p, 'latency_capture', 1, '', 2)} | "
               f"{_pm(p, 'mean_latency_s', 1, '', 1)} | {_pm(p, 'mean_ttft_s', 1, '', 2)} | "
               f"{p.mean['mean_queue_length']:.2f} |")
        if extra:
            row += f" {_pm(p, 'accuracy', 100, '%')} | {_pm(p, 'accuracy_k1', 100, '%')} |"
        lines.append(row)
    return lines + [""]


def _pm(p: Point, key: str, scale: float, unit: str, digits: int = 1) -> str:
    mean, std = scale * p.mean.get(key, math.nan), scale * p.std.get(key, 0.0)
    if not math.isfinite(mean):
        return "-"
    return f"{mean:.{digits}f}{unit}" + (f" ± {std:.{digits}f}" if std > 0 else "")


def _both(p: Point) -> float:
    """Device + host hit rate of a point (what the two tiers together kept)."""
    return p.mean["hit_rate"] + p.mean["host_hit_rate"]


def _pct(value: float) -> str:
    return f"{100 * value:.1f}%"


def _x(p: Point | None, key: str) -> str:
    return "-" if p is None else f"{p.mean[key]:.3f}x"


def _regime(p: Point | None, key: str) -> str:
    return "-" if p is None else f"C={p.x}: {p.mean[key]:.3f}x{_none(p, key)}"


def _none(p: Point, key: str) -> str:
    """Says so when the largest gain is none at all (under :data:`~pbkv_server.sim.measures.MIN_DIFFERENCE`,
    the rule ``pbkv-bench replay`` says "no eviction order can differ" by)."""
    return ", no gain at any concurrency" if p.mean[key] < 1 + MIN_DIFFERENCE else ""


def _limit(value) -> str:
    return "not reached" if value is None else str(value)


def regime_markdown(payload: dict, command: str, figures: dict[str, str], seconds: float | None = None) -> str:
    """The regime study's report: per workload its setup, notes, figure, every cell and issue
    24's acceptance lists. ``payload`` is the study JSON (``{"settings", "workloads": [...]}``,
    :func:`pbkv_server.sim.study.regime.run_workload` per workload); ``figures``: label -> figure path."""
    from pbkv_server.sim.study.regime import CAPTURE_TARGET, OPT_GAIN, SLOWER_LIMIT

    wall = f" ({seconds / 60:.1f} min wall on this machine)" if seconds is not None else ""
    out = ["# Regime study (simulated)", "",
           f"Command: `{command}`{wall}.", "",
           "Device = A + f x W KV tokens (W: reusable working set, A: in-flight demand at the cell's concurrency, "
           "`pbkv_server/sim/capacity.py`; f = 1 is where A + W fits the device), host = ratio x device. "
           f"Speedup = L_{BASELINE_POLICY} / L (mean workflow latency, >1 faster); {CAPTURE_NOTE}. "
           f"`*`: opt >= {OPT_GAIN:g}x {BASELINE_POLICY}. Hit rates are token level, device / host.", ""]
    for w in payload["workloads"]:
        ws, cells = w["working_set"], w["cells"]
        policies = list(cells[0]["policies"]) if cells else []
        out += [f"## {w['label']}", "",
                f"Trace `{w['trace']}` ({w['source']}): {ws['workflows']} replay units, {ws['requests']} requests; "
                f"profile `{w['profile']}`, predictor `{w['predictor']}`, base concurrency {w['base_concurrency']}; "
                f"largest request {w['smallest_device_tokens']:,} tok.", ""]
        out += [f"- {n}" for n in w["notes"]] + ([""] if w["notes"] else [])
        if w["label"] in figures:
            out += [f"![{w['label']}: regime]({figures[w['label']]})", ""]
        head = ("| C | f | W / A tok | device tok | host | regime | lru s | "
                + " | ".join(f"{p} x" for p in policies if p != BASELINE_POLICY)
                + f" | {DEFAULT_POLICY} capture | hit lru / {DEFAULT_POLICY} / opt |")
        out += [head, "|" + "---|" * (head.count("|") - 1)]
        for c in cells:
            f = c["policies"]
            speedups = " | ".join(_num(f[p]["latency_speedup"], 3) for p in policies if p != BASELINE_POLICY)
            hits = " / ".join(f"{_pct(f[p]['hit_rate'])}, {_pct(f[p]['host_hit_rate'])}"
                              for p in (BASELINE_POLICY, DEFAULT_POLICY, REFERENCE_POLICY) if p in f)
            pb = f.get(DEFAULT_POLICY, {}).get("latency_capture")
            out.append(f"| {c['concurrency']} | {c['device_fraction']:g}{' *' if c['opt_gain'] else ''} | "
                       f"{c['live_tokens']:,.0f} / {c['in_flight_tokens']:,.0f} | {c['device_tokens']:,} | "
                       f"{c['host_ratio']:g}x | {c['regime']} | {f[BASELINE_POLICY]['mean_latency_s']:.1f} | "
                       f"{speedups} | {_num(pb, 2)} | {hits} |")
        acc = w["acceptance"]
        out += ["", f"Acceptance ({acc['policy']}): {acc['opt_gain_cells']} of {len(cells)} cells have opt >= "
                f"{OPT_GAIN:g}x {BASELINE_POLICY}.", ""]
        out.append(f"- capture < {CAPTURE_TARGET:g} where opt >= {OPT_GAIN:g}x: " + _cell_list(acc["capture_below"]))
        out.append(f"- {acc['policy']} < {SLOWER_LIMIT:g}x {BASELINE_POLICY}: " + _cell_list(acc["slower_than_lru"]))
        out.append("")
    return "\n".join(out) + "\n"


def _num(value, digits: int) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"


def _cell_list(rows) -> str:
    if not rows:
        return "none"
    return "; ".join(f"C={r['concurrency']} f={r['device_fraction']:g} host {r['host_ratio']:g}x "
                     f"({_num(r['speedup'], 3)}x, capture {_num(r['capture'], 3)}, opt {_num(r['opt_speedup'], 3)}x)"
                     for r in rows)
