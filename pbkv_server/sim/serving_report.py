"""The ``bench_serving`` figures of a replay as tables and lines (:mod:`pbkv_server.sim.serving_metrics`).

``pbkv-bench replay`` prints :func:`serving_tables` after its own tables; ``advise`` prints
:func:`serving_line` of the policy it recommends. Each table fits 80 columns (no outer border,
one space between columns, milliseconds in at most 7 characters); ``--json`` keeps every figure
at full precision under the same names.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from rich import box
from rich.table import Table

from pbkv_server.sim.serving_metrics import STATS

__all__ = ["serving_tables", "serving_line", "ceiling_note"]


def serving_tables(results: Mapping[str, Mapping[str, Any]], tier: str = "") -> list[Table]:
    """Per policy: TTFT and TPOT; ITL and end-to-end latency (ms, mean / median / p90 / p99);
    workflow (and session) latency (s); throughput, goodput and hit rate against the ceiling."""
    where = f", {tier}" if tier else ""
    tables = [
        _stats_table(results, ("ttft", "tpot"), f"request latency (simulated ms{where}): TTFT and TPOT "
                                                 "(bench_serving names: mean_ttft_ms, median_ttft_ms, p90_ttft_ms, ...)"),
        _stats_table(results, ("itl", "e2e_latency"), "inter-token and end-to-end request latency (simulated ms)"),
    ]
    scopes = ("workflow_latency", "session_latency") if any(
        _finite(s.get("mean_session_latency_ms")) for s in results.values()) else ("workflow_latency",)
    tables.append(_stats_table(results, scopes, "workflow (wf)" + (" and session (sess)" if len(scopes) > 1 else "")
                               + " latency (simulated s)", scale=1e-3))
    tables.append(_throughput_table(results))
    return tables


#: Short column headers of each distribution.
_LABEL = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2e_latency": "E2E", "workflow_latency": "wf",
          "session_latency": "sess"}


def _stats_table(results: Mapping[str, Mapping[str, Any]], metrics: tuple[str, ...], title: str,
                 scale: float = 1.0) -> Table:
    table = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0))
    table.add_column("policy", no_wrap=True)
    for m in metrics:
        for stat in STATS:
            table.add_column(f"{_LABEL[m]}\n{stat}", justify="right", no_wrap=True)
    for name, s in results.items():
        table.add_row(name, *(_ms(s.get(f"{stat}_{m}_ms"), scale) for m in metrics for stat in STATS))
    return table


def _throughput_table(results: Mapping[str, Mapping[str, Any]]) -> Table:
    first = next(iter(results.values()), {})
    goodput = first.get("request_goodput") is not None or "slo_attainment" in first
    slo = ", ".join(f"{k} <= {first[f'slo_{k}_ms']:g} ms" for k in ("ttft", "tpot")
                    if first.get(f"slo_{k}_ms") is not None)
    title = ("throughput (per simulated s)" + (f"; goodput: requests with {slo}" if goodput else
                                                "; goodput: give --slo-ttft / --slo-tpot")
             + "; ceiling = an infinite cache's hit rate on this trace")
    table = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0))
    cols = ["policy", "req/s", "input\ntok/s", "output\ntok/s"]
    if goodput:
        cols += ["good-\nput/s", "SLO\nmet"]
    cols += ["dev+\nhost\nhit", "ceil-\ning", "of\nceil-\ning"]
    for col in cols:
        table.add_column(col, justify="left" if col == "policy" else "right", no_wrap=True)
    for name, s in results.items():
        hit = s.get("hit_rate", math.nan) + s.get("host_hit_rate", math.nan)
        ceiling = s.get("hit_rate_ceiling")
        row = [name, _num(s.get("request_throughput"), 3), _rate(s.get("input_throughput")),
               _rate(s.get("output_throughput"))]
        if goodput:
            row += [_num(s.get("request_goodput"), 3), _num(s.get("slo_attainment"), 3)]
        row += [_num(hit, 3), _num(ceiling, 3), _num(hit / ceiling if _finite(ceiling) and ceiling else None, 3)]
        table.add_row(*row)
    return table


def serving_line(name: str, s: Mapping[str, Any]) -> str:
    """One line of a policy's ``bench_serving`` figures (simulated ms; goodput when SLOs were given)."""
    parts = [f"{name}: TTFT mean/p50/p90/p99 " + "/".join(_ms(s.get(f"{st}_ttft_ms")) for st in STATS) + " ms",
             "TPOT mean/p99 " + "/".join(_ms(s.get(f"{st}_tpot_ms")) for st in ("mean", "p99")) + " ms",
             "ITL p99 " + _ms(s.get("p99_itl_ms")) + " ms",
             f"{_num(s.get('request_throughput'), 3)} req/s"]
    if s.get("slo_attainment") is not None:
        parts.append(f"goodput {_num(s.get('request_goodput'), 3)} req/s ({_num(s['slo_attainment'], 3)} met the SLOs)")
    return ", ".join(parts)


def ceiling_note(hit: float, ceiling: float | None) -> str:
    """``dev+host hit 0.412 of ceiling 0.530 (0.78)``; ``-`` parts where undefined."""
    share = hit / ceiling if _finite(ceiling) and ceiling else None
    return f"dev+host hit {_num(hit, 3)} of ceiling {_num(ceiling, 3)} ({_num(share, 2)})"


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _num(value: Any, digits: int) -> str:
    return f"{value:.{digits}f}" if _finite(value) else "-"


def _ms(value: Any, scale: float = 1.0) -> str:
    """At most 7 characters: one decimal below 10,000, none below 10,000,000, else in e-notation."""
    if not _finite(value):
        return "-"
    v = value * scale
    return f"{v:.1f}" if abs(v) < 10_000 else f"{v:.0f}" if abs(v) < 10_000_000 else f"{v:.1e}"


def _rate(value: Any) -> str:
    """Tokens per second in at most 7 characters: 950.3, 12345, 1.2e+07."""
    return _ms(value)
