"""Sessions in the workflow lifecycle: a turn's cache stays held by its live session.

A session (a chat conversation, a coding-agent session) is a sequence of turns, each its own
workflow; the next turn resends and extends the history the last one left. The engine core keeps
that history out of the retired class until the session closes or idles out
(``pbkv_server/engine/workflows.py``, ``docs/design/engine.md`` "Workflow lifecycle").

The two-session trace, by hand (profile of ``engine_helpers``: 10 tokens a block, device 100
tokens, no host tier; every turn is a two-call workflow, so its cache can retire):

1. session A, turn A-t0: [a0 a1] then [a0 a1 a2]; ends. The device holds A's node [a0 a1]
   (20 tokens) with the leaf [a2] (10 tokens) under it.
2. session B, turn B-t0: [b0 b1] then [b0 b1 b2]; ends. Session B closes. Device: 60 tokens,
   40 free. A's nodes were used before B's.
3. an anonymous request of 6 new blocks (60 tokens) and 1 output token: it needs 61 tokens, so
   21 must be evicted; whole nodes go, leaves first.
   - old rule (a turn's end retires its cache): A's and B's nodes are all retired and private,
     and leave in LRU order: [a2] (10) then [a0 a1] (20) = 30 >= 21. A's history is gone, B's
     (closed, never used again) stays.
   - session rule: A is live, so its nodes are not retired; B's are (closed): [b2] (10) then
     [b0 b1] (20) = 30 >= 21. A's history stays.
4. session A, turn A-t1: [a0 a1 a2 a3]: 30 of its 40 prompt tokens are device hits under the
   session rule, 0 under the old one (the same trace without session ids replays the old rule).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from pbkv_contract.hints import Hints
from pbkv_server.engine.types import FirstToken

from .engine_helpers import chain, device_keys, make_engine, request, run

PREDICTIVE = ("lae", "he", "pbkv")


def _turn(engine, session: str | None, wid: str, prompts: list[list[str]]) -> list[FirstToken]:
    """Run the calls of workflow ``wid`` one after the other, then end it; returns first tokens."""
    firsts = []
    for step, labels in enumerate(prompts):
        req = request(f"{wid}#{step}", labels, hints=Hints(wid, "agent" if step else "user", step, app="app"))
        engine.submit(replace(req, session_id=session))
        firsts += [e for e in run(engine) if isinstance(e, FirstToken)]
    engine.end_workflow(wid)
    return firsts


def _two_sessions(policy: str, with_sessions: bool) -> tuple[object, int]:
    """Replay the module docstring's trace; returns the engine and A-t1's device-hit tokens."""
    engine = make_engine(policy, device=100)
    sa, sb = ("A", "B") if with_sessions else (None, None)
    _turn(engine, sa, "A-t0", [["a0", "a1"], ["a0", "a1", "a2"]])
    _turn(engine, sb, "B-t0", [["b0", "b1"], ["b0", "b1", "b2"]])
    engine.close_session("B")
    engine.submit(request("anon", [f"c{i}" for i in range(6)]))
    run(engine)
    (first,) = _turn(engine, sa, "A-t1", [["a0", "a1", "a2", "a3"]])
    return engine, first.device_cached_tokens


@pytest.mark.parametrize("policy", PREDICTIVE)
def test_the_old_rule_evicts_the_live_sessions_history_first(policy):
    """Without session ids every turn is a workflow of its own: A-t0's end retired A's history,
    and it left before B's (older), so A's next turn finds nothing on the device."""
    engine, hit = _two_sessions(policy, with_sessions=False)
    assert hit == 0


@pytest.mark.parametrize("policy", PREDICTIVE)
def test_a_live_sessions_history_is_kept_and_the_closed_session_goes_first(policy):
    engine, hit = _two_sessions(policy, with_sessions=True)
    assert hit == 30  # [a0 a1] + [a2], 10 tokens a block
    assert not set(chain(["b0", "b1"])) & device_keys(engine)  # B's history was the victim


def test_lru_ignores_sessions():
    """LRU orders by recency only: A's history (older) goes in both replays."""
    assert _two_sessions("lru", True)[1] == _two_sessions("lru", False)[1] == 0


def _held_engine(**kw):
    engine = make_engine("lae", device=100, **kw)
    _turn(engine, "A", "A-t0", [["a0", "a1"], ["a0", "a1", "a2"]])
    nodes = [n for n in engine.cache.tree.nodes() if n.parent is not None]
    assert len(nodes) == 2
    return engine, nodes


def test_close_session_retires_the_history_and_it_is_finished_private():
    engine, nodes = _held_engine()
    assert not any(engine.cache.policy.is_retired(n) for n in nodes)
    assert engine.board.held_sessions() == 1
    engine.close_session("A")
    # every workflow that touched them was the closed session's: private, leave first
    assert all(engine.cache.policy.is_retired(n) and n.sc.finished_private for n in nodes)
    assert engine.board.held_sessions() == 0
    assert engine.workflows.sessions_closed == 1
    engine.close_session("A")  # idempotent
    assert engine.workflows.sessions_closed == 1


