"""Presenting replay results: a rich table, the JSON file of ``pbkv-bench replay`` and the timeline plot."""

from __future__ import annotations

import json
import math
import os
import textwrap
from typing import Any, Mapping

from rich.table import Table

__all__ = ["results_table", "write_json", "plot_timelines", "jsonable"]


def results_table(results: Mapping[str, Mapping[str, Any]], title: str = "") -> Table:
    """One row per policy: hit rates, latencies, TTFT, evictions, prefetch, eviction-decision latency."""
    table = Table(title=title or None)
    for col in ("policy", "hit rate", "host hit", "mean lat s", "p99 lat s", "mean TTFT s",
                "evictions", "prefetched tok", "evict ms (mean)"):
        table.add_column(col, justify="left" if col == "policy" else "right")
    for name, s in results.items():
        evict = (s.get("latency_ms") or {}).get("eviction_decision", {}).get("mean_ms", math.nan)
        table.add_row(
            name,
            f"{s['hit_rate']:.3f}",
            f"{s['host_hit_rate']:.3f}",
            _num(s["mean_latency_s"], 2),
            _num(s.get("p99_latency_s", math.nan), 2),
            _num(s["mean_ttft_s"], 3),
            str(s.get("evictions", "")),
            str(s.get("prefetched_tokens", "")),
            _num(evict, 3),
        )
    return table


def jsonable(value: Any) -> Any:
    """``value`` with NaN/inf floats replaced by ``None`` (strict JSON has no NaN)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


def write_json(path: str | os.PathLike[str], results: Mapping[str, Mapping[str, Any]]) -> None:
    """Write ``{policy: summary}`` as strict JSON (NaN -> null), creating the parent directory."""
    parent = os.path.dirname(os.fspath(path))
    if parent:
        os.makedirs(parent, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(jsonable(results), fh, indent=1, allow_nan=False)
        fh.write("\n")


def plot_timelines(path: str | os.PathLike[str], results: Mapping[str, Mapping[str, Any]], title: str = "") -> None:
    """Device hit rate over time (bin midpoints, seconds from start) of every policy on one chart (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4.8))
    for name, s in results.items():
        timeline = s.get("timeline") or []
        if not timeline:
            continue
        t0 = timeline[0]["t_start"]
        xs = [(b["t_start"] + b["t_end"]) / 2 - t0 for b in timeline]
        ys = [b["hit_rate"] if b["hit_rate"] is not None else math.nan for b in timeline]
        ax.plot(xs, ys, marker=".", label=f"{name} ({s['hit_rate']:.2f})")
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("device hit rate (token level)")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), title="policy (hit rate)")
    if title:
        ax.set_title(textwrap.fill(title, 90), fontsize="small")
    parent = os.path.dirname(os.fspath(path))
    if parent:
        os.makedirs(parent, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _num(value: Any, digits: int) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"
