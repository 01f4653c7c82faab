"""The replay plays the clients of today's cache managers: each request's session, priority, cache
TTL, last-step flag and next-turn prefix come from the trace (or the documented defaults), and a
unit's session is closed when the unit ends."""

from __future__ import annotations

from dataclasses import replace

from .sim_fixtures import make_end, make_inv, unit_profile  # noqa: F401 (fixture)
from pbkv_server.sim.simulator import (REPLAY_AGENT_PRIORITY, REPLAY_CACHE_TTL_S, ReplayConfig, ReplayOptions,
                                      load_workload, simulate)


def _records():
    """Agent workflow w1 (app ``agents``, two calls, the second another agent's prompt), and a chat
    conversation c1 of two turns t0, t1 (app ``chat``, one call each, session c1); t1's prompt
    extends t0's: same first block, the partial second block grown by the reply, a new block."""
    w0 = make_inv("w1", 0, "plan", ["p1"], [10], out=4, app="agents")
    w1 = make_inv("w1", 1, "code", ["q1", "q2"], [10, 10], out=2, t_start=2.0, t_end=3.0, app="agents")
    t0 = replace(make_inv("t0", 0, "assistant", ["s", "u0"], [10, 5], out=7, t_start=5.0, t_end=6.0, app="chat"),
                 session_id="c1")
    t1 = replace(make_inv("t1", 0, "assistant", ["s", "u0r0", "u1"], [10, 10, 8], out=3, t_start=9.0, t_end=10.0,
                          app="chat"), session_id="c1", priority=3, cache_ttl_s=60.0)
    return [w0, w1, make_end("w1", 3.5, "agents"), t0, make_end("t0", 6.0, "chat"), t1, make_end("t1", 10.0, "chat")]


def test_requests_carry_session_priority_ttl_and_last_step_from_the_trace_or_the_defaults():
    """w1's calls: session w1 (no session_id), priority 10 (an agent app), TTL 300 s, the second is
    its last step. The chat turns: session c1, no priority (chat is not an agent app) unless
    recorded (t1: 3), TTL recorded or 300 s, each the last step of its one-call workflow."""
    units = load_workload(_records()).units
    agent, chat = units
    assert [(r.session_id, r.priority, r.cache_ttl_s, r.last_step) for r in agent.requests] == [
        ("w1", REPLAY_AGENT_PRIORITY, REPLAY_CACHE_TTL_S, False), ("w1", REPLAY_AGENT_PRIORITY, REPLAY_CACHE_TTL_S, True)]
    assert [(r.session_id, r.priority, r.cache_ttl_s, r.last_step) for r in chat.requests] == [
        ("c1", None, REPLAY_CACHE_TTL_S, True), ("c1", 3, 60.0, True)]
    assert (REPLAY_AGENT_PRIORITY, REPLAY_CACHE_TTL_S) == (10, 300.0)


def test_next_turn_prefix_follows_the_next_request_when_it_extends_the_prompt():
    """t0 (15 tokens + a 7-token reply) is extended by t1: the prefix is t1's blocks covering
    15 + 7 = 22 tokens, i.e. s (10) and u0r0 (10; adding u1 would make 28). w1's first call is
    followed by another agent's prompt (q1 q2): its prefix is its own block plus a 4-token reply
    block nobody shares; so is the unit's last request's."""
    agent, chat = load_workload(_records()).units
    assert chat.next_prefix[0] == (["s", "u0r0"], [10, 10])
    assert chat.next_prefix[1] == (["s", "u0r0", "u1", "t1#0~reply"], [10, 10, 8, 3])
    assert agent.next_prefix[0] == (["p1", "w1#0~reply"], [10, 4])
    assert agent.next_prefix[1] == (["q1", "q2", "w1#1~reply"], [10, 10, 2])


def test_sessions_close_with_their_unit_and_only_a_speculative_policy_prefills(unit_profile):
    """Under sglang-session every session is closed once the replay is over (no node referenced);
    spec-prefill prefills each request's next-turn prefix (14 + 22 + 20 + 31 = 87 prompt tokens, see
    above), other policies never do."""
    workload = load_workload(_records())
    session = simulate(workload, ReplayConfig("sglang-session", unit_profile), ReplayOptions(concurrency=2))
    assert not any(session.engine.cache.policy.referenced(n) for n in session.engine.cache.tree.nodes())
    spec = simulate(workload, ReplayConfig("spec-prefill", unit_profile), ReplayOptions(concurrency=2))
    assert spec.summary["speculative_prefill_tokens"] == 14 + 22 + 20 + 31
    assert simulate(workload, ReplayConfig("lru", unit_profile),
                    ReplayOptions(concurrency=2)).summary["speculative_prefill_tokens"] == 0
    # the turn after a speculative prefill finds the reply cached: t1 hits s and u0r0 (20 tokens)
    assert spec.summary["hit_rate"] > session.summary["hit_rate"]
