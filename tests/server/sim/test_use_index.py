""":class:`UseIndex`: which requests hold each key, kept as runs of consecutive requests."""

from __future__ import annotations

import random

from pbkv_server.sim.future import TraceFuture, UseIndex


def _positions(index: UseIndex) -> dict:
    return {key: [i for run in runs for i in run] for key, runs in index.holders.items()}


def test_runs_of_a_conversation_by_hand():
    # r0..r3 one conversation (each extends the one before, its last partial block "p*" gone),
    # r4 another one, r5 back to the first conversation's prefix; "z" twice in r4 counts once
    index = UseIndex({"r0": ["a", "b", "p0"], "r1": ["a", "b", "c", "p1"], "r2": ["a", "b", "c", "d"],
                      "r3": ["a", "b", "c", "d", "e"], "r4": ["x", "z", "z"], "r5": ["a", "b", "p0"]})
    assert index.ids == ["r0", "r1", "r2", "r3", "r4", "r5"]
    assert index.holders["a"] == [range(0, 4), range(5, 6)]
    assert index.holders["p0"] == [range(0, 1), range(5, 6)]
    assert index.holders["p1"] == [range(1, 2)]
    assert index.holders["d"] == [range(2, 4)]
    assert index.holders["z"] == [range(4, 5)]
    assert set(index.holders) == {"a", "b", "c", "d", "e", "p0", "p1", "x", "z"}


def test_a_request_that_keeps_its_last_key_elsewhere():
    # r1 drops r0's last position but holds its key earlier ("a" ... "a"): it stays held
    index = UseIndex({"r0": ["a", "b", "a"], "r1": ["a", "b", "c"], "r2": []})
    assert index.holders == {"a": [range(0, 2)], "b": [range(0, 2)], "c": [range(1, 2)]}


def test_runs_hold_exactly_the_requests_holding_each_key():
    rng = random.Random(7)
    for _ in range(300):
        requests: dict[str, list[int]] = {}
        for i in range(rng.randint(0, 12)):
            if requests and rng.random() < 0.6:  # a prefix of the one before, then new keys
                before = requests[f"r{i - 1}"]
                keys = before[:rng.randint(0, len(before))] + [rng.randint(0, 9) for _ in range(rng.randint(0, 4))]
            else:
                keys = [rng.randint(0, 9) for _ in range(rng.randint(0, 8))]
            requests[f"r{i}"] = keys
        held = {}
        for i, keys in enumerate(requests.values()):
            for key in keys:
                if i not in held.setdefault(key, []):
                    held[key].append(i)
        assert _positions(UseIndex(requests)) == held


def test_ranked_future_reads_the_runs():
    # positions: r0 at 2, r1 at 0, r2 at 1; "a" is held by r0 and r1, "b" by r1 and r2
    index = UseIndex({"r0": ["a"], "r1": ["a", "b"], "r2": ["c", "b"]})
    future = TraceFuture.ranked(index, {"r0": 2.0, "r1": 0.0, "r2": 1.0})
    assert (future.next_use("a"), future.next_use("b"), future.next_use("c")) == (0.0, 0.0, 1.0)
    future.consume("r1")
    assert (future.next_use("a"), future.next_use("b")) == (2.0, 1.0)
