"""Printing and plotting an example's results: the Table-1-style table, hit rate over time, bars."""

from __future__ import annotations

import os
import textwrap
from typing import Sequence

from rich.console import Console
from rich.table import Table

from examples.common.results import Comparison, PolicyResult
from pbkv_server.engine.policies import REFERENCE_POLICY
from pbkv_server.sim.policy_style import FAINT, emphasis, policy_style

__all__ = ["results_table", "agent_ttft_table", "latency_breakdown_table", "print_results", "plot_hit_rate_over_time",
           "plot_bars", "hit_rate_figure", "bars_figure"]


def results_table(title: str, results: Sequence[PolicyResult], comparisons: Sequence[Comparison]) -> Table:
    """Rich table: latency, TTFT, device/host hit rate, prefill saved per policy, speedup vs LRU
    (LRU's mean latency / the policy's, > 1 faster), hit rate over LRU's, latency capture and the
    device hit rate against the offline reference's, in points (``+`` above it): the reference
    (MIN on both tiers, no prefetch) is the end of the latency-capture scale, not a bound on
    device hits, which a prefetching policy can exceed. The caption says so, and when latency
    capture is undefined (:mod:`pbkv_server.sim.measures`)."""
    from pbkv_server.sim.measures import CAPTURE_NOTE

    cmp = {c.policy: c for c in comparisons}
    # the convention in the caption, whole: a header cell of a wide table may wrap
    caption = "speedup vs LRU = LRU mean latency / policy mean latency (x, >1 faster)"
    if any(c.latency_vs_ref is not None for c in comparisons):
        caption += (f"; {CAPTURE_NOTE}; device hit vs {REFERENCE_POLICY} = the policy's device hit rate - "
                    f"{REFERENCE_POLICY}'s, points: {REFERENCE_POLICY} is the latency reference, not a hit-rate "
                    f"bound (it does not prefetch; a policy that prefetches can hit more on the device)")
    table = Table(title=title, caption=caption)
    for col in ("policy", "mean latency s", "p99 latency s", "mean TTFT s", "device hit", "host hit", "prefill saved",
                "speedup vs LRU", "hit x LRU", "latency capture", f"device hit vs {REFERENCE_POLICY}"):
        table.add_column(col, justify="left" if col == "policy" else "right")
    for r in results:
        c = cmp[r.policy]
        # policy - reference (hit_rate_gap_to_ref is reference - policy): "+" reads "above opt"
        gap = "-" if c.hit_rate_gap_to_ref is None else f"{0.0 - 100 * c.hit_rate_gap_to_ref:+.1f} pt"
        saved = "-" if c.prefill_saved is None else f"{100 * c.prefill_saved:.1f}%"
        capture = "-" if c.latency_capture is None else f"{c.latency_capture:.2f}"
        table.add_row(r.policy, f"{r.mean_latency_s:.2f}", f"{r.p99_latency_s:.2f}", f"{r.mean_ttft_s:.3f}",
                      f"{100 * r.hit_rate:.1f}%", f"{100 * r.host_hit_rate:.1f}%", saved, f"{c.latency_speedup:.2f}x",
                      f"{c.hit_rate_ratio:.2f}x", capture, gap)
    return table


def agent_ttft_table(results: Sequence[PolicyResult]) -> Table:
    """Rich table of mean TTFT (seconds) per agent (rows) and policy (columns)."""
    agents = sorted({a for r in results for a in r.ttft_by_agent})
    table = Table(title="per-agent mean TTFT (s)")
    table.add_column("agent")
    for r in results:
        table.add_column(r.policy, justify="right")
    for a in agents:
        table.add_row(a, *(f"{r.ttft_by_agent[a]:.3f}" if a in r.ttft_by_agent else "-" for r in results))
    return table


def latency_breakdown_table(results: Sequence[PolicyResult], setting: str = "") -> Table:
    """Rich table of where each policy's mean workflow latency goes (seconds): admission wait for
    KV memory, host-to-device load, prefill, decode and tool gaps, with the speedup vs LRU
    (:func:`pbkv_server.sim.report.breakdown_table` over the replay summaries); ``setting`` (the
    result table's title: capacities, host tier) ends the title."""
    from pbkv_server.sim.report import breakdown_table

    rows = {r.policy: {"mean_latency_s": r.mean_latency_s, "latency_breakdown_s": r.extra.get("latency_breakdown_s")}
            for r in results}
    title = "where the mean workflow latency goes (simulated seconds); speedup vs LRU = x, >1 faster"
    return breakdown_table(rows, f"{title}; {setting}" if setting else title)


def print_results(title: str, results: Sequence[PolicyResult], comparisons: Sequence[Comparison], console: Console | None = None) -> None:
    """Print the result table, the latency breakdown and per-agent TTFT."""
    console = console or Console()
    console.print(results_table(title, results, comparisons))
    console.print(latency_breakdown_table(results, title))
    console.print(agent_ttft_table(results))


def plot_hit_rate_over_time(results: Sequence[PolicyResult], path: str, title: str) -> str:
    """Line plot of device hit rate over simulated time, one line per policy (PBKV paper Fig. 6 style).

    Returns:
        ``path`` (PNG written).
    """
    return _save(hit_rate_figure(results, title), path)


