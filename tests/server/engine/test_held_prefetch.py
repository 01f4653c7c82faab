"""Prefetch entries held during a device eviction (``EvictionHeaps.hold_prefetch``) change no
decision.

``Eviction.evict_device`` holds the prefetch entries its re-filings file and pushes those still
valid at its end: on a conversation's path walked up by eviction, each moved victim's entry goes
invalid when its parent follows it. This exists for speed only, so a replay must come out the
same as with every entry pushed at once. The check: a memory-short replay of synthetic
coding-agent sessions with a host tier (paths walked up, moves to the host, prefetch rounds),
once as the cache runs and once with holding switched off, compares every figure of the summary
and every victim in order, after checking that invalid entries were dropped unpushed.
"""

from __future__ import annotations

import pytest

from pbkv_contract.trace import read_trace
from pbkv_server.engine.heaps import EvictionHeaps, prefetch_valid
from pbkv_server.sim.synth.agents import write_trace

from .engine_helpers import replay_victims


@pytest.fixture(scope="module")
def coding_sessions(tmp_path_factory):
    path = tmp_path_factory.mktemp("held-prefetch") / "coding.jsonl"
    write_trace(str(path), graph="coding-agent", workflows=12, seed=3)
    return read_trace(str(path))


def _replay(records, monkeypatch, hold: bool) -> tuple[dict, list]:
    """The replay's summary (but its wall-clock decision latencies) and its victims in order."""
    # without holding: as if held already, each entry pushed at once
    patches = () if hold else [(EvictionHeaps, "hold_prefetch", lambda self: False)]
    return replay_victims(records, monkeypatch, 300_000, 300_000, patches)


def test_held_prefetch_entries_change_no_figure_and_no_victim(coding_sessions, monkeypatch):
    held, dropped = [], []
    release = EvictionHeaps.release_prefetch

    def counted(self):
        entries = self._pf_held
        held.extend(entries)
        dropped.extend(e for e in entries if not prefetch_valid(e))
        release(self)

    with monkeypatch.context() as m:
        m.setattr(EvictionHeaps, "release_prefetch", counted)
        held_summary, held_victims = _replay(coding_sessions, monkeypatch, hold=True)
    pushed_summary, pushed_victims = _replay(coding_sessions, monkeypatch, hold=False)
    # the held path ran, and dropped entries that had gone invalid, unpushed
    assert len(dropped) > 100, len(dropped)
    assert len(held) > len(dropped)
    assert len(held_victims) > 1000, len(held_victims)
    assert held_victims == pushed_victims
    assert held_summary == pushed_summary
