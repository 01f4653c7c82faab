"""The ``advise --plot`` figure reads on its own (issue 35 item 6): the whole verdict, the trace and
C in the title; speedup bars that tell 1.05x from 1.00x (an axis around 1.0, each bar labelled).

Checked through matplotlib's objects, not pixels.
"""

from __future__ import annotations

import pytest

from pbkv_server.sim.advise import Advice
from pbkv_server.sim.advise_plot import advice_figure

#: A long verdict (the issue's case: four policies at 1.05x), longer than one title line.
VERDICT = ("ties SGLang's session cache: no reason to switch; pbkv 1.05x faster than LRU, sglang-session "
           "1.05x, within the no-difference rule of the replay; trace recorded against the simulator")
SPEEDUP = {"lru": 1.0, "lae": 1.0498, "he": 1.0501, "sglang-session": 1.0499, "pbkv": 1.0502, "opt": 1.0731}


def _advice(**changes) -> Advice:
    base = dict(profile="a6000-qwen3-14b", concurrency=72, ws=None, live_tokens=19757.0, in_flight_tokens=40000.0,
                device_tokens=96092, host_tokens=96092, regime="fits with host",
                latency_s={p: 274.26 / s for p, s in SPEEDUP.items()}, speedup=dict(SPEEDUP), verdict=VERDICT,
                engine="sglang", alternative="sglang-session", trace="hover_test.jsonl")
    base.update(changes)
    return Advice(**base)


def _title(fig) -> str:
    return fig._suptitle.get_text()


def test_the_title_names_trace_and_concurrency_and_carries_the_whole_verdict():
    fig = advice_figure(_advice())
    title = _title(fig)
    assert "hover_test.jsonl" in title and "C = 72" in title
    # every word of the verdict is there, in order, only wrapped
    assert " ".join(title.split()).endswith(" ".join(f"verdict: {VERDICT}".split()))
    assert max(len(line) for line in title.splitlines()) <= 120
    fig.canvas.draw()
    box = fig._suptitle.get_window_extent(fig.canvas.get_renderer())
    assert fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1, "the title runs off the figure"


def test_speedup_bars_start_at_lru_and_carry_their_values():
    fig = advice_figure(_advice())
    ax = fig.axes[1]
    bars = ax.patches
    assert len(bars) == len(SPEEDUP)
    # each bar runs from 1.0 (LRU) to the policy's speedup, so 1.05x is a visible bar and 1.00x none
    assert all(b.get_x() == pytest.approx(1.0) for b in bars)
    widths = sorted(b.get_width() for b in bars)
    assert widths == pytest.approx(sorted(s - 1.0 for s in SPEEDUP.values()))
    low, high = ax.get_xlim()
    assert 0.9 < low < 1.0 and high > max(SPEEDUP.values()), (low, high)
    labels = [t.get_text() for t in ax.texts]
    assert labels == [f"{s:.3f}x" for s in SPEEDUP.values()]


def test_the_alternative_and_the_reference_are_named_on_their_bars():
    ticks = [t.get_text() for t in advice_figure(_advice()).axes[1].get_yticklabels()]
    assert "sglang-session\n(SGLang's session cache: best shipped)" in ticks
    assert "opt\n(offline reference)" in ticks


def test_a_trace_from_the_simulator_says_so_and_nothing_replayed_says_so():
    assert "recorded against the simulator" in _title(advice_figure(_advice(trace_origin="simulator")))
    fig = advice_figure(_advice(speedup={}, latency_s={}))
    assert [t.get_text() for t in fig.axes[1].texts] == ["not replayed"]
