"""Figures of ``pbkv-bench study``: one PNG per study, in the layout of the PBKV paper's figures.

Every figure has labelled axes with units, a legend and, where points repeat over predictor
seeds, error bars of one standard deviation. Inputs are :class:`~pbkv_server.sim.study.paper.Point`
lists (:func:`pbkv_server.sim.study.paper.aggregate`).
"""

from __future__ import annotations

import dataclasses
import os
import textwrap
from typing import Sequence

from pbkv_server.engine.policies import BASELINE_POLICY, DEFAULT_POLICY
from pbkv_server.sim.policy_style import policy_style
from pbkv_server.sim.study.paper import Point, admission_limits

__all__ = ["FIGURES", "plot_study", "plot_regime"]

#: File stem and paper figure of each study.
FIGURES = {
    "concurrency": ("fig5a_concurrency", "Figure 5a"),
    "backbone": ("fig5b_backbone", "Figure 5b"),
    "horizon": ("fig5c_horizon", "Figure 5c"),
    "gamma": ("fig10_gamma", "Figure 10"),
    "rho": ("fig11_rho", "Figure 11"),
    "noise": ("fig12_noise", "Figure 12"),
}
_MARKERS = ("o", "s", "^", "D", "v", "P", "X")
_STYLES = ("-", "--", "-.", ":")


