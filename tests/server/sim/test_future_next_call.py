""":meth:`TraceFuture.next_call`: an owner's earliest unserved request, by hand."""

from __future__ import annotations

import math

from pbkv_server.sim.future import TraceFuture


def test_next_call_skips_served_requests_of_its_owner():
    # r1 (w1, s) at 0, r3 (w1, s) at 3, r2 (w2, s2) at 5, r4 (w1, s) at 9
    future = TraceFuture({"r1": (0.0, ["a"]), "r2": (5.0, ["a", "b"]), "r3": (3.0, ["b"]), "r4": (9.0, ["a"])},
                         owners={"r1": ("w1", "s"), "r2": ("w2", "s2"), "r3": ("w1", "s"), "r4": ("w1", "s")})
    assert (future.next_call("w1"), future.next_call("w2"), future.next_call("s")) == (0.0, 5.0, 0.0)
    future.consume("r1")
    assert future.next_call("w1") == 3.0
    future.consume("r3")
    assert future.next_call("s") == 9.0
    assert future.next_use("a") == 5.0  # the block oracle is unchanged: r2 holds "a" before r4
    future.consume("r4")
    assert future.next_call("w1") == math.inf
    assert future.next_call("nobody") == math.inf


def test_without_owners_nothing_is_known():
    future = TraceFuture({"r1": (0.0, ["a"])})
    assert future.next_call("r1") == math.inf
