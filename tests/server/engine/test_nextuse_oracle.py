"""``pbkv-nextuse`` (issue 33): ``pbkv`` told each conversation's true next-call time ranks active
cache by it. Profile and helpers: engine_helpers (10 tokens a block, output 1 token reserved while
running, outputs not cached).

By hand: app "code", two conversations without a session, A then B, each of two calls, the
second extending the first ([SA A1], [SA A1 A2]; [SB B1], [SB B1 B2]): the app is growing, and
each conversation's live path is its three blocks (60 tokens in all). The predictor gives both
the same next agent for certain, so both live paths score alike (2.19). No host tier. An
anonymous [R1 R2] (20 tokens + 1 reserved) then arrives on a device of 70 holding 60: 11 tokens
must go, two blocks of one conversation's leaf.

* ``pbkv`` (rule 8: both live paths are read only by growing conversations, so they rank by
  each conversation's estimated next call, latest first): each conversation's one gap so far
  was 0 s (its second call was submitted when its first finished, ``run`` drains the engine), so
  the app's mean gap is 0 and each conversation is due again at its latest finish. A finished
  first, is due first and keeps its path; B's leaf goes. (Before rule 8, rule 6 ranked by
  score, then LRU: the scores tie, A was used less recently, and A's leaf went.)
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


def _lost(policy: str, calls: dict[str, float]) -> set[str]:
    """Conversations that lost blocks of their live path to the anonymous request."""
    kw = {"future": NextCalls(calls)} if policy == "pbkv-nextuse" else {}
    engine = make_engine(policy, device=70, predictor=TablePredictor(TABLE), **kw)
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


def test_pbkv_keeps_the_conversation_due_first():
    """Rule 8 with the mean gap (0 s): A is due at its finish, before B (see module docstring)."""
    assert _lost("pbkv", {}) == {"B"}


def test_needs_a_future_that_knows_next_calls():
    with pytest.raises(ValueError, match="next_call"):
        make_engine("pbkv-nextuse", device=70, predictor=TablePredictor(TABLE))


def test_the_online_estimate_keeps_the_conversation_due_first():
    """``pbkv-survival``: each conversation's one gap so far was 0 s (its second call was submitted
    as its first finished), so the app's median gap is 0 and each conversation is due again at
    its latest finish: A finished first, is due first and keeps its path; B's leaf goes (``pbkv``,
    by LRU, takes A's)."""
    assert _lost("pbkv-survival", {}) == {"B"}