def test_a_session_idle_for_the_idle_timeout_releases_its_history():
    """The session's idle timeout is the workflows' (``EngineConfig.idle_retire_s``), counted from
    its last activity (the end of its last request)."""
    engine, nodes = _held_engine(idle_retire_s=100.0)
    last = engine.clock
    engine.advance_to(last + 99.0)
    assert not any(engine.cache.policy.is_retired(n) for n in nodes)
    engine.advance_to(last + 100.0)
    assert all(engine.cache.policy.is_retired(n) for n in nodes)
    assert engine.workflows.sessions_idle == 1 and not engine.workflows.sessions


def test_a_shared_prefix_is_not_private_after_one_session_closes():
    """[s0 s1] is used by sessions A and B: closing A leaves it held by B; closing B retires it,
    but not as private (two sessions used it)."""
    engine = make_engine("lae", device=200)
    _turn(engine, "A", "A-t0", [["s0", "s1"], ["s0", "s1", "a2"]])
    _turn(engine, "B", "B-t0", [["s0", "s1"], ["s0", "s1", "b2"]])
    shared = next(n for n in engine.cache.tree.nodes() if n.parent is engine.cache.tree.root)
    assert shared.tokens == 20
    engine.close_session("A")
    assert not engine.cache.policy.is_retired(shared)
    engine.close_session("B")
    assert engine.cache.policy.is_retired(shared) and not shared.sc.finished_private


def test_a_workflow_named_after_its_session_ends_as_before():
    """An agent workflow is its own session (replay gives it its workflow id): it retires at its
    end, as without sessions."""
    engine = make_engine("lae", device=100)
    _turn(engine, "W", "W", [["w0"], ["w0", "w1"]])
    nodes = [n for n in engine.cache.tree.nodes() if n.parent is not None]
    assert nodes and all(engine.cache.policy.is_retired(n) and n.sc.finished_private for n in nodes)
    assert not engine.workflows.sessions


def test_the_table_bound_releases_the_least_recently_active_idle_session():
    """``max_active`` bounds the open sessions too: a new session beyond it releases the least
    recently active one without an active turn, and the owner re-files what it held."""
    from pbkv_server.engine.scoring import NodeScore, ScoreBoard
    from pbkv_server.engine.workflows import WorkflowTable

    board = ScoreBoard()
    released = []
    table = WorkflowTable(board, max_active=1, on_release=released.extend)
    rec = NodeScore(None)
    for step in range(2):  # a two-call turn: its cache can retire
        table.invocation(Hints("A-t0", "user", step), (), float(step), session="A")
        board.touch(rec, "A-t0", "user")
    table.end("A-t0")
    assert not rec.retired and list(table.sessions) == ["A"]
    table.invocation(Hints("B-t0", "user", 0), (), 5.0, session="B")
    assert released == [rec] and rec.retired and rec.finished_private
    assert list(table.sessions) == ["B"] and table.sessions_full == 1


def test_pbkv_session_ages_are_bounded_when_sessions_idle_out():
    """Sessions released by idleness never reach the policy (only a close does): ``pbkv``'s
    session ages must still not grow by one per session. 200 one-turn sessions, each idled out
    (10 s timeout) before the next starts: the ages kept stay within the sweep's floor, not 200."""
    from pbkv_server.engine.policies.pbkv import SESSION_SWEEP_MIN

    engine = make_engine("pbkv", device=100, idle_retire_s=10.0)
    for i in range(200):
        _turn(engine, f"S{i}", f"S{i}-t0", [[f"s{i}a"], [f"s{i}a", f"s{i}b"]])
        engine.advance_to(engine.clock + 20.0)  # the session idles out, unseen by the policy
    assert engine.workflows.sessions_idle == 200 and not engine.workflows.sessions
    assert len(engine.cache.policy._session_age) <= SESSION_SWEEP_MIN + 1


def test_pbkv_a_sessions_next_turn_keeps_its_age_while_its_history_is_held():
    """A held session's next turn is as old as its first (the stable resident set is a set of
    sessions); once the session idled out, a turn under the same id starts a new age."""
    engine = make_engine("pbkv", device=100, idle_retire_s=10.0)
    policy = engine.cache.policy
    _turn(engine, "A", "A-t0", [["a0"], ["a0", "a1"]])
    _turn(engine, "B", "B-t0", [["b0"], ["b0", "b1"]])
    engine.submit(replace(request("A-t1#0", ["a0", "a1", "a2"], hints=Hints("A-t1", "user", 0, app="app")),
                          session_id="A"))
    assert policy._age["A-t1"] < policy._session_age["B"]  # A's age (first), not the youngest
    a_age = policy._age["A-t1"]
    run(engine)
    engine.end_workflow("A-t1")
    engine.advance_to(engine.clock + 20.0)  # A and B idle out
    engine.submit(replace(request("A-t2#0", ["a0"], hints=Hints("A-t2", "user", 0, app="app")), session_id="A"))
    assert policy._age["A-t2"] > a_age and policy._age["A-t2"] > policy._session_age.get("B", -1)