def plot_study(study: str, points: Sequence[Point], path: str, title: str) -> str:
    """Draw ``study``'s figure from its points into ``path`` (PNG; parent folders created).

    Returns:
        ``path``.

    Raises:
        ValueError: unknown study, or no point of it.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    own = [p for p in points if p.study == study]
    if study not in FIGURES or not own:
        raise ValueError(f"no points of study {study!r} to plot")
    if study == "concurrency":
        fig = _concurrency(plt, own)
    elif study == "backbone":
        fig = _backbone(plt, own)
    else:
        fig = _sweep(plt, study, own)
    fig.suptitle(textwrap.fill(f"{FIGURES[study][1]} (simulated): {title}", 110), fontsize=9)
    fig.tight_layout()
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    fig.savefig(path, dpi=120, format="png")
    plt.close(fig)
    return path


def _by_policy(points: Sequence[Point]) -> dict[str, list[Point]]:
    out: dict[str, list[Point]] = {}
    for p in points:
        out.setdefault(p.policy, []).append(p)
    return {k: sorted(v, key=lambda p: p.x) for k, v in out.items()}


def _line(ax, i: int, pts: Sequence[Point], key: str, label: str, scale: float = 1.0) -> None:
    xs = [p.x for p in pts]
    ys = [scale * p.mean[key] for p in pts]
    errs = [scale * p.std[key] for p in pts]
    # the policy's colour in every chart (policy_style); marker and line style keep close curves apart
    colour = policy_style(pts[0].policy).colour if pts else None
    ax.errorbar(xs, ys, yerr=errs if any(errs) else None, marker=_MARKERS[i % len(_MARKERS)], markersize=4,
                linestyle=_STYLES[i % len(_STYLES)], capsize=3, linewidth=1.3, label=label, color=colour)


def _concurrency(plt, points: Sequence[Point]):
    fig, grid = plt.subplots(2, 3, figsize=(17, 8.6))
    axes = grid.ravel()
    limits = admission_limits(points)
    for i, (policy, pts) in enumerate(_by_policy(points).items()):
        limit = limits.get(policy)
        label = f"{policy} (admission limit C={limit})" if limit is not None else f"{policy} (no limit reached)"
        # device + host: what the two tiers together kept (std of the sum bounded by the parts')
        pts = [dataclasses.replace(p, mean={**p.mean, "device_host_hit_rate": p.mean["hit_rate"] + p.mean["host_hit_rate"]},
                                   std={**p.std, "device_host_hit_rate": p.std["hit_rate"] + p.std["host_hit_rate"]})
               for p in pts]
        for ax, key, scale in zip(axes, ("hit_rate", "device_host_hit_rate", "mean_queue_length", "mean_latency_s",
                                         "latency_speedup", "mean_ttft_s"), (100, 100, 1, 1, 1, 1)):
            _line(ax, i, pts, key, label if key == "hit_rate" else policy, scale)
        if limit is not None:  # mark where the policy can no longer admit every request on arrival
            at = next(p for p in pts if p.x == limit)
            axes[0].plot([limit], [100 * at.mean["hit_rate"]], marker="x", color="black", markersize=9)
    axes[2].axhline(1.0, color="black", linewidth=0.8, linestyle=":", label="admission limit (1 request waiting)")
    axes[4].axhline(1.0, color="gray", linewidth=0.8, linestyle=":")
    ylabels = ("device hit rate (%, token level)", "device + host hit rate (%, token level)",
               "requests waiting for admission (mean)", "mean workflow latency (s)",
               f"speedup vs {BASELINE_POLICY} (x, >1 faster)", "mean TTFT (s)")
    for ax, ylabel in zip(axes, ylabels):
        ax.set_xlabel("concurrency (workflows in flight)")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize="x-small", title="policy (x: admission limit)", title_fontsize="x-small")
    for ax in axes[1:]:
        ax.legend(fontsize="x-small")
    return fig


def _backbone(plt, points: Sequence[Point]):
    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    for i, p in enumerate(points):
        ax.errorbar([100 * p.mean["accuracy"]], [p.mean["hit_ratio"]], xerr=[100 * p.std["accuracy"]],
                    yerr=[p.std["hit_ratio"]], marker=_MARKERS[i % len(_MARKERS)], markersize=7, capsize=3,
                    linestyle="none", label=f"{p.x} (n={p.n})")
    ax.axhline(1.0, color="gray", linewidth=0.8, linestyle=":", label=f"{BASELINE_POLICY} (ratio 1)")
    ax.set_xlabel("predictor top-1 accuracy on the test workflows (%, mean over k = 1..K)")
    ax.set_ylabel(f"{DEFAULT_POLICY} device hit rate / {BASELINE_POLICY}'s")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small", title="backbone", title_fontsize="small")
    return fig


_X_LABELS = {
    "horizon": "prediction horizon K (invocations)",
    "gamma": "score decay gamma (PBKV Eq. 2)",
    "rho": "aggressive prefetch displacement share rho (of device capacity per window)",
    "noise": "noise lambda (prediction = (1 - lambda) oracle + lambda uniform)",
}


def _sweep(plt, study: str, points: Sequence[Point]):
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.4))
    for i, (policy, pts) in enumerate(_by_policy(points).items()):
        _line(ax1, i, pts, "hit_ratio", policy)
        _line(ax2, i, pts, "latency_speedup", policy)
    for ax, ylabel in ((ax1, f"device hit rate / {BASELINE_POLICY}'s"),
                       (ax2, f"speedup vs {BASELINE_POLICY} (x, >1 faster)")):
        ax.axhline(1.0, color="gray", linewidth=0.8, linestyle=":", label=f"{BASELINE_POLICY}")
        ax.set_xlabel(_X_LABELS[study])
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small", title="policy", title_fontsize="small")
    return fig


def plot_regime(workload: dict, path: str) -> str:
    """The regime study's figure of one workload (:func:`pbkv_server.sim.study.regime.run_workload`'s
    dict): speedup vs LRU (``L_lru / L``) against the device fraction f = (device - A) / W, one
    panel per (concurrency, host ratio), one line per policy in its :func:`policy_style`; a grey
    band and a star on opt's line mark the cells where opt is at least ``OPT_GAIN`` x LRU; dotted
    verticals mark where A + W fits in the device (f = 1) and in device + host.

    Returns:
        ``path`` (PNG; parent folders created).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from pbkv_server.engine.policies import REFERENCE_POLICY
    from pbkv_server.sim.study.regime import OPT_GAIN

    cells = workload["cells"]
    concurrencies = sorted({c["concurrency"] for c in cells})
    hosts = sorted({c["host_ratio"] for c in cells})
    fig, axes = plt.subplots(len(concurrencies), len(hosts), figsize=(4.6 * len(hosts), 3.6 * len(concurrencies)),
                             squeeze=False, sharey=True)
    policies = list(cells[0]["policies"]) if cells else []
    for row, c in enumerate(concurrencies):
        for col, h in enumerate(hosts):
            ax = axes[row][col]
            own = sorted((x for x in cells if x["concurrency"] == c and x["host_ratio"] == h),
                         key=lambda x: x["device_fraction"])
            xs = [x["device_fraction"] for x in own]
            for i, p in enumerate(policies):
                style = policy_style(p)
                ax.plot(xs, [x["policies"][p]["latency_speedup"] for x in own], marker=_MARKERS[i % len(_MARKERS)],
                        markersize=4, linewidth=1.4, color=style.colour, linestyle=style.linestyle, label=p)
            gain = [x for x in own if x["opt_gain"]]
            if gain:
                ax.plot([x["device_fraction"] for x in gain],
                        [x["policies"][REFERENCE_POLICY]["latency_speedup"] for x in gain], linestyle="none",
                        marker="*", markersize=11, color="black", label=f"opt >= {OPT_GAIN:g}x LRU")
                for x in gain:
                    ax.axvspan(x["device_fraction"] - 0.04, x["device_fraction"] + 0.04, color="0.85", zorder=0)
            ax.axhline(1.0, color="gray", linewidth=0.8, linestyle=":")
            if own:
                a, w = own[0]["in_flight_tokens"], own[0]["live_tokens"]
                ax.axvline(1.0, color="black", linewidth=0.8, linestyle=":")  # A + W = device
                if h > 0 and w > 0:  # A + W = (1 + h) device, device = A + f W
                    f_host = (a + w) / ((1 + h) * w) - a / w
                    if min(xs) <= f_host <= max(xs):
                        ax.axvline(f_host, color="tab:brown", linewidth=0.8, linestyle=":")
            ax.set_title(f"C={c}, host {h:g}x device", fontsize=9)
            ax.set_xlabel("device fraction f = (device - A) / W")
            if col == 0:
                ax.set_ylabel("speedup vs LRU (L_lru / L, >1 faster)")
            ax.grid(alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    for ax in axes.ravel():  # the star appears only in panels with a gain: collect every label once
        for hd, lb in zip(*ax.get_legend_handles_labels()):
            if lb not in labels:
                handles.append(hd)
                labels.append(lb)
    fig.legend(handles, labels, loc="lower center", ncol=min(8, len(labels)), fontsize="small")
    fig.suptitle(textwrap.fill(f"Regime study (simulated): {workload['label']}, profile {workload['profile']}, "
                               f"predictor {os.path.basename(workload['predictor'])}; dotted: A + W fits the device "
                               f"(black, f = 1) / device + host (brown)", 120), fontsize=9)
    fig.tight_layout(rect=(0, 0.07, 1, 0.95))
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)
    return path
