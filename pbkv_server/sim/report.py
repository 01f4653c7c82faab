"""Presenting replay results: a rich table, the JSON file of ``pbkv-bench replay`` and the timeline plot."""

from __future__ import annotations

import json
import math
import os
import textwrap
from typing import Any, Mapping

from rich import box
from rich.table import Table

from pbkv_server.engine.policies import BASELINE_POLICY
from pbkv_server.sim.measures import CAPTURE_NOTE, MIN_DIFFERENCE, latency_speedup

__all__ = ["save_figure", "results_table", "latency_table", "breakdown_table", "gap_closed", "add_gap_closed", "write_json",
           "plot_timelines", "jsonable"]


def results_table(results: Mapping[str, Mapping[str, Any]], title: str = "", caption: str = "") -> Table:
    """One row per policy, what the cache kept: device hit rate, device-hit gap closed, host and
    device + host hit rates, prefill saved (:func:`~pbkv_server.sim.measures.prefill_saved`),
    evictions, prefetch, eviction-decision latency. Latency is in :func:`latency_table`.

    Laid out to fit an 80-column console without cutting any figure (rich shortens cells that do
    not fit with an ellipsis): multi-line headers, no outer borders, one space between columns,
    token counts in k/M units. The JSON file keeps every figure at full precision.
    """
    table = Table(title=title or None, caption=caption or None, box=box.SIMPLE_HEAD, show_edge=False,
                  pad_edge=False, padding=(0, 1, 0, 0))
    for col in ("policy", "device\nhit\nrate", "device-\nhit gap\nclosed", "host\nhit", "dev+\nhost",
                "prefill\nsaved", "evic-\ntions", "pre-\nfetch", "evict\nms"):
        table.add_column(col, justify="left" if col == "policy" else "right", no_wrap=True)
    for name, s in results.items():
        evict = (s.get("latency_ms") or {}).get("eviction_decision", {}).get("mean_ms", math.nan)
        table.add_row(
            name,
            f"{s['hit_rate']:.3f}",
            _num(s.get("gap_closed"), 2).replace("-0.00", "0.00"),  # a tie with the baseline is no loss
            f"{s['host_hit_rate']:.3f}",
            f"{s['hit_rate'] + s['host_hit_rate']:.3f}",
            _num(s.get("prefill_saved"), 3),
            str(s.get("evictions", "")),
            _tokens(s.get("prefetched_tokens")),
            _num(evict, 3),
        )
    return table


def latency_table(results: Mapping[str, Mapping[str, Any]], title: str = "", caption: str = CAPTURE_NOTE) -> Table:
    """One row per policy: mean and p99 workflow latency, mean TTFT (simulated seconds), speedup
    vs LRU (``latency_speedup``, x, > 1 faster) and latency capture (``latency_capture``, "-"
    where undefined, said in ``caption``)."""
    table = Table(title=title or None, caption=caption or None, box=box.SIMPLE_HEAD, show_edge=False,
                  pad_edge=False, padding=(0, 1, 0, 0))
    for col in ("policy", "mean\nlat s", "p99\nlat s", "mean\nTTFT s", f"speedup\nvs {BASELINE_POLICY}",
                "latency\ncapture"):
        table.add_column(col, justify="left" if col == "policy" else "right", no_wrap=True)
    for name, s in results.items():
        table.add_row(name, _seconds(s["mean_latency_s"]), _seconds(s.get("p99_latency_s", math.nan)),
                      _num(s["mean_ttft_s"], 3), _speedup(s.get("latency_speedup")),
                      _num(s.get("latency_capture"), 2).replace("-0.00", "0.00"))
    return table


#: Smallest baseline-to-reference gap (device hit rate) that "gap closed" is computed over
#: (:data:`~pbkv_server.sim.measures.MIN_DIFFERENCE`, the one "no difference" rule).
MIN_GAP = MIN_DIFFERENCE


#: Columns of :func:`breakdown_table`: summary key of ``latency_breakdown_s`` -> header.
BREAKDOWN_COLUMNS = {"queue_s": "admission\nwait", "load_s": "host\nload", "prefill_s": "prefill",
                     "decode_s": "decode", "tool_s": "tool\ngaps"}


