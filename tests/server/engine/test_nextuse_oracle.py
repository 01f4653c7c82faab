"""``pbkv-nextuse`` (issue 33): ``pbkv`` told each conversation's true next-call time ranks active
cache by it. Profile and helpers: engine_helpers (10 tokens a block, output 1 token reserved while
running, outputs not cached).

By hand: app "code", two conversations without a session, A then B, each of two calls, the
second extending the first ([SA A1], [SA A1 A2]; [SB B1], [SB B1 B2]): the app is growing, and
each conversation's live path is its three blocks (60 tokens in all). The predictor gives both
the same next agent for certain, so both live paths score alike (2.19). No host tier. An
anonymous [R1 R2] (20 tokens + 1 reserved) then arrives on a device of 70 holding 60: 11 tokens
must go, two blocks of one conversation's leaf.

* ``pbkv`` (rule 6: score, then LRU): the scores tie, A was used less recently, A's leaf goes.
* ``pbkv-nextuse``: the conversation whose next call is later loses its leaf, whatever the
  recency: with next calls A at 100, B at 200, B's leaf goes; swapped, A's.
"""

from __future__ import annotations

import math

import pytest

from pbkv_contract.hints import Hints

from .engine_helpers import TablePredictor, chain, device_keys, make_engine, request, run

TABLE = {"A": [{"agent": 1.0}] * 3, "B": [{"agent": 1.0}] * 3}


class NextCalls:
    """A future that knows only each conversation's next call (no block is ever used again)."""

    def __init__(self, calls: dict[str, float]) -> None:
        self.calls = calls

    def next_use(self, key, now_index: int = -1) -> float:
        return math.inf

    def next_call(self, owner) -> float:
        return self.calls.get(owner, math.inf)


def _lost(policy: str, calls: dict[str, float], host: int = 0) -> set[str]:
    """Conversations that lost blocks of their live path from the device to the anonymous request."""
    kw = {"future": NextCalls(calls)} if policy == "pbkv-nextuse" else {}
    engine = make_engine(policy, device=70, host=host, predictor=TablePredictor(TABLE), **kw)
    for wid in ("A", "B"):
        for step, labels in enumerate(([f"S{wid}", f"{wid}1"], [f"S{wid}", f"{wid}1", f"{wid}2"])):
            engine.submit(request(f"{wid}#{step}", labels, hints=Hints(wid, "agent", step, app="code")))
            run(engine)
    engine.submit(request("anon", ["R1", "R2"]))
    run(engine)
    dev = device_keys(engine)
    return {w for w in ("A", "B") if not set(chain([f"S{w}", f"{w}1", f"{w}2"])) <= dev}


@pytest.mark.parametrize("calls,lost", [({"A": 100.0, "B": 200.0}, {"B"}), ({"A": 200.0, "B": 100.0}, {"A"}),
                                        ({"A": 100.0}, {"B"})])  # B calls no more: inf
def test_the_later_next_call_loses_its_leaf(calls, lost):
    assert _lost("pbkv-nextuse", calls) == lost


def test_pbkv_without_the_oracle_falls_to_lru():
    assert _lost("pbkv", {}) == {"A"}


def test_needs_a_future_that_knows_next_calls():
    with pytest.raises(ValueError, match="next_call"):
        make_engine("pbkv-nextuse", device=70, predictor=TablePredictor(TABLE))


@pytest.mark.parametrize("policy", ["pbkv", "pbkv-survival"])
def test_with_a_host_tier_the_online_estimate_keeps_the_conversation_due_first(policy):
    """Rule 8 (with a host tier of 1000; the victim moves there): each conversation's one gap so
    far was 0 s (its second call was submitted as its first finished), so the app's mean gap
    (``pbkv``) and median gap (``pbkv-survival``) are 0 and each conversation is due again at its
    latest finish: A finished first, is due first and keeps its path on the device; B's leaf
    goes. Rule 1 alone would take B's too (B is the younger workflow), so the case that tells
    them apart is the next one."""
    assert _lost(policy, {}, host=1000) == {"B"}


def test_with_a_host_tier_due_outranks_age():
    """Rule 8 against rule 1, by hand: B starts first (the older workflow), then A makes both its
    calls, then B its second. A's gap was 0 s (mean 0 at its finish): A is due at its latest
    finish. B's gap spanned A's two calls (> 0 s): the mean at B's finish is half of it, and B
    finished last, so B is due last and loses its leaf. Rule 1 alone takes A's (the younger)."""
    engine = make_engine("pbkv", device=70, host=1000, predictor=TablePredictor(TABLE))
    for wid, step, labels in (("B", 0, ["SB", "B1"]), ("A", 0, ["SA", "A1"]), ("A", 1, ["SA", "A1", "A2"]),
                              ("B", 1, ["SB", "B1", "B2"])):
        engine.submit(request(f"{wid}#{step}", labels, hints=Hints(wid, "agent", step, app="code")))
        run(engine)
    engine.submit(request("anon", ["R1", "R2"]))
    run(engine)
    dev = device_keys(engine)
    assert {w for w in ("A", "B") if not set(chain([f"S{w}", f"{w}1", f"{w}2"])) <= dev} == {"B"}
