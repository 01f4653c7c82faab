"""The examples' charts: one colour per policy everywhere, nothing cut off, no label over another (issue 27 item 10)."""

from __future__ import annotations

import itertools

import pytest

from examples.common.report import bars_figure, hit_rate_figure
from examples.common.results import PolicyResult
from pbkv_server.engine.policies import available_policies, policy_info
from pbkv_server.sim.policy_style import FAINT, emphasis, policy_style

POLICIES = list(available_policies())
#: The examples' title: a setting line longer than the figure is wide.
TITLE = ("HoVer + LangGraph\nsimulated timing, setup paper: device 96092 tok, host 1x, profile a6000-qwen3-14b, "
         "concurrency 72, messages per-agent")


def _results() -> list[PolicyResult]:
    """Every registered policy with close, three-digit latencies (the crowded case)."""
    out = []
    for i, name in enumerate(POLICIES):
        timeline = [(10.0 * k, 0.3 + 0.01 * i + 0.02 * (k % 3)) for k in range(12)]
        out.append(PolicyResult(policy=name, mean_latency_s=118.4 + 0.7 * i, p99_latency_s=300.0, mean_ttft_s=1.0,
                                ttft_by_agent={}, hit_rate=0.305 + 0.004 * i, host_hit_rate=0.2 + 0.003 * i,
                                makespan_s=120.0, timeline=timeline,
                                extra={"latency_breakdown_s": {"queue_s": 10.0, "load_s": 2.0, "prefill_s": 30.0,
                                                               "decode_s": 70.0 + 0.7 * i, "tool_s": 6.4}}))
    return out


def test_every_registered_policy_has_its_own_colour_in_every_chart():
    styles = {p: policy_style(p) for p in POLICIES}
    assert len({s.colour for s in styles.values()}) == len(POLICIES), styles
    assert all(s.linestyle == ("--" if policy_info(p).offline else "-") for p, s in styles.items())
    # the two pairs the old charts drew alike
    assert styles["lru"].colour != styles["spec-prefill"].colour and styles["he"].colour != styles["opt"].colour
    fig = hit_rate_figure(_results(), TITLE)
    lines = fig.axes[0].get_lines()
    assert len(lines) == len(POLICIES)
    bold = {line.get_label().split(":")[0].split(",")[0]: line.get_color() for line in lines if line.get_color() != FAINT}
    assert bold == {p: styles[p].colour for p in ("lru", "pbkv", "opt")}  # the others: thin grey (next test)
    bars = bars_figure(_results(), TITLE)
    device = bars.axes[1].patches
    assert [p.get_facecolor() for p in device] == [pytest.approx(_rgba(styles[n].colour)) for n in POLICIES]


def test_hit_rate_chart_keeps_title_inside_and_legend_off_the_data():
    fig = hit_rate_figure(_results(), TITLE)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    figure_box = fig.bbox
    title = ax.title.get_window_extent(renderer)
    assert title.x0 >= figure_box.x0 and title.x1 <= figure_box.x1, (title, figure_box)
    legend = ax.get_legend().get_window_extent(renderer)
    assert not legend.overlaps(ax.get_window_extent(renderer)), "the legend covers the plot area"
    assert legend.x1 <= figure_box.x1


def test_bar_value_labels_never_overlap():
    fig = bars_figure(_results(), TITLE)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        boxes = [t.get_window_extent(renderer) for t in ax.texts]
        assert len(boxes) == len(POLICIES)
        clashes = [(a, b) for a, b in itertools.combinations(range(len(boxes)), 2) if boxes[a].overlaps(boxes[b])]
        assert not clashes, f"{ax.get_ylabel()}: labels {clashes} overlap"
        assert all(fig.bbox.x0 <= b.x0 and b.x1 <= fig.bbox.x1 for b in boxes)
    suptitle = fig._suptitle.get_window_extent(renderer)
    assert fig.bbox.x0 <= suptitle.x0 and suptitle.x1 <= fig.bbox.x1


def _rgba(colour: str) -> tuple[float, ...]:
    from matplotlib.colors import to_rgba

    return to_rgba(colour)


def test_the_hit_rate_chart_draws_four_policies_bold_and_the_rest_as_one_grey_entry():
    # issue 35: 13 policies were one bundle of lines. Bold: LRU, PBKV, the offline reference and the
    # best alternative SGLang ships (here sglang-session, made the fastest one SGLang ships).
    results = _results()
    for r in results:
        if r.policy == "sglang-session":
            r.mean_latency_s = 100.0
    assert emphasis({r.policy: r.mean_latency_s for r in results}) == {
        "lru": "baseline", "pbkv": "PBKV", "sglang-session": "best SGLang ships", "opt": "offline reference"}
    fig = hit_rate_figure(results, TITLE)
    lines = fig.axes[0].get_lines()
    faint = [line for line in lines if line.get_color() == FAINT]
    assert len(faint) == len(POLICIES) - 4
    assert max(line.get_linewidth() for line in faint) < min(line.get_linewidth() for line in lines
                                                             if line.get_color() != FAINT)
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert legend[:4] == ["lru, baseline: 30.5%", f"pbkv: {100 * results[POLICIES.index('pbkv')].hit_rate:.1f}%",
                          f"sglang-session, best SGLang ships: "
                          f"{100 * results[POLICIES.index('sglang-session')].hit_rate:.1f}%",
                          f"opt, offline reference: {100 * results[POLICIES.index('opt')].hit_rate:.1f}%"]
    assert legend[4].startswith(f"{len(POLICIES) - 4} other policies:") and len(legend) == 5
    # five policies or fewer: every one bold, in its own colour
    few = [r for r in results if r.policy in ("lru", "lae", "he", "pbkv")]
    assert not [line for line in hit_rate_figure(few, TITLE).axes[0].get_lines() if line.get_color() == FAINT]