def breakdown_table(results: Mapping[str, Mapping[str, Any]], title: str = "") -> Table:
    """Where each policy's mean workflow latency goes: one row per policy, seconds per part
    (``latency_breakdown_s`` of :meth:`~pbkv_server.sim.metrics.MetricsCollector.summary`:
    admission wait for KV memory, host-to-device load, prefill, decode, tool gaps; the parts add
    up to the mean latency), then the speedup vs LRU (the baseline's mean latency / the row's,
    x, > 1 faster; ``-`` without a baseline row or ``latency_speedup``).

    Rows without a breakdown (results of an older run) show ``-``.
    """
    table = Table(title=title or None, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0))
    table.add_column("policy", no_wrap=True)
    table.add_column("mean\nlat s", justify="right", no_wrap=True)
    for header in BREAKDOWN_COLUMNS.values():
        table.add_column(header, justify="right", no_wrap=True)
    table.add_column(f"speedup\nvs {BASELINE_POLICY}", justify="right", no_wrap=True)
    base = (results.get(BASELINE_POLICY) or {}).get("mean_latency_s")
    for name, s in results.items():
        parts = s.get("latency_breakdown_s") or {}
        speedup = s.get("latency_speedup", latency_speedup(base, s.get("mean_latency_s")))
        table.add_row(name, _seconds(s["mean_latency_s"]), *(_seconds(parts.get(k)) for k in BREAKDOWN_COLUMNS),
                      _speedup(speedup))
    return table


def gap_closed(hit_rate: float, baseline_hit_rate: float | None, reference_hit_rate: float | None) -> float | None:
    """Share of the baseline-to-reference hit-rate gap a policy closes: ``(h - h_base) / (h_ref - h_base)``.

    0 is the baseline (LRU), 1 the offline reference; a policy below the baseline is negative.
    ``None`` (shown as "-") when either end is missing or the reference is less than
    :data:`MIN_GAP` above the baseline (no gap to close).
    """
    if baseline_hit_rate is None or reference_hit_rate is None or reference_hit_rate - baseline_hit_rate < MIN_GAP:
        return None
    return (hit_rate - baseline_hit_rate) / (reference_hit_rate - baseline_hit_rate)


