"""Hand-checked scenarios where ``pbkv``'s memory-short rules choose differently from
``pbkv-paper`` (``docs/design/memory-short-policy.md``). Profile and helpers: engine_helpers
(10 tokens per block, output 1 token: 1 token reserved while running, outputs not cached)."""

from __future__ import annotations

import pytest

from pbkv_contract.hints import Hints
from pbkv_server.engine.policies import available_policies, policy_info, REPLAY, SERVER, SGLANG

from .engine_helpers import TablePredictor, chain, device_keys, host_keys, make_engine, request, run

#: every workflow's next agents: "a" for certain (score 1 + 0.7 + 0.49 with gamma 0.7)
TABLE = {w: [{"a": 1.0}] * 3 for w in ("w1", "w2", "w3")}


def _cycle(policy: str, host: int):
    """Device 50, host ``host``. Three workflows of one agent, each with a 20-token history
    [Wi.1 Wi.2], take turns twice: w1 w2 w3 w1 w2 w3, one request at a time.

    Round 1 fills 40 tokens; w3 needs 21 with 10 free, so one 20-token history must go. All three
    score alike, so pbkv-paper breaks the tie by LRU like lru and evicts w1; pbkv with a host tier
    keeps its stable set (the oldest workflows) and evicts the youngest cached workflow, w2.
    Round 2, lru/pbkv-paper: every turn misses the device (the cyclic pattern: each workflow's
    history left just before its turn). pbkv: w1 hits 20 (cached, 10 free cover its reservation);
    w2 misses and evicts w3 (younger than w1); w3 misses and evicts w2. Device hits: 0 vs 20 of 120
    tokens. With host 1000 every victim is written to the host and each device miss of round 2 is
    a host hit (lru 60, pbkv 40). With no host tier pbkv ranks by score, then LRU (rule 6), so on
    these equal scores it evicts as lru does.
    """
    eng = make_engine(policy, device=50, host=host, predictor=TablePredictor(TABLE))
    for step in (0, 1):
        for w in ("w1", "w2", "w3"):
            eng.submit(request(f"{w}.{step}", [f"{w}.1", f"{w}.2"], hints=Hints(w, "a", step, "app")))
            run(eng)
    return eng


@pytest.mark.parametrize("policy,host,hits,host_hits,kept", [
    ("lru", 1000, 0, 60, ("w2", "w3")), ("pbkv-paper", 1000, 0, 60, ("w2", "w3")),
    ("pbkv", 1000, 20, 40, ("w1", "w3")),
    ("lru", 0, 0, 0, ("w2", "w3")), ("pbkv", 0, 0, 0, ("w2", "w3"))])
def test_stable_set_beats_lru_ties_when_histories_do_not_fit(policy, host, hits, host_hits, kept):
    eng = _cycle(policy, host)
    assert (eng.stats.device_hit_tokens, eng.stats.host_hit_tokens) == (hits, host_hits)
    assert eng.stats.prompt_tokens == 120
    assert device_keys(eng) == {k for w in kept for k in chain([f"{w}.1", f"{w}.2"])}


def test_without_a_host_tier_the_higher_score_stays_on_the_device():
    """Rule 6. Device 60. w1 (older) caches [A1 A2]; its next agent is "a" with probability 0.3,
    so that cache scores 0.3 x (1 + 0.7 + 0.49) = 0.657 (above LOW_SCORE). Younger w2 caches
    [B1 B2] with "a" certain (score 2.19). An anonymous [R1 R2 R3] then needs 31 tokens with 20
    free: one 20-token history must go. With no host tier pbkv evicts the lower score, w1's
    [A1 A2], and w2's next request hits its 20 tokens on the device. With a host tier (1000)
    rule 1 evicts the younger workflow's [B1 B2] to the host instead: w2's request hits them
    there (host hit 20, device hit 0) and [A1 A2] stays on the device."""
    table = {"w1": [{"a": 0.3, "b": 0.7}] * 3, "w2": [{"a": 1.0}] * 3}
    got = {}
    for host in (0, 1000):
        eng = make_engine("pbkv", device=60, host=host, predictor=TablePredictor(table))
        eng.submit(request("w1.0", ["A1", "A2"], hints=Hints("w1", "a", 0, "app")))
        run(eng)
        eng.submit(request("w2.0", ["B1", "B2"], hints=Hints("w2", "a", 0, "app")))
        run(eng)
        eng.submit(request("r", ["R1", "R2", "R3"]))
        run(eng)
        a_kept = set(chain(["A1", "A2"])) <= device_keys(eng)
        before = (eng.stats.device_hit_tokens, eng.stats.host_hit_tokens)
        eng.submit(request("w2.1", ["B1", "B2"], hints=Hints("w2", "a", 1, "app")))
        run(eng)
        got[host] = (eng.stats.device_hit_tokens - before[0], eng.stats.host_hit_tokens - before[1], a_kept)
    assert got == {0: (20, 0, False), 1000: (0, 20, True)}


