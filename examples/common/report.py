"""Printing and plotting an example's results: the Table-1-style table, hit rate over time, bars."""

from __future__ import annotations

import os
from typing import Sequence

from rich.console import Console
from rich.table import Table

from examples.common.results import Comparison, PolicyResult
from pbkv_server.engine.policies import REFERENCE_POLICY, policy_info

__all__ = ["results_table", "agent_ttft_table", "print_results", "plot_hit_rate_over_time", "plot_bars"]


def results_table(title: str, results: Sequence[PolicyResult], comparisons: Sequence[Comparison]) -> Table:
    """Rich table: latency, TTFT, device/host hit rate per policy, ratios to LRU, gap to the offline reference."""
    cmp = {c.policy: c for c in comparisons}
    table = Table(title=title)
    for col in ("policy", "mean latency s", "p99 latency s", "mean TTFT s", "device hit", "host hit",
                "latency x LRU", "hit x LRU", f"hit gap to {REFERENCE_POLICY}"):
        table.add_column(col, justify="left" if col == "policy" else "right")
    for r in results:
        c = cmp[r.policy]
        gap = "-" if c.hit_rate_gap_to_ref is None else f"{100 * c.hit_rate_gap_to_ref:+.1f} pt"
        table.add_row(r.policy, f"{r.mean_latency_s:.2f}", f"{r.p99_latency_s:.2f}", f"{r.mean_ttft_s:.3f}",
                      f"{100 * r.hit_rate:.1f}%", f"{100 * r.host_hit_rate:.1f}%", f"{c.latency_speedup:.2f}x",
                      f"{c.hit_rate_ratio:.2f}x", gap)
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


def print_results(title: str, results: Sequence[PolicyResult], comparisons: Sequence[Comparison], console: Console | None = None) -> None:
    """Print both tables."""
    console = console or Console()
    console.print(results_table(title, results, comparisons))
    console.print(agent_ttft_table(results))


def plot_hit_rate_over_time(results: Sequence[PolicyResult], path: str, title: str) -> str:
    """Line plot of device hit rate over simulated time, one line per policy (PBKV paper Fig. 6 style).

    Returns:
        ``path`` (PNG written).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for r in results:
        if r.timeline:
            xs, ys = zip(*r.timeline)
            ax.plot(xs, [100 * y for y in ys], label=r.policy, linestyle="--" if _offline(r.policy) else "-")
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("device hit rate (%)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_bars(results: Sequence[PolicyResult], path: str, title: str) -> str:
    """Two bar panels per policy: mean workflow latency (s) and device hit rate (%).

    Returns:
        ``path`` (PNG written).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r.policy for r in results]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.6))
    ax1.bar(names, [r.mean_latency_s for r in results], color="tab:blue")
    ax1.set_ylabel("mean workflow latency (s)")
    ax2.bar(names, [100 * r.hit_rate for r in results], color="tab:green")
    ax2.set_ylabel("device hit rate (%)")
    for ax in (ax1, ax2):
        ax.tick_params(axis="x", rotation=30)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _offline(policy: str) -> bool:
    """Offline references are drawn dashed; a name the registry does not know is drawn as a policy."""
    try:
        return policy_info(policy).offline
    except ValueError:
        return False
