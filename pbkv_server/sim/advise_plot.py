"""The ``pbkv-bench advise --plot`` figure: demand against capacity, and each policy's speedup.

What the figure must carry on its own (issue 35): the whole verdict (wrapped, never cut), the trace,
concurrency, hardware, engine and predictor it was decided on, and speedups that can be told apart
at a glance: 1.05x and 1.00x differ by 5 %, invisible on bars that start at 0. So the speedup panel
draws each policy as a bar from 1.0 (LRU) to its speedup, every bar labelled with its value, the
axis spanning only the values shown; PBKV, the best alternative the engine ships and the offline
reference are named in the legend.
"""

from __future__ import annotations

import os
import textwrap
from typing import Any

from pbkv_server.engine.policies import BASELINE_POLICY, DEFAULT_POLICY, REFERENCE_POLICY
from pbkv_server.sim.shipped import ENGINES, alternative_label

__all__ = ["plot_advice", "advice_figure"]

#: Bar colours by role (colour-blind-safe pairs from matplotlib's tab10).
_ROLE_COLOUR = {"ours": "#1f77b4", "alternative": "#ff7f0e", "reference": "#7f7f7f", "baseline": "#000000",
                "other": "#c7c7c7"}


def plot_advice(path: str, a: Any) -> None:
    """Write :func:`advice_figure` of the advice ``a`` at ``path`` (PNG unless its suffix names another format; its folders are made)."""
    import matplotlib.pyplot as plt

    from pbkv_server.sim.report import save_figure

    fig = advice_figure(a)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    save_figure(fig, path)
    plt.close(fig)


def advice_figure(a: Any):
    """Two panels under a title holding the setting and the whole verdict: left, demand (A, W)
    against capacity (device, device + host) in KV tokens; right, speedup vs LRU per policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 5.2), gridspec_kw={"width_ratios": [1, 1.6]},
                                      layout="constrained")
    _demand_panel(left, a)
    _speedup_panel(right, a)
    engine = ENGINES.get(a.engine, a.engine)
    origin = f"; trace recorded against the {a.trace_origin} (made-up reply lengths)" if a.trace_origin else ""
    setting = (f"{a.trace or 'trace'}: C = {a.concurrency}, {a.profile}, predictor {a.predictor}, "
               f"engine {engine}{origin}")
    verdict = textwrap.fill(f"verdict: {a.verdict}", 120)
    fig.suptitle(f"{textwrap.fill(setting, 120)}\n{verdict}", fontsize=9, ha="left", x=0.01)
    return fig


def _demand_panel(ax, a: Any) -> None:
    ax.bar(["demand"], [a.in_flight_tokens], label=f"in flight A ({a.in_flight_tokens:,.0f})", color="#8888cc")
    ax.bar(["demand"], [a.live_tokens], bottom=[a.in_flight_tokens],
           label=f"reusable working set W ({a.live_tokens:,.0f})", color="#4444aa")
    ax.bar(["capacity"], [a.device_tokens], label=f"device ({a.device_tokens:,})", color="#cc8844")
    ax.bar(["capacity"], [a.host_tokens], bottom=[a.device_tokens], label=f"host ({a.host_tokens:,})",
           color="#eebb88")
    ax.set_ylabel("KV tokens")
    ax.set_title(f"regime: {a.regime}", fontsize=10)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.08), ncol=2)


def _speedup_panel(ax, a: Any) -> None:
    if not a.speedup:
        ax.text(0.5, 0.5, "not replayed", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return
    names = list(a.speedup)
    values = [a.speedup[n] for n in names]
    roles = [_role(n, a) for n in names]
    ys = list(range(len(names)))[::-1]  # first policy on top
    ax.barh(ys, [v - 1.0 for v in values], left=1.0, color=[_ROLE_COLOUR[r] for r in roles], height=0.6)
    ax.axvline(1.0, color="black", linewidth=0.9)
    low, high = min(values + [1.0]), max(values + [1.0])
    pad = max(0.01, 0.12 * (high - low))
    ax.set_xlim(low - pad, high + 2.2 * pad)  # room for the labels right of the longest bar
    for y, v in zip(ys, values):
        ax.annotate(f"{v:.3f}x", (max(v, 1.0), y), xytext=(3, 0), textcoords="offset points", va="center",
                    fontsize=8)
    ax.set_yticks(ys, [_tick(n, a) for n in names], fontsize=8)
    ax.set_xlabel("speedup vs LRU = L_lru / L_policy (bars from 1.0 = LRU; >1 faster)", fontsize=9)
    ax.grid(axis="x", alpha=0.3)
    ax.set_title("mean workflow latency, simulated", fontsize=10)


def _role(name: str, a: Any) -> str:
    if name == DEFAULT_POLICY:
        return "ours"
    if name == REFERENCE_POLICY:
        return "reference"
    if name == BASELINE_POLICY:
        return "baseline"
    return "alternative" if name == a.alternative else "other"


def _tick(name: str, a: Any) -> str:
    """The policy's name, with its role where it has one in the verdict."""
    role = _role(name, a)
    if role == "alternative":
        return f"{name}\n({alternative_label(name, a.engine)}: best shipped)"
    if role == "reference":
        return f"{name}\n(offline reference)"
    return name
