"""Hand-checked eviction orders of the policies users run today (SGLang session radix cache and
priority eviction, TTL pins, Continuum, Dynamo speculative prefill, KVFlow as shipped), each next
to what ``lru`` does on the same requests. Profile: engine_helpers.PROFILE (prefill 1 ms/token,
decode step 0.01 s + 0.001 s per sequence, host->device load 1 ms/token); blocks of 10 tokens;
one output token, reserved while a request runs."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pbkv_contract.hints import Hints
from pbkv_server.engine import FirstToken

from .engine_helpers import chain, device_keys, host_keys, make_engine, request, run


def keys(labels: str) -> set[str]:
    """Block keys of one prompt (labels separated by spaces)."""
    return set(chain(labels.split()))


def submit(eng, rid: str, labels: str, **meta) -> list:
    """Submit one request (metadata as :class:`EngineRequest` fields, ``hints=`` included) and run to idle."""
    hints = meta.pop("hints", None)
    eng.submit(replace(request(rid, labels.split(), hints=hints), **meta))
    return run(eng)


# --------------------------------------------------------------------------- sglang-session


@pytest.mark.parametrize("policy,kept", [("lru", "B1 B2"), ("sglang-session", "A1 A2")])
def test_session_cache_evicts_a_closed_sessions_kv_before_an_open_sessions(policy, kept):
    """Device 50. Session s1 caches A(20), then session s2 caches B(20) and closes. An anonymous
    C(10) + 1 output token needs 11 with 10 free: one 10-token block must go. LRU takes the tail
    of the older A; the session cache takes the tail of the closed session's B (unreferenced),
    though it is more recent. Only the tail leaves (A1 or B1 stays)."""
    eng = make_engine(policy, device=50)
    submit(eng, "a", "A1 A2", session_id="s1")
    submit(eng, "b", "B1 B2", session_id="s2")
    eng.close_session("s2")
    submit(eng, "c", "C1")
    evicted = ({"A1", "A2"} | {"B1", "B2"}) - set(kept.split())
    assert keys(kept) <= device_keys(eng)
    assert chain(sorted(evicted))[0] in device_keys(eng)  # the victim's first block stays
    assert chain(sorted(evicted))[1] not in device_keys(eng)
    assert (eng.stats.evictions, eng.stats.evicted_tokens) == (1, 10)


def test_session_references_follow_splits_closes_and_ignore_late_requests():
    """s1 caches S1 S2 A1; s2 then shares S1 S2 and adds B1 (the node S1 S2 A1 is cut after S2:
    both halves keep s1's reference, and S1 S2 gains s2's). Closing s1 leaves A1 unreferenced and
    S1 S2 referenced by s2 only; a request of the closed s1 references nothing again."""
    eng = make_engine("sglang-session", device=200)
    submit(eng, "a", "S1 S2 A1", session_id="s1")
    submit(eng, "b", "S1 S2 B1", session_id="s2")
    pol = eng.cache.policy
    node = {n.keys[-1]: n for n in eng.cache.tree.nodes()}
    shared, a1, b1 = node[chain(["S1", "S2"])[1]], node[chain(["S1", "S2", "A1"])[2]], node[chain(["S1", "S2", "B1"])[2]]
    assert pol._refs[shared] == {"s1", "s2"} and pol._refs[a1] == {"s1"} and pol._refs[b1] == {"s2"}
    eng.close_session("s1")
    assert not pol.referenced(a1) and pol._refs[shared] == {"s2"}
    submit(eng, "late", "S1 S2 A1 A2", session_id="s1")
    assert not pol.referenced(a1)
    eng.close_session("s2")
    assert not any(pol.referenced(n) for n in eng.cache.tree.nodes())


# --------------------------------------------------------------------------- sglang-priority


@pytest.mark.parametrize("policy,kept", [("lru", "B1 B2"), ("sglang-priority", "A1 A2")])
def test_priority_eviction_takes_the_lowest_priority_first(policy, kept):
    """Device 50. A(20) is cached by a priority-10 request, then B(20) by a priority-0 one. C(10)
    + 1 needs 11 with 10 free: LRU takes the tail of the older A, priority eviction the tail of B
    (priority 0 < 10) although it is more recent."""
    eng = make_engine(policy, device=50)
    submit(eng, "a", "A1 A2", priority=10)
    submit(eng, "b", "B1 B2", priority=0)
    submit(eng, "c", "C1")
    assert keys(kept) <= device_keys(eng) and eng.stats.evicted_tokens == 10


def test_node_priority_is_the_max_over_the_requests_that_used_it_and_survives_splits():
    """S1 S2 A1 is cached at priority 7; a priority-2 request then shares S1 S2 (cutting the node)
    and adds B1 at 2; a request without priority (0) reuses S1 S2 B1. Priorities: S1 S2 7 (max of
    7, 2, 0: never lowered), A1 7 (kept by the lower half of the cut), B1 2."""
    eng = make_engine("sglang-priority", device=200)
    submit(eng, "a", "S1 S2 A1", priority=7)
    submit(eng, "b", "S1 S2 B1", priority=2)
    submit(eng, "c", "S1 S2 B1")
    node = {n.keys[-1]: n for n in eng.cache.tree.nodes()}
    pol = eng.cache.policy
    assert pol.node_priority(node[chain(["S1", "S2"])[1]]) == 7
    assert pol.node_priority(node[chain(["S1", "S2", "A1"])[2]]) == 7
    assert pol.node_priority(node[chain(["S1", "S2", "B1"])[2]]) == 2


# --------------------------------------------------------------------------- ttl-pin


def _ttl_run(policy: str, ttl: float | None = 300.0):
    """Device 30, host 40 (pin budget 0.6 x 40 = 24 tokens). A(20) asks for a TTL and is pinned
    when it finishes; B(20), C(20), D(20) follow, each evicting the previous one to the host (LRU
    on the device, pinned or not). D's admission demotes C to a full host (A + B): the host drops
    its least recently used unpinned leaf, B; under LRU it drops A, the oldest."""
    eng = make_engine(policy, device=30, host=40)
    submit(eng, "a", "A1 A2", cache_ttl_s=ttl)
    for rid in "BCD":
        submit(eng, rid.lower(), f"{rid}1 {rid}2")
    return eng


def test_ttl_pins_keep_a_prefix_in_host_memory_where_lru_drops_it():
    """See :func:`_ttl_run`. Afterwards A again: ttl-pin loads it from the host (20 host-hit
    tokens, 20 ms over PCIe at 1 ms/token); LRU recomputes it."""
    pinned, lru = _ttl_run("ttl-pin"), _ttl_run("lru")
    assert host_keys(pinned) == keys("A1 A2") | keys("C1 C2") and host_keys(lru) == keys("B1 B2") | keys("C1 C2")
    assert pinned.cache.policy.pinned_tokens == 20
    first = [e for e in submit(pinned, "a2", "A1 A2") if isinstance(e, FirstToken)][0]
    assert (first.device_cached_tokens, first.host_cached_tokens) == (0, 20)
    assert [e for e in submit(lru, "a2", "A1 A2") if isinstance(e, FirstToken)][0].host_cached_tokens == 0


def test_ttl_pins_expire_lazily_refresh_on_hit_and_clamp_to_dynamos_range():
    """A TTL of 10 s is clamped to Dynamo's 300 s: A, finished at 0.020 s, is pinned until 300.020 s.
    A hit renews the pin to 300 s after that request's admission; once the clock passes the expiry,
    the next evictions clear the pin and the host drops A like any unpinned node."""
    eng = _ttl_run("ttl-pin", ttl=10.0)
    a = next(n for n in eng.cache.tree.nodes() if chain(["A1", "A2"])[1] in n.keys)
    t_pin = eng.cache.policy._pin[a][0]
    assert t_pin == pytest.approx(300.0 + 0.020, abs=1e-9)  # A finished at 0.020 s (prefill 20 ms, its one token)
    submit(eng, "a2", "A1 A2")  # hit: loaded to the device, pin renewed from now
    assert eng.cache.policy._pin[a][0] == pytest.approx(eng.clock + 300.0 - 0.020, abs=1e-9)
    eng.advance_to(eng.cache.policy._pin[a][0] + 1.0)
    for rid in "EFG":  # push A out to the host and beyond
        submit(eng, rid.lower(), f"{rid}1 {rid}2")
    assert not eng.cache.policy.pinned(a) and eng.cache.policy.pinned_tokens == 0
    assert not keys("A1 A2") & (device_keys(eng) | host_keys(eng))


def test_ttl_pins_respect_the_budget_and_need_a_host_tier():
    """Budget 0.6 x host: with host 30 (18 tokens) a 20-token node is not pinned (the walk stops at
    the first node over budget); without a host tier nothing is ever pinned."""
    for host in (30, 0):
        eng = make_engine("ttl-pin", device=30, host=host)
        submit(eng, "a", "A1 A2", cache_ttl_s=600.0)
        assert eng.cache.policy.pinned_tokens == 0 and eng.cache.policy.budget == int(0.6 * host)


# --------------------------------------------------------------------------- continuum


def test_continuum_pins_a_jobs_kv_across_its_tool_call():
    """Device 50. Job w1 (agent a) caches A(20), not its last step: pinned for 2 s. Anonymous B(20)
    fills the device to 40; an anonymous C(10) + 1 needs 11 with 10 free. LRU would take A's tail
    (older); Continuum takes B's tail (A is pinned). After 3 s with no request of w1 in flight the
    pin has expired, and the next eviction takes A's tail, now least recently used."""
    eng = make_engine("continuum", device=50)
    submit(eng, "a", "A1 A2", hints=Hints("w1", "a", 0, "app"))
    submit(eng, "b", "B1 B2")
    submit(eng, "c", "C1")
    assert keys("A1 A2") <= device_keys(eng) and chain(["B1", "B2"])[1] not in device_keys(eng)
    eng.advance_to(eng.clock + 3.0)
    submit(eng, "d", "D1")
    assert chain(["A1", "A2"])[1] not in device_keys(eng)