def add_gap_closed(results: Mapping[str, dict[str, Any]], baseline: str, baseline_hit_rate: float | None,
                   reference: str, reference_hit_rate: float | None) -> None:
    """Add to each policy's summary, in place: ``device_host_hit_rate`` (device + host hit rate),
    ``gap_closed`` (:func:`gap_closed` of its device hit rate), and the scale it was measured on:
    ``gap_baseline`` / ``gap_reference`` (policy names) with their device hit rates
    ``gap_baseline_hit_rate`` / ``gap_reference_hit_rate`` (``None`` where not replayed)."""
    for s in results.values():
        s["device_host_hit_rate"] = s["hit_rate"] + s["host_hit_rate"]
        s["gap_closed"] = gap_closed(s["hit_rate"], baseline_hit_rate, reference_hit_rate)
        s.update(gap_baseline=baseline, gap_baseline_hit_rate=baseline_hit_rate,
                 gap_reference=reference, gap_reference_hit_rate=reference_hit_rate)


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
    """The replay chart (PNG): device hit rate over time (bin midpoints, seconds from start) of
    every policy on the left; on the right each policy's mean workflow latency as a bar, stacked
    by where it goes (``latency_breakdown_s``: admission wait, host load, prefill, decode, tool
    gaps) when every policy has the breakdown, labelled with its speedup vs LRU when known."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from pbkv_server.sim.policy_style import FAINT, emphasis, policy_style

    fig, (ax, lat_ax) = plt.subplots(1, 2, figsize=(14, 5.2), gridspec_kw={"width_ratios": [2.3, 1]})
    # Some policies are nearly equal (kvflow and lru on dynamic workloads): besides colour, vary
    # line style and marker so overlapping curves stay tell-apart in print and greyscale. Beyond a
    # few policies only the baseline, PBKV, the reference and the best shipped alternative are
    # drawn so; the others are thin grey lines behind them (one legend entry).
    styles = ("-", "--", "-.", ":")
    markers = ("o", "s", "^", "D", "v", "P", "X")
    bold = emphasis({name: s.get("mean_latency_s") for name, s in results.items()})
    faint = 0
    for i, (name, s) in enumerate(results.items()):
        timeline = s.get("timeline") or []
        if not timeline:
            continue
        t0 = timeline[0]["t_start"]
        xs = [(b["t_start"] + b["t_end"]) / 2 - t0 for b in timeline]
        ys = [b["hit_rate"] if b["hit_rate"] is not None else math.nan for b in timeline]
        if name not in bold:
            faint += 1
            ax.plot(xs, ys, color=FAINT, linewidth=0.9, zorder=1,
                    label=f"{sum(n not in bold for n in results)} other policies" if faint == 1 else None)
            continue
        ax.plot(xs, ys, linestyle=styles[i % len(styles)], marker=markers[i % len(markers)], markersize=3.5,
                linewidth=1.4, alpha=0.9, label=f"{name} ({s['hit_rate']:.2f})", color=policy_style(name).colour,
                zorder=2)
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("device hit rate (token level)")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    # Below the axes, never over the curves (the latency panel takes the right-hand side).
    ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=4, title="policy (hit rate)")
    _latency_bars(lat_ax, results)
    if title:
        fig.suptitle(textwrap.fill(title, 140), fontsize="small")
    parent = os.path.dirname(os.fspath(path))
    if parent:
        os.makedirs(parent, exist_ok=True)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


def save_figure(fig: Any, path: str | os.PathLike[str]) -> None:
    """``fig.savefig`` to exactly ``path``: the format of its suffix, PNG for a bare or unknown one
    (matplotlib would append ".png" to a bare name, so a file written aside and renamed,
    :func:`pbkv_contract.files.replace_file`, would not be found)."""
    suffix = os.path.splitext(os.fspath(path))[1].lstrip(".").lower()
    fmt = suffix if suffix in fig.canvas.get_supported_filetypes() else "png"
    fig.savefig(path, dpi=120, format=fmt)


#: Colours and labels of the latency parts in the chart's bars (order of ``BREAKDOWN_COLUMNS``).
_PART_STYLE = {"queue_s": ("tab:red", "admission wait"), "load_s": ("tab:orange", "host load"),
               "prefill_s": ("tab:purple", "prefill"), "decode_s": ("tab:blue", "decode"),
               "tool_s": ("tab:gray", "tool gaps")}


def _latency_bars(ax, results: Mapping[str, Mapping[str, Any]]) -> None:
    """Horizontal bars of mean workflow latency per policy (first policy on top), stacked by the
    breakdown when every row has it; each bar labelled ``seconds (speedup vs LRU)``."""
    names = list(results)
    ys = list(range(len(names)))[::-1]
    totals = [results[n].get("mean_latency_s") for n in names]
    totals = [t if isinstance(t, (int, float)) and math.isfinite(t) else 0.0 for t in totals]
    parts = [results[n].get("latency_breakdown_s") or {} for n in names]
    if names and all(all(isinstance(p.get(k), (int, float)) and math.isfinite(p[k]) for k in _PART_STYLE)
                     for p in parts):
        left = [0.0] * len(names)
        for key, (colour, label) in _PART_STYLE.items():
            widths = [p[key] for p in parts]
            ax.barh(ys, widths, left=left, color=colour, label=label)
            left = [a + w for a, w in zip(left, widths)]
        ax.legend(fontsize="x-small", loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3)
    else:
        ax.barh(ys, totals, color="tab:blue")
    for y, name, total in zip(ys, names, totals):
        speedup = results[name].get("latency_speedup")
        label = f"{total:.1f}" + (f" ({speedup:.2f}x)" if isinstance(speedup, (int, float)) else "")
        ax.annotate(label, (total, y), xytext=(3, 0), textcoords="offset points", va="center", fontsize=7)
    ax.set_yticks(ys, names, fontsize="small")
    ax.set_xlim(0, max(totals, default=1.0) * 1.3 or 1.0)  # room for the labels
    ax.set_xlabel("mean workflow latency (s)")
    ax.set_title(f"mean latency (speedup vs {BASELINE_POLICY}, x, >1 faster)", fontsize="small")
    ax.grid(axis="x", alpha=0.3)


def _num(value: Any, digits: int) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def _speedup(value: Any) -> str:
    """``1.18x`` (two decimals), ``-`` when undefined."""
    return "-" if value is None or not math.isfinite(value) else f"{value:.2f}x"


def _seconds(value: Any) -> str:
    """Two decimals below 100 s, one up to 10,000 s, none above (keeps the column narrow)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return _num(value, 2 if value < 100 else 1 if value < 10_000 else 0)


def _tokens(value: Any) -> str:
    """A token count in at most 6 characters: 950, 12.3k, 1.11M."""
    if value is None or value == "":
        return ""
    if value < 10_000:
        return str(value)
    if value < 1_000_000:
        return f"{value / 1e3:.1f}k"
    return f"{value / 1e6:.2f}M"
