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
        # frozen objects may die meanwhile (another thread drops its last reference: xdist's IO
        # thread), so the count may fall a little; it may not rise (the inner block froze again)
        # nor fall below what is kept (the inner block unfroze)
        with _heap_frozen():
            assert len(keep) <= gc.get_freeze_count() <= frozen
        assert len(keep) <= gc.get_freeze_count() <= frozen
    assert gc.get_freeze_count() == 0


def test_a_dropped_replay_leaves_no_node_behind(thresholds):
    """A replay's radix nodes are in cycles (parent and children): with the young generation
    raised, they still go once the result is dropped and the collector runs (an earlier setting
    froze them for good, and each replay of a long trace kept ~130 MB)."""
    from pbkv_server.engine.radix import Node
    from pbkv_server.hardware.profiles import get_profile
    from pbkv_server.sim.simulator import ReplayConfig, ReplayOptions, load_workload, simulate
    from pbkv_server.sim.synth.agents import generate

    def nodes() -> int:
        gc.collect()
        return sum(type(o) is Node for o in gc.get_objects())

    workload = load_workload(list(generate("codegen", workflows=20, seed=3)))
    before = nodes()
    result = simulate(workload, ReplayConfig("pbkv", get_profile("h100-qwen2.5-32b"), device_tokens=40_000,
                                             host_tokens=40_000), ReplayOptions(concurrency=8))
    assert sum(type(o) is Node for o in gc.get_objects()) > before  # the result holds its engine's tree
    del result
    assert nodes() == before