def test_continuum_learns_tool_durations_and_skips_slow_tools_and_last_steps():
    """w1's first request finishes at 0.020 s and its next one arrives at 5.020 s: agent a's tool
    took 5 s (> 2 s), so a's next finish pins nothing. Agent b has no sample (cold start): pinned.
    A request marked as the job's last step is never pinned."""
    eng = make_engine("continuum", device=500)
    submit(eng, "a0", "A1 A2", hints=Hints("w1", "a", 0, "app"))
    eng.advance_to(eng.clock + 5.0)
    submit(eng, "a1", "A1 A2 A3", hints=Hints("w1", "a", 1, "app"))
    pol = eng.cache.policy
    assert pol.tool_mean(("app", "a")) == pytest.approx(5.0, abs=1e-6)
    assert not any(pol.pinned(n) for n in eng.cache.tree.nodes())
    submit(eng, "b0", "B1", hints=Hints("w2", "b", 0, "app"))
    assert {n.keys[0] for n in eng.cache.tree.nodes() if pol.pinned(n)} == keys("B1")
    submit(eng, "c0", "C1", hints=Hints("w3", "b", 0, "app"), last_step=True)
    assert not pol.pinned(next(n for n in eng.cache.tree.nodes() if n.keys[0] in keys("C1")))


