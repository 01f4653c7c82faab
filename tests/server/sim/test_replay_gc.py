"""The collector's settings while a replay runs (``simulator._heap_frozen``): a larger young
generation inside, the caller's thresholds back after, collection left off when it was off."""

from __future__ import annotations

import gc

import pytest

from pbkv_server.sim.simulator import REPLAY_GC_YOUNG, _heap_frozen


@pytest.fixture
def thresholds():
    saved = gc.get_threshold()
    yield
    gc.set_threshold(*saved)


def test_young_generation_raised_inside_and_restored_after(thresholds):
    gc.set_threshold(700, 7, 9)
    with _heap_frozen():
        assert gc.get_threshold() == (REPLAY_GC_YOUNG, 7, 9)
    assert gc.get_threshold() == (700, 7, 9)


def test_larger_threshold_kept(thresholds):
    gc.set_threshold(REPLAY_GC_YOUNG + 5, 10, 10)
    with _heap_frozen():
        assert gc.get_threshold() == (REPLAY_GC_YOUNG + 5, 10, 10)


def test_collection_turned_off_stays_off(thresholds):
    gc.set_threshold(0, 10, 10)
    with _heap_frozen():
        assert gc.get_threshold()[0] == 0


def test_restored_when_the_replay_raises(thresholds):
    gc.set_threshold(700, 10, 10)
    with pytest.raises(RuntimeError), _heap_frozen():
        raise RuntimeError("replay failed")
    assert gc.get_threshold() == (700, 10, 10)


def test_nested_blocks_unfreeze_once_the_outermost_ends(thresholds):
    """A replay inside a load: the inner block must not hand the outer block's frozen objects
    back to the collector, and the outer one must (nothing stays frozen for good)."""
    from pbkv_contract.collector import quiet_collector

    assert gc.get_freeze_count() == 0
    keep = [[i] for i in range(100)]  # tracked containers, frozen by the outer block
    with quiet_collector():
        frozen = gc.get_freeze_count()
        assert frozen >= len(keep)
        with _heap_frozen():
            assert gc.get_freeze_count() == frozen
        assert gc.get_freeze_count() == frozen
    assert gc.get_freeze_count() == 0