def test_waiting_requests_cache_outranks_a_higher_score():
    """Device 60. w1 (older) caches [A1 A2] with next agent "b" predicted certain, so its "a"
    cache scores 0 (below LOW_SCORE); w2 caches [B1 B2] with "a" predicted (score 2.19). Then w1's
    agent "a" request is submitted while an anonymous request [R1 R2 R3] (30 tokens + 1 reserved)
    is queued before it. R needs 31 with 20 free, so 11 tokens (two blocks, one 20-token history)
    must go: pbkv-paper evicts the lowest score, w1's [A1 A2],
    which the waiting request needs at once; pbkv ranks the cache of a waiting (workflow, agent)
    above all active cache and evicts w2's [B1 B2]. w1's request then hits 20 under pbkv, 0 under
    pbkv-paper (its prompt was evicted while it waited)."""
    table = {"w1": [{"b": 1.0}] * 3, "w2": [{"a": 1.0}] * 3}
    hits = {}
    for policy in ("pbkv-paper", "pbkv"):
        eng = make_engine(policy, device=60, predictor=TablePredictor(table))
        eng.submit(request("w1.0", ["A1", "A2"], hints=Hints("w1", "a", 0, "app")))
        run(eng)
        eng.submit(request("w2.0", ["B1", "B2"], hints=Hints("w2", "a", 0, "app")))
        run(eng)
        before = eng.stats.device_hit_tokens
        eng.submit(request("r", ["R1", "R2", "R3"]))
        eng.submit(request("w1.1", ["A1", "A2"], hints=Hints("w1", "a", 1, "app")))
        run(eng)
        hits[policy] = eng.stats.device_hit_tokens - before
    assert hits == {"pbkv-paper": 0, "pbkv": 20}


def test_retired_victim_does_not_displace_active_host_cache():
    """Device 30, host 20. Active w1 caches [A1 A2] (20) and is demoted to the host by an
    anonymous [N1 N2] (the host is empty: it is written). Two-step w2 caches [P1 P2] on the device
    after N leaves, and ends (retired). An anonymous [M1 M2] then needs 21: the device victim is
    the retired P. pbkv-paper writes it to the full host by dropping w1's active [A1 A2];
    pbkv (selective_host) drops P instead, and w1's cache stays on the host."""
    table = {"w1": [{"a": 1.0}] * 3}
    kept = {}
    for policy in ("pbkv-paper", "pbkv"):
        eng = make_engine(policy, device=30, host=20, predictor=TablePredictor(table))
        eng.submit(request("w1.0", ["A1", "A2"], hints=Hints("w1", "a", 0, "app")))
        run(eng)
        eng.submit(request("n", ["N1", "N2"]))
        run(eng)
        for step in (0, 1):
            eng.submit(request(f"w2.{step}", ["P1", "P2"], hints=Hints("w2", "a", step, "app")))
            run(eng)
        eng.end_workflow("w2")
        eng.submit(request("m", ["M1", "M2"]))
        run(eng)
        kept[policy] = set(chain(["A1", "A2"])) <= host_keys(eng)
    assert kept == {"pbkv-paper": False, "pbkv": True}


def test_pbkv_paper_is_registered_with_the_papers_rules():
    """``pbkv-paper`` keeps today's pbkv declaration: predictive, prefetching, every backend,
    SGLang name ``pbkv-paper``; ``pbkv`` is the default product rule next to it."""
    info = policy_info("pbkv-paper")
    assert info.predictive and info.prefetches and not info.offline
    assert info.backends == {REPLAY, SERVER, SGLANG} and info.sglang_name == "pbkv-paper"
    assert policy_info("pbkv").sglang_name == "pbkv"
    assert {"pbkv", "pbkv-paper"} <= set(available_policies(REPLAY))


def test_host_keeps_the_leaf_whose_next_use_is_estimated_sooner():
    """Device 30, host 20 (one 20-token history). Older w1 caches [A1 A2] (agent "a", predicted
    next only with probability 0.03 per step: score 0.03 * (1 + 0.7 + 0.49) = 0.0657, above
    LOW_SCORE, so the device keeps ranking it in the resident set); younger w2 caches [B1 B2]
    ("a" certain: q = 1), which demotes A to the empty host. An anonymous [N1 N2] then demotes B
    to the full host. Next-use estimates (host_order.NextUse): w1 finished at t1 after a request
    of d1 > 0 s, no gap observed yet, so A's is t1 + (1/0.0657 - 1) * d1 = t1 + 14.2 d1; w2
    finished at t2 = t1 + d2 (d2: w2's request, about d1 plus A's write), so B's is t2, sooner.
    The host drops A and keeps B, and w2's next request [B1 B2] finds its 20 tokens there. The
    previous host order (the device order: youngest workflow's cache first) dropped B instead
    (w2 is younger) and the request found nothing: 0 host hits."""
    table = {"w1": [{"a": 0.03, "b": 0.97}] * 3, "w2": [{"a": 1.0}] * 3}
    eng = make_engine("pbkv", device=30, host=20, predictor=TablePredictor(table))
    eng.submit(request("w1.0", ["A1", "A2"], hints=Hints("w1", "a", 0, "app")))
    run(eng)
    eng.submit(request("w2.0", ["B1", "B2"], hints=Hints("w2", "a", 0, "app")))
    run(eng)
    assert host_keys(eng) == set(chain(["A1", "A2"]))
    eng.submit(request("n", ["N1", "N2"]))
    run(eng)
    assert host_keys(eng) == set(chain(["B1", "B2"]))
    before = eng.stats.host_hit_tokens
    eng.submit(request("w2.1", ["B1", "B2"], hints=Hints("w2", "a", 1, "app")))
    run(eng)
    assert eng.stats.host_hit_tokens - before == 20