def hit_rate_figure(results: Sequence[PolicyResult], title: str):
    """The figure of :func:`plot_hit_rate_over_time`. Thirteen policies as equal lines are one
    bundle (issue 35), so the baseline, PBKV, the offline reference and the best alternative SGLang
    ships (:func:`pbkv_server.sim.policy_style.emphasis`) are drawn bold in their own colour and
    line style (:func:`~pbkv_server.sim.policy_style.policy_style`, shared by every chart), the
    others thin and grey behind them under one legend entry. The legend sits outside the axes, so
    it covers no data; the title is wrapped to the figure's width."""
    from matplotlib.lines import Line2D

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10, 4.8), layout="constrained")
    bold = emphasis({r.policy: r.mean_latency_s for r in results})
    faint = [r for r in results if r.policy not in bold and r.timeline]
    for r in faint:
        xs, ys = zip(*r.timeline)
        ax.plot(xs, [100 * y for y in ys], color=FAINT, linewidth=0.9, zorder=1)
    handles = []
    shown = [r for r in results if r.policy in bold and r.timeline]
    for i, r in enumerate(shown):
        xs, ys = zip(*r.timeline)
        style = policy_style(r.policy)
        role = f", {bold[r.policy]}" if bold[r.policy] and bold[r.policy] != "PBKV" else ""
        # each bold line narrower than the one drawn before it: equal curves stay visible as stripes
        handles += ax.plot(xs, [100 * y for y in ys], label=f"{r.policy}{role}: {100 * r.hit_rate:.1f}%",
                           color=style.colour, linestyle=style.linestyle, linewidth=3.4 - 2.2 * i / max(1, len(shown) - 1),
                           zorder=3 + i)
    if faint:
        names = textwrap.fill(", ".join(r.policy for r in faint), 28, break_on_hyphens=False)
        handles.append(Line2D([], [], color=FAINT, linewidth=0.9, label=f"{len(faint)} other policies:\n{names}"))
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("device hit rate (%)")
    ax.set_title(_wrap(title, 80), fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small",
              title="policy: device hit rate")
    return fig


#: Colours of the latency parts in :func:`plot_bars` (same order as the breakdown).
_PART_COLOURS = {"queue_s": "tab:red", "load_s": "tab:orange", "prefill_s": "tab:purple", "decode_s": "tab:blue",
                 "tool_s": "tab:gray"}
_PART_LABELS = {"queue_s": "admission wait", "load_s": "host load", "prefill_s": "prefill", "decode_s": "decode",
                "tool_s": "tool gaps"}


def plot_bars(results: Sequence[PolicyResult], path: str, title: str) -> str:
    """Three bar panels per policy, each bar labelled with its value: mean workflow latency (s),
    stacked by where it goes (admission wait, host load, prefill, decode, tool gaps) when the
    results carry the breakdown; device hit rate (%); host hit rate (%).

    Returns:
        ``path`` (PNG written).
    """
    return _save(bars_figure(results, title), path)


def bars_figure(results: Sequence[PolicyResult], title: str):
    """The figure of :func:`plot_bars`: one panel per row, so every policy's bar is wide enough
    for its value label; hit-rate bars in the policy's colour (:func:`policy_style`)."""
    plt = _pyplot()
    names = [r.policy for r in results]
    colours = [policy_style(n).colour for n in names]
    fig, (ax1, ax2, ax3) = plt.subplots(3, 1, figsize=(11, 11), layout="constrained")
    totals = [r.mean_latency_s for r in results]
    breakdowns = [r.extra.get("latency_breakdown_s") for r in results]
    if all(breakdowns):
        bottom = [0.0] * len(results)
        for part, colour in _PART_COLOURS.items():
            values = [b.get(part, 0.0) for b in breakdowns]
            ax1.bar(names, values, bottom=bottom, color=colour, label=_PART_LABELS[part])
            bottom = [b + v for b, v in zip(bottom, values)]
        ax1.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), title="latency part")
    else:
        ax1.bar(names, totals, color=colours)
    _label(ax1, names, totals, "{:.1f}")
    ax1.set_ylabel("mean workflow latency (s)")
    ax2.bar(names, [100 * r.hit_rate for r in results], color=colours)
    _label(ax2, names, [100 * r.hit_rate for r in results], "{:.1f}%")
    ax2.set_ylabel("device hit rate (%)")
    ax3.bar(names, [100 * r.host_hit_rate for r in results], color=colours)
    _label(ax3, names, [100 * r.host_hit_rate for r in results], "{:.1f}%")
    ax3.set_ylabel("host hit rate (%,\nloaded over PCIe)")
    for ax in (ax1, ax2, ax3):
        ax.tick_params(axis="x", rotation=30)
        plt.setp(ax.get_xticklabels(), ha="right", rotation_mode="anchor")
        ax.grid(axis="y", alpha=0.3)
        ax.set_ylim(0, max(ax.get_ylim()[1], 1.0) * 1.12)  # room for the value labels
    fig.suptitle(_wrap(title, 100), fontsize=10)
    return fig


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: str) -> str:
    import matplotlib.pyplot as plt

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _wrap(title: str, width: int) -> str:
    """Each line of ``title`` wrapped at ``width`` characters (a long setting line is cut otherwise)."""
    return "\n".join(textwrap.fill(line, width) for line in title.split("\n"))


def _label(ax, names: Sequence[str], values: Sequence[float], fmt: str) -> None:
    """Write each bar's value above it."""
    for name, value in zip(names, values):
        ax.annotate(fmt.format(value), (name, value), xytext=(0, 2), textcoords="offset points", ha="center",
                    va="bottom", fontsize=8)
