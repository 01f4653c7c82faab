"""A prefetch round that made room for a candidate loads it next, so ``PrefixCache.evict_for``
(``loads=True``) unlocks the candidate and its parent without filing them again: a replay must
decide exactly as with the unlocks' re-filings (``loads=False``, the general path).

Those re-filings would go stale unread: the load moves the candidate to the device and gives
its parent a device child. The check: a memory-short replay of synthetic coding-agent sessions
with ``pbkv`` and a host tier (prefetch rounds that evict to make room), once as the cache runs
and once with every unlock filing again, compares every figure of the summary and every victim
in order, after checking that the rounds made room and loaded.
"""

from __future__ import annotations

import pytest

from pbkv_contract.trace import read_trace
from pbkv_server.engine.cache import PrefixCache
from pbkv_server.sim.synth.agents import write_trace

from .engine_helpers import replay_victims


@pytest.fixture(scope="module")
def coding_sessions(tmp_path_factory):
    path = tmp_path_factory.mktemp("room-then-load") / "coding.jsonl"
    write_trace(str(path), graph="coding-agent", workflows=12, seed=3)
    return read_trace(str(path))


def _replay(records, monkeypatch, quiet: bool) -> tuple[dict, list, int]:
    """The replay's summary (but its wall-clock latencies), its victims in order, and the rooms
    made for a load (the unlocks that filed nothing, with ``quiet``)."""
    made = [0]
    evict_for = PrefixCache.evict_for

    def counted(self, node, tokens, limit=None, loads=False):
        freed = evict_for(self, node, tokens, limit, loads and quiet)
        made[0] += loads and self.device_free() >= node.tokens
        return freed

    summary, victims = replay_victims(records, monkeypatch, 200_000, 300_000, [(PrefixCache, "evict_for", counted)])
    return summary, victims, made[0]


def test_a_room_made_for_a_load_files_nothing_and_changes_nothing(coding_sessions, monkeypatch):
    quiet_summary, quiet_victims, made = _replay(coding_sessions, monkeypatch, quiet=True)
    filed_summary, filed_victims, _ = _replay(coding_sessions, monkeypatch, quiet=False)
    assert made > 100, made
    assert len(quiet_victims) > 500, len(quiet_victims)
    assert quiet_victims == filed_victims
    assert quiet_summary == filed_summary