def test_continuum_gives_up_a_pin_when_an_idle_engine_cannot_admit():
    """Device 30: w1's pinned A(20) leaves 10 free; an anonymous B(20) + 1 cannot fit and nothing
    runs, so the deadlock guard releases A's pin and B evicts A."""
    eng = make_engine("continuum", device=30)
    submit(eng, "a", "A1 A2", hints=Hints("w1", "a", 0, "app"))
    submit(eng, "b", "B1 B2")
    assert device_keys(eng) == keys("B1 B2")


# --------------------------------------------------------------------------- spec-prefill


@pytest.mark.parametrize("with_prefill,hit,ttft", [(True, 30, 0.010), (False, 20, 0.020)])
def test_speculative_prefill_caches_the_reply_for_the_next_turn(with_prefill, hit, ttft):
    """Turn 1 is S U0 (20 tokens), its reply R0. With the speculative prefill the frontend then
    sends S U0 R0 with one output token: at t = 0.020 s (turn 1 done) it prefills R0's 10 tokens
    (10 ms). Turn 2, S U0 R0 U1 (40 tokens), finds 30 cached and prefills 10 (TTFT 10 ms); without
    it, 20 cached and 20 prefilled (20 ms). The speculative prompt (30 tokens) is counted apart
    from the hit rate."""
    eng = make_engine("spec-prefill", device=500)
    nxt = (chain(["S", "U0", "R0"]), [10, 10, 10]) if with_prefill else None
    submit(eng, "t0", "S U0", speculative_next=nxt)
    t1 = eng.clock
    first = [e for e in submit(eng, "t1", "S U0 R0 U1") if isinstance(e, FirstToken)][0]
    assert first.device_cached_tokens == hit and first.time - t1 == pytest.approx(ttft, abs=1e-9)
    s = eng.stats
    assert (s.prompt_tokens, s.device_hit_tokens) == (60, hit)
    assert s.speculative_prefill_tokens == (30 if with_prefill else 0)


