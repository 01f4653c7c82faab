"""``pbkv``'s next-use estimate (``pbkv_server/engine/policies/host_order.py``), values by hand."""

from __future__ import annotations

import math
from types import SimpleNamespace

from pbkv_server.engine.policies.host_order import MIN_Q, NextUse


def _sc(access, contrib):
    return SimpleNamespace(access=access, contrib=contrib)


def test_estimate_follows_a_workflows_events():
    """Submit "a" at 0, admit at 1, finish at 3 (D = 2), submit "b" at 7 (G = 4, cycle 6):
    b's cache is used at its admission (waiting since 7); a's, with score 0.5, after the next
    invocation at 7 + 6 = 13 and a geometric (1/0.5 - 1) more cycles: 13 + 6 = 19 (the cycle
    without the admission wait: see the next test)."""
    nu = NextUse(queue_wait=False)
    nu.invocation("w", "app", "a", 0.0)
    assert nu.estimate(_sc({"w": frozenset({"a"})}, {"w": (1.0, 1.0)})) == 0.0  # waiting since 0
    nu.admitted("w", "app", "a", "r1", 1.0, still_waiting=False)
    nu.finished("w", "app", "r1", 3.0)
    assert nu.next_t["w"] == 3.0 and nu.cycle["w"] == 2.0  # no gap observed yet
    nu.invocation("w", "app", "b", 7.0)
    assert nu.next_t["w"] == 13.0 and nu.cycle["w"] == 6.0
    assert nu.estimate(_sc({"w": frozenset({"b"})}, {"w": (0.1, 0.1)})) == 7.0
    assert nu.estimate(_sc({"w": frozenset({"a"})}, {"w": (0.5, 0.5)})) == 19.0
    # a score of 0 is floored at MIN_Q (far, finite); an unknown workflow never uses the node
    assert nu.estimate(_sc({"w": frozenset({"a"})}, {"w": (0.0, 0.0)})) == 13.0 + (1 / MIN_Q - 1) * 6.0
    assert nu.estimate(_sc({"x": frozenset({"a"})}, {"x": (1.0, 1.0)})) == math.inf
    nu.ended("w")
    assert nu.estimate(_sc({"w": frozenset({"a"})}, {"w": (1.0, 1.0)})) == math.inf


def test_cycle_counts_the_apps_mean_admission_wait():
    """The events of the test above with the wait in the cycle: "a" waits 1 s (submitted at 0,
    admitted at 1), so the cycle is W + D + G = 1 + 2 + 4 = 7 and a's cache (score 0.5) is used
    at 13 + (1/0.5 - 1) x 7 = 20; the invocation's own time stays 7 + D + G = 13."""
    nu = NextUse()
    nu.invocation("w", "app", "a", 0.0)
    nu.admitted("w", "app", "a", "r1", 1.0, still_waiting=False)
    nu.finished("w", "app", "r1", 3.0)
    assert nu.cycle["w"] == 3.0  # W 1 + D 2, no gap observed yet
    nu.invocation("w", "app", "b", 7.0)
    assert nu.next_t["w"] == 13.0 and nu.cycle["w"] == 7.0
    assert nu.estimate(_sc({"w": frozenset({"a"})}, {"w": (0.5, 0.5)})) == 20.0
    # a replaced part (rule 7, and pbkv's one-reader fast path) uses the same cycle: "b" admitted
    # at 8 (waits 1, W stays 1), next call at 8 + 2 + 4 = 14, then (1/0.5 - 1) x 7 more
    nu.admitted("w", "app", "b", "r2", 8.0, still_waiting=False)
    assert nu.next_t["w"] == 14.0 and nu.cycle["w"] == 7.0
    assert nu.replaced("w", 14.0, 0.5) == 21.0
    assert nu.estimate(_sc({"w": frozenset({"a"})}, {"w": (1.0, 1.0)}), {"w": 0.5}) == 21.0


def test_admission_waits_pair_each_admission_with_its_agents_oldest_request():
    """Two requests of agent "a" submitted at 0 and 2, admitted at 5 and 6 (FIFO): waits 5 and 4,
    whose running mean (plain over the first observations) is 4.5; another agent's admission
    at 6 with nothing of its own waiting adds no wait."""
    nu = NextUse()
    nu.invocation("w", "app", "a", 0.0)
    nu.invocation("w", "app", "a", 2.0)
    nu.admitted("w", "app", "a", "r1", 5.0, still_waiting=True)
    assert nu.cycle["w"] == 5.0  # D and G not observed yet
    nu.admitted("w", "app", "b", None, 6.0, still_waiting=False)
    assert nu.cycle["w"] == 5.0
    nu.admitted("w", "app", "a", "r2", 6.0, still_waiting=False)
    assert nu.cycle["w"] == 4.5
    # without it the cycle never counts W
    off = NextUse(queue_wait=False)
    off.invocation("w", "app", "a", 0.0)
    off.admitted("w", "app", "a", "r1", 5.0, still_waiting=False)
    assert off.cycle["w"] == 0.0


def test_typical_durations_are_per_app_with_a_pooled_fallback():
    """App "p" observes D = 10; app "q", with no observation yet, uses the pooled mean (10)."""
    nu = NextUse()
    nu.invocation("w1", "p", "a", 0.0)
    nu.admitted("w1", "p", "a", "r1", 0.0, still_waiting=False)
    nu.finished("w1", "p", "r1", 10.0)
    nu.invocation("w2", "q", "a", 20.0)
    nu.admitted("w2", "q", "a", "r2", 20.0, still_waiting=False)
    assert nu.next_t["w2"] == 30.0  # 20 + D 10 + G 0