def _shared_retired(policy: str, host: int, w3_next: dict) -> tuple[int, int]:
    """Device 60, host ``host``. Active w0 (oldest) caches [O1] (10); two-step w1 and w2 both use
    [S1 S2] (20) and end: S is retired but shared (two workflows used it), not finished private.
    Active w3 (youngest, next agents ``w3_next``) caches [Y1 Y2] (20). An anonymous [N1 N2] needs
    21 with 10 free, so one 20-token leaf goes. A new workflow w4 whose prompt starts with
    [S1 S2] then runs; returns its (device, host) hit tokens."""
    table = {"w0": [{"a": 1.0}] * 3, "w3": [w3_next] * 3}
    eng = make_engine(policy, device=60, host=host, predictor=TablePredictor(table))
    eng.submit(request("w0.0", ["O1"], hints=Hints("w0", "a", 0, "app")))
    run(eng)
    for w in ("w1", "w2"):
        for step in (0, 1):
            eng.submit(request(f"{w}.{step}", ["S1", "S2"], hints=Hints(w, "a", step, "app")))
            run(eng)
        eng.end_workflow(w)
    shared = next(n for n in eng.cache.tree.nodes() if n.keys and n.keys[-1] == chain(["S1", "S2"])[-1])
    assert shared.sc.retired and not shared.sc.finished_private
    eng.submit(request("w3.0", ["Y1", "Y2"], hints=Hints("w3", "a", 0, "app")))
    run(eng)
    eng.submit(request("n", ["N1", "N2"]))
    run(eng)
    assert set(chain(["O1"])) <= device_keys(eng)  # the oldest workflow's cache stays in every case
    before = (eng.stats.device_hit_tokens, eng.stats.host_hit_tokens)
    eng.submit(request("w4.0", ["S1", "S2", "X1"], hints=Hints("w4", "a", 0, "app")))
    run(eng)
    return eng.stats.device_hit_tokens - before[0], eng.stats.host_hit_tokens - before[1]


def test_shared_retired_cache_ranks_with_the_oldest_workflows():
    """Rule 5, with a host tier (1000). pbkv-paper evicts the retired S to the host; pbkv ranks S
    with the oldest active workflow's cache (score 0, below w0's own) and evicts w3's [Y1 Y2],
    the youngest. w4 then hits S on the host under pbkv-paper, on the device under pbkv."""
    certain = {"a": 1.0}
    assert _shared_retired("pbkv-paper", 1000, certain) == (0, 20)
    assert _shared_retired("pbkv", 1000, certain) == (20, 0)


def test_without_a_host_tier_shared_retired_cache_counts_as_one_use():
    """Rules 5 and 6, no host tier. S ranks as one expected use against w3's score: w3's [Y1 Y2]
    with "a" certain scores 1 + 0.7 + 0.49 = 2.19 > 1, so S goes and w4 misses; with "a" at 0.3
    it scores 0.657 < 1, so Y goes and w4 hits S. ``he`` evicts retired S first either way."""
    certain, unlikely = {"a": 1.0}, {"a": 0.3, "b": 0.7}
    assert _shared_retired("pbkv", 0, certain) == (0, 0)
    assert _shared_retired("pbkv", 0, unlikely) == (20, 0)
    assert _shared_retired("he", 0, unlikely) == (0, 0)


def test_no_conservative_prefetch_round_while_a_request_waits_for_admission():
    """Nothing waits: pbkv plans pbkv-paper's conservative round. w2's request submitted and not
    yet admitted: no round (w2's app is not a growing conversation, so no waiting prefix is
    known); with ``prefetch_while_queued`` the round stays. Admitted: the round again."""
    from pbkv_server.engine.policies.pbkv_paper import CONSERVATIVE

    eng = make_engine("pbkv", device=60, host=1000, predictor=TablePredictor(TABLE))
    eng.submit(request("w1.0", ["A1", "A2"], hints=Hints("w1", "a", 0, "app")))
    run(eng)
    policy = eng.cache.policy
    assert policy.prefetch_plan(1.0) is CONSERVATIVE
    eng.submit(request("w2.0", ["B1", "B2"], hints=Hints("w2", "a", 0, "app")))
    assert policy.prefetch_plan(1.0) is None
    policy.prefetch_while_queued = True
    assert policy.prefetch_plan(1.0) is CONSERVATIVE
    policy.prefetch_while_queued = False
    run(eng)
    assert policy.prefetch_plan(1.0) is CONSERVATIVE