# --------------------------------------------------------------------------- kvflow-shipped


def _shipped_warm(host: int = 0):
    """Pipeline graph A -> B -> C -> D. Job w1 runs A, B, C (separate prompts, 20 tokens each);
    an anonymous N(20) follows. w1 sits at C: steps C 0, D 1, A and B unreachable. Hold
    priorities: A and B 5 (capped at hold_step + 1), C 0, N 6 (no agent)."""
    eng = make_engine("kvflow-shipped", device=1000, host=host)
    eng.set_app_graph("app", {"A": ["B"], "B": ["C"], "C": ["D"], "D": []})
    for step, agent in enumerate("ABC"):
        submit(eng, agent, f"{agent}1 {agent}2", hints=Hints("w1", agent, step, "app"))
    submit(eng, "n", "N1 N2")
    return eng


def test_shipped_kvflow_evicts_in_hold_passes_then_oldest_branch_first():
    """Eviction order: the pass of hold priority >= 3 (A, B, N, oldest first), then C (0). LRU's
    order would put C before N."""
    eng = _shipped_warm()
    pol = eng.cache.policy
    node = {n.keys[0]: n for n in eng.cache.tree.nodes()}
    assert [pol.hold_priority(node[chain([x])[0]]) for x in ("A1", "B1", "C1", "N1")] == [5, 5, 0, 6]
    order = []
    while (victim := eng.cache.peek_victim()) is not None:
        order.append(victim.keys[0])
        eng.cache.evict_device(victim.tokens)
    assert order == [chain([x])[0] for x in ("A1", "B1", "N1", "C1")]


def test_shipped_kvflow_tags_last_nodes_inherits_parent_agents_and_tracks_frontiers():
    """w1's D request extends C's prompt: its new node (D1) copies C's tag and adds D, and D's
    frontier is that node; C's frontier stays C's node."""
    eng = _shipped_warm()
    submit(eng, "D", "C1 C2 D1", hints=Hints("w1", "D", 3, "app"))
    pol = eng.cache.policy
    d1 = next(n for n in eng.cache.tree.nodes() if n.keys[0] == chain(["C1", "C2", "D1"])[2])
    assert pol._tags[d1] == {("app", "C"), ("app", "D")}
    assert pol.frontier("app", "D") == [d1]
    assert [n.keys[0] for n in pol.frontier("app", "C")] == [chain(["C1"])[0]]


def test_shipped_kvflow_prefetches_frontiers_of_agents_within_two_steps():
    """With a host tier, everything is demoted; a long anonymous decode then loads C's frontier (step
    0) back within the stretch's PCIe budget, and nothing of A or B (unreachable)."""
    eng = _shipped_warm(host=1000)
    eng.cache.evict_device(10**6)
    assert device_keys(eng) == set()
    submit(eng, "long", "Z1", output_tokens=30)
    assert keys("C1 C2") <= device_keys(eng)
    assert not (keys("A1 A2") | keys("B1 B2")) & device_keys(eng)
    assert eng.stats.prefetched_tokens == 20
