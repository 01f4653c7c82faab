"""``pbkv`` rule 7 (issue 36): a growing conversation's latest prompt path is the prefix of its next
call, whichever agent makes it. Profile and helpers: engine_helpers (10 tokens a block, output 1
token reserved while running, outputs not cached).

The coding-agent shape, by hand: app "code", session s. Turn t1: the user's call [S A B], then the
agent's call [S A B C] (it extends the first: the app counts as growing), t1 ends (the session
holds its history). Turn t2: the user's call [S A B C D E] (it extends t1's latest prompt; its
whole path is touched by "user" only). The predictor says t2's next call is "agent" for certain
(score part of whichever agent: 1 + 0.7 + 0.49 = 2.19) and that "user" never comes next. Another
app's workflow w3 (one call, not growing) holds [P Q], its agent "a" next with probability 0.3:
Eq. 2 score 0.3 x 2.19 = 0.657. An anonymous [R1 R2] (20 tokens + 1 reserved) then arrives on a
device of 90 holding 80 (S..E 60, P Q 20): 11 tokens, two blocks, must go, and the leaves are t2's
[D E] and w3's [P Q].

* Old rule: t2's nodes are scored by the agent that touched them, "user", whose probability is
  0: [D E] scores 0 < 0.657 and leaves. t2's agent call [S A B C D E F] then hits 40 (S..C).
* Rule 7: [D E] is on the live path of t2's conversation and scores 2.19 > 0.657: [P Q] leaves,
  and the agent call hits all 60 of [S..E].

With a host tier of 1000 the victim is written to the host instead (rule 1 ranks the resident set
by age; the session is older than w3): old rule, [D E] scores below LOW_SCORE and leaves first, so
the agent call hits 40 on the device and 20 on the host; rule 7 demotes w3's [P Q] (the younger
workflow's cache) and the call hits 60 on the device.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from pbkv_contract.hints import Hints
from pbkv_server.engine.policies.conversation import Conversations

from .engine_helpers import TablePredictor, chain, device_keys, make_engine, request, run

TABLE = {"t1": [{"agent": 0.9, "<END>": 0.1}] * 3, "t2": [{"agent": 1.0}] * 3, "w3": [{"a": 0.3, "b": 0.7}] * 3}


def _call(engine, wid: str, agent: str, step: int, labels: list[str], app: str = "code", session: str | None = "s"):
    req = request(f"{wid}#{step}", labels, hints=Hints(wid, agent, step, app=app))
    engine.submit(replace(req, session_id=session))
    run(engine)


def _replay(host: int):
    """The module docstring's trace; returns (device hits, host hits) of t2's agent call and
    whether [D E] was still on the device before it."""
    engine = make_engine("pbkv", device=90, host=host, predictor=TablePredictor(TABLE))
    _call(engine, "t1", "user", 0, ["S", "A", "B"])
    _call(engine, "t1", "agent", 1, ["S", "A", "B", "C"])
    engine.end_workflow("t1")
    _call(engine, "w3", "a", 0, ["P", "Q"], app="other", session=None)
    _call(engine, "t2", "user", 0, ["S", "A", "B", "C", "D", "E"])
    engine.submit(request("anon", ["R1", "R2"]))
    run(engine)
    kept = set(chain(["S", "A", "B", "C", "D", "E"])[4:]) <= device_keys(engine)
    dev, hst = engine.stats.device_hit_tokens, engine.stats.host_hit_tokens
    _call(engine, "t2", "agent", 1, ["S", "A", "B", "C", "D", "E", "F"])
    return engine.stats.device_hit_tokens - dev, engine.stats.host_hit_tokens - hst, kept


@pytest.mark.parametrize("host,expected", [(0, (60, 0, True)), (1000, (60, 0, True))])
def test_the_latest_path_of_a_growing_conversation_outranks_a_lower_score(host, expected):
    # the old rule (Eq. 2 by touching agent) gives (40, 0, False) and (40, 20, False)
    assert _replay(host) == expected


def test_compacted_history_scores_as_unused():
    """One conversation w (app "code", no session), agent "a" certain next. Calls: [S A], [S A B],
    [S A B C] (each extends the last: growing), then a compaction: [S X Y] (a summary replaces
    A B C; 2 of the app's 3 calls with a predecessor grew, so it stays growing). The live path is
    now [S X Y]; [A], [B], [C], touched by "a", score 2.19 under Eq. 2 but are never sent again.
    Another app's w3 holds [P Q] with score 0.657. An anonymous [R1 R2 R3] (31 tokens) on a device
    of 100 holding 80 (S A B C X Y P Q) needs 11, two blocks; the leaves are [C], [X Y] and [P Q].
    Rule 7 scores w's dead history 0: [C] leaves, then [B] (now a leaf). The old rule evicts
    [P Q], the lowest Eq. 2 score."""
    table = {"w": [{"a": 1.0}] * 3, "w3": [{"a": 0.3, "b": 0.7}] * 3}
    engine = make_engine("pbkv", device=100, predictor=TablePredictor(table))
    _call(engine, "w3", "a", 0, ["P", "Q"], app="other", session=None)
    for step, labels in enumerate((["S", "A"], ["S", "A", "B"], ["S", "A", "B", "C"], ["S", "X", "Y"])):
        _call(engine, "w", "a", step, labels, session=None)
    engine.submit(request("anon", ["R1", "R2", "R3"]))
    run(engine)
    dev = device_keys(engine)
    history = chain(["S", "A", "B", "C"])
    assert set(chain(["P", "Q"])) | set(chain(["S", "X", "Y"])) | set(history[:2]) <= dev
    assert not set(history[2:]) & dev


def test_growth_is_counted_per_app_on_the_last_full_block():
    """An app is growing when most calls with a predecessor extend it; the comparison skips the
    predecessor's last (usually partial) block."""
    conv = Conversations(lambda node: None)
    a = chain(["S", "A", "B"])
    conv.admitted("c1", "code", a, [])
    assert not conv.growing("code")  # no call with a predecessor yet
    # the next prompt continues the text: its block 2 differs (the partial block filled up)
    conv.admitted("c1", "code", chain(["S", "A", "B+", "C"]), [])
    assert conv.growing("code")
    conv.admitted("c2", "tools", chain(["T", "U"]), [])
    conv.admitted("c2", "tools", chain(["V", "U"]), [])  # a fresh prompt: no growth
    assert not conv.growing("tools")


def test_a_prompt_cached_after_admission_becomes_live_only_for_the_latest_call():
    """A backend that inserts a prompt after admitting it (SGLang) reports the deeper path: it
    replaces the live path if the call is still the conversation's latest, counting no growth."""
    refreshed = []
    conv = Conversations(refreshed.append)
    conv.admitted("c1", "code", chain(["S", "A"]), ["n1"], call="r1")
    conv.cached("c1", "r1", ["n1", "n2"])
    assert conv.path("c1") == ["n1", "n2"] and conv.live("n2", "c1")
    conv.admitted("c1", "code", chain(["S", "A", "B"]), ["n1", "n2"], call="r2")
    conv.cached("c1", "r1", ["n1", "n9"])  # the older call's late insert: r2's path stays live
    assert conv.path("c1") == ["n1", "n2"] and not conv.live("n9", "c1")
    conv.cached("c1", "r2", ["n1", "n2", "n3"])
    assert conv.path("c1") == ["n1", "n2", "n3"]
    assert conv.growing("code") and refreshed == []  # one extension counted; no node left the path


def test_queued_prefetch_round_runs_while_a_growing_conversation_waits():
    """pbkv skips its conservative prefetch round while requests wait for admission, unless one
    of them is a growing conversation's (its live path is the prefix it sends): t1 of app "code"
    grew ([S A B] then [S A B C]) and its next call waits: the round runs; w3 of app "other"
    (one call, not growing) waiting alone: no round."""
    from pbkv_server.engine.policies.pbkv_paper import CONSERVATIVE

    engine = make_engine("pbkv", device=90, host=1000, predictor=TablePredictor(TABLE))
    _call(engine, "t1", "user", 0, ["S", "A", "B"])
    _call(engine, "t1", "agent", 1, ["S", "A", "B", "C"])
    _call(engine, "w3", "a", 0, ["P", "Q"], app="other", session=None)
    policy = engine.cache.policy
    engine.submit(request("w3#1", ["P", "Q", "R"], hints=Hints("w3", "a", 1, app="other")))
    assert policy.prefetch_plan(1.0) is None
    engine.submit(replace(request("t1#2", ["S", "A", "B", "C", "D"], hints=Hints("t1", "agent", 2, app="code")),
                          session_id="s"))
    assert policy.prefetch_plan(1.0) is CONSERVATIVE
