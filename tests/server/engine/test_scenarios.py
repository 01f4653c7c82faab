"""Hand-checked scenarios: small request sequences whose right eviction order, cache contents and
event times are worked out in each test's docstring (profile: engine_helpers.PROFILE, prefill
1 ms/token, decode step 0.01 s + 0.001 s per sequence, host->device load 1 ms/token)."""

from __future__ import annotations

import math

import pytest

from pbkv_contract.hints import END_AGENT, Hints
from pbkv_server.engine import FirstToken

from .engine_helpers import (TablePredictor, chain, device_keys, host_keys, make_engine, request, run)


def test_lru_evicts_least_recently_used_leaf():
    """Device 60 tokens, 10 tokens/block, output 1 (1 reserved token while running).
    A(20) then B(20) then A+A3 (hit 20, adds A3: 50 used). C(20) needs 21 with 10 free: leaves
    are A3 (used at t3) and B (t2), so LRU evicts B (20 tokens) and nothing else."""
    eng = make_engine("lru", device=60)
    for rid, labels in [("r1", "A1 A2"), ("r2", "B1 B2"), ("r3", "A1 A2 A3"), ("r4", "C1 C2")]:
        eng.submit(request(rid, labels.split()))
        run(eng)
    assert device_keys(eng) == set(chain(["A1", "A2", "A3"])) | set(chain(["C1", "C2"]))
    assert (eng.stats.evictions, eng.stats.evicted_tokens) == (1, 20)
    # r3 found A1 A2 on the device: 20 of its 30 prompt tokens; hit rate = 20 / (20+20+30+20)
    assert eng.stats.device_hit_tokens == 20
    assert eng.stats.hit_rate == pytest.approx(20 / 90)


@pytest.mark.parametrize("policy,survivor", [("lru", "P"), ("lae", "Q"), ("he", "Q"), ("pbkv", "Q")])
def test_retired_cache_leaves_before_active_cache(policy, survivor):
    """Device 50. Workflow w2 caches Q(20), then the two-step workflow w1 caches P(20) and ends. An anonymous
    R(10)+1 needs 11 with 10 free, so one 10-token block must go: LRU takes the tail of the older
    Q; lae/he/pbkv take the tail of the retired P even though it is more recent. Only the tail
    block leaves: the victim's first block stays cached."""
    eng = make_engine(policy, device=50)
    eng.submit(request("q", ["Q1", "Q2"], hints=Hints("w2", "a", 0, "app")))
    run(eng)
    for step in (0, 1):
        eng.submit(request(f"p{step}", ["P1", "P2"], hints=Hints("w1", "a", step, "app")))
        run(eng)
    eng.end_workflow("w1")
    eng.end_workflow("w1")  # idempotent
    eng.end_workflow("never-seen")  # unknown id is fine
    eng.submit(request("r", ["R1"]))
    run(eng)
    victim = "P" if survivor == "Q" else "Q"
    kept = set(chain([survivor + "1", survivor + "2"])) | {chain([victim + "1"])[0]}
    assert kept <= device_keys(eng) and chain([victim + "1", victim + "2"])[1] not in device_keys(eng)
    assert (eng.stats.evictions, eng.stats.evicted_tokens) == (1, 10)
    assert eng.stats.retired_workflows == 1 and eng.stats.active_workflows == 1


def test_lae_evicts_a_finished_workflows_private_history_before_older_shared_cache():
    """Device 50. S(20) is used by single-request workflows w1 and w2; later the two-step workflow
    w3 uses T(20) twice; all end. R(20)+1 needs 21 with 10 free: lae evicts T (the finished
    multi-step workflow's private history, which nobody extends) though LRU would pick the older S."""
    eng = make_engine("lae", device=50)
    for wf, step, labels in [("w1", 0, "S1 S2"), ("w2", 0, "S1 S2"), ("w3", 0, "T1 T2"), ("w3", 1, "T1 T2")]:
        eng.submit(request(f"{wf}.{step}", labels.split(), hints=Hints(wf, "a", step, "app")))
        run(eng)
    for wf in ("w1", "w2", "w3"):
        eng.end_workflow(wf)
    eng.submit(request("r", ["R1", "R2"]))
    run(eng)
    assert set(chain(["S1", "S2"])) <= device_keys(eng)
    assert not set(chain(["T1", "T2"])) & device_keys(eng)


@pytest.mark.parametrize("policy", ["lae", "he", "pbkv"])
def test_retired_single_request_workflows_leave_in_lru_order(policy):
    """Chat turns are single-request workflows: a retired turn's prompt may be extended by the
    next turn, so retired cache of single-request workflows leaves least recently used first,
    exactly as under lru, whatever the number of workflows that shared it."""
    kept = {}
    for name in (policy, "lru"):
        eng = make_engine(name, device=50)
        for wf, labels in [("w1", "S1 S2"), ("w2", "S1 S2"), ("w3", "T1 T2")]:
            eng.submit(request(wf, labels.split(), hints=Hints(wf, "a", 0, "chat")))
            run(eng)
            eng.end_workflow(wf)
        eng.submit(request("r", ["R1", "R2"]))
        run(eng)
        kept[name] = device_keys(eng)
    assert kept[policy] == kept["lru"]
    assert set(chain(["T1", "T2"])) <= kept[policy] and not set(chain(["S1", "S2"])) & kept[policy]


def test_he_keeps_high_score_node_and_scores_match_eq2_by_hand():
    """Device 50. w1 (agent x) caches X(20) first, w2 (agent y) caches Y(20) later. Predictions:
    w1's next three agents are x with p=0.9 (END 0.1), w2's are x too, so Y scores 0.
    Score(X) = 0.9 + 0.7*0.9*0.9 + 0.49*0.81*0.9 = 1.82421 (gamma 0.7, survival 0.9^(k-1)).
    Anonymous R(20)+1 (21 with 10 free) forces one node out: he evicts Y (score 0) although X is
    older; lru evicts X."""
    dist = {"x": 0.9, END_AGENT: 0.1}
    table = {"w1": [dist] * 3, "w2": [dist] * 3}
    results = {}
    for policy in ("he", "lru"):
        eng = make_engine(policy, device=50, predictor=TablePredictor(table))
        eng.submit(request("x", ["X1", "X2"], hints=Hints("w1", "x", 0, "app")))
        run(eng)
        eng.submit(request("y", ["Y1", "Y2"], hints=Hints("w2", "y", 0, "app")))
        run(eng)
        if policy == "he":
            scores = {n.keys[0]: n.sc.score for n in eng.cache.tree.nodes()}
            assert scores[chain(["X1"])[0]] == pytest.approx(1.82421)
            assert scores[chain(["Y1"])[0]] == 0.0
        eng.submit(request("r", ["R1", "R2"]))
        run(eng)
        results[policy] = device_keys(eng)
    assert chain(["X1"])[0] in results["he"] and chain(["Y1"])[0] not in results["he"]
    assert chain(["Y1"])[0] in results["lru"] and chain(["X1"])[0] not in results["lru"]


def test_host_tier_demotion_and_pcie_load_timing():
    """Device 40, host 100. r1 = A(20): prefill 0.02 s, first token and finish at 0.02.
    r2 = B(20): needs 21 with 20 free, so one block must go: A's tail A2 is demoted to host, A1
    stays; prefill 0.02 -> 0.04. r3 = A + A3 (30): A1 is a device hit (10), A2 a host hit (10),
    A3 new; it needs 10 load + 10 new + 1 = 21 with 10 free: all of B (2 blocks; one is not
    enough for 11) is demoted. Load 10 tokens (0.01 s) + prefill 10 (0.01 s): first token at 0.06
    with 10 device / 10 host cached tokens."""
    eng = make_engine("lru", device=40, host=100)
    events = []
    for rid, labels in [("r1", "A1 A2"), ("r2", "B1 B2"), ("r3", "A1 A2 A3")]:
        eng.submit(request(rid, labels.split()))
        events += run(eng)
    firsts = {e.request_id: e for e in events if isinstance(e, FirstToken)}
    assert firsts["r1"].time == pytest.approx(0.02)
    assert firsts["r2"].time == pytest.approx(0.04)
    assert firsts["r3"].time == pytest.approx(0.06)
    assert (firsts["r3"].device_cached_tokens, firsts["r3"].host_cached_tokens, firsts["r3"].prompt_tokens) == (10, 10, 30)
    assert host_keys(eng) == set(chain(["B1", "B2"]))
    assert eng.stats.host_hit_rate == pytest.approx(10 / 70)
    assert eng.stats.host_used_tokens == 20 and eng.stats.device_used_tokens == 30


def _times(events):
    return [(type(e).__name__, e.request_id, round(e.time, 9)) for e in events]


def test_decode_stretch_times_are_exact_and_match_single_iteration_stepping():
    """r1 (10 tokens, 5 out) and r2 (20 tokens, 3 out) arrive at 0. Iteration 1 prefills 30 tokens:
    both first tokens at 0.03. Batch 2 decodes at 0.012 s/iter: r2's 2 remaining tokens end at
    0.054. Batch 1 at 0.011 s/iter: r1's last 2 tokens end at 0.076. Stepping one iteration at a
    time (until=clock) must give the same events."""
    expected = [("FirstToken", "r1", 0.03), ("FirstToken", "r2", 0.03), ("Finished", "r2", 0.054),
                ("Finished", "r1", 0.076)]
    for single in (False, True):
        eng = make_engine("lru")
        eng.submit(request("r1", ["a"], output=5))
        eng.submit(request("r2", ["b", "c"], output=3))
        events = []
        while eng.busy:
            events += eng.step(eng.clock if single else None)
        assert _times(events) == expected


def test_submission_during_decode_joins_at_next_iteration_boundary():
    """As above, but r3 (10 tokens, 1 out) arrives at 0.04. step(until=0.04) stops after one
    decode iteration (0.042); r3 is admitted in a mixed iteration: prefill 10 (0.01 s) + decode
    batch 2 (0.012 s) ends at 0.064, where r3 starts and finishes and r2 makes its 3rd token.
    r1 then decodes alone: 2 more tokens at 0.011 s each, done at 0.086. Completions at the same
    time come in submission order."""
    eng = make_engine("lru")
    eng.submit(request("r1", ["a"], output=5))
    eng.submit(request("r2", ["b", "c"], output=3))
    events = eng.step()
    events += eng.step(until=0.04)
    assert eng.clock == pytest.approx(0.042)
    eng.advance_to(0.04)  # in the past: no-op
    assert eng.clock == pytest.approx(0.042)
    eng.submit(request("r3", ["d"], output=1))
    events += run(eng)
    assert _times(events) == [("FirstToken", "r1", 0.03), ("FirstToken", "r2", 0.03),
                              ("FirstToken", "r3", 0.064), ("Finished", "r2", 0.064),
                              ("Finished", "r3", 0.064), ("Finished", "r1", 0.086)]


class _Oracle:
    """next use of a block = fixed table by key (inf if absent), regardless of now."""

    def __init__(self, table):
        self.table = table

    def next_use(self, key, now_index):
        return self.table.get(key, math.inf)


def test_belady_evicts_farthest_next_use():
    """Device 50: A(20) then B(20). The oracle says A is next used at request 10, B at 5. C(20)+1
    (21 with 10 free) forces one node out: belady evicts A (farthest) although B is more recent."""
    oracle = _Oracle({chain(["A1"])[0]: 10, chain(["B1"])[0]: 5})
    eng = make_engine("belady", device=50, future=oracle)
    for rid, labels in [("a", "A1 A2"), ("b", "B1 B2"), ("c", "C1 C2")]:
        eng.submit(request(rid, labels.split()))
        run(eng)
    assert set(chain(["B1", "B2"])) <= device_keys(eng)
    assert not set(chain(["A1", "A2"])) & device_keys(eng)


def test_belady_requires_a_future_oracle():
    with pytest.raises(ValueError, match="future"):
        make_engine("belady")


def _kvflow_warm(host: int = 0):
    """Graph planner -> coder -> tester -> planner. Two workflows call each agent once; prompts are
    the agent's 2 system blocks + a workflow-specific block, so each agent's fixed prompt is its
    2 system blocks. w1 ends at coder, w2 ends (retired)."""
    eng = make_engine("kvflow", device=1000, host=host)
    eng.set_app_graph("app", {"planner": ["coder"], "coder": ["tester"], "tester": ["planner"]})
    step = {"w1": 0, "w2": 0}
    for agent in ("planner", "tester", "coder"):
        for wf in ("w2", "w1"):
            labels = [f"{agent}-sys1", f"{agent}-sys2", f"{wf}-{agent}"]
            eng.submit(request(f"{wf}-{agent}", labels, hints=Hints(wf, agent, step[wf], "app")))
            step[wf] += 1
            run(eng)
    eng.end_workflow("w2")
    return eng


def test_kvflow_eviction_order_follows_steps_to_execution():
    """w1 is at coder: steps-to-execution coder 0, tester 1, planner 2. Eviction order: the six
    dynamic suffix nodes first (LRU), then planner's system prompt (2 steps away), then tester's
    (1), then coder's (0)."""
    eng = _kvflow_warm()
    pol = eng.cache.policy
    assert (pol.steps("app", "coder"), pol.steps("app", "tester"), pol.steps("app", "planner")) == (0, 1, 2)
    order = []
    while (victim := eng.cache.peek_victim()) is not None:
        order.append(victim.keys[0])
        eng.cache.evict_device(victim.tokens)
    suffixes = [chain([f"{a}-sys1", f"{a}-sys2", f"{wf}-{a}"])[2]
                for a in ("planner", "tester", "coder") for wf in ("w2", "w1")]
    assert order[:6] == suffixes
    assert order[6:] == [chain([f"{a}-sys1"])[0] for a in ("planner", "tester", "coder")]


def test_kvflow_prefetches_next_step_agent_fixed_prompt():
    """As above with a host tier: evict everything to host, then run a long anonymous decode.
    The decode-only steps load tester's fixed prompt (next step of w1, 20 tokens) back, and
    nothing of planner (2 steps away)."""
    eng = _kvflow_warm(host=1000)
    eng.cache.evict_device(10**6)
    assert device_keys(eng) == set()
    eng.submit(request("long", ["z"], output=20))
    run(eng)
    assert set(chain(["tester-sys1", "tester-sys2"])) <= device_keys(eng)
    assert not set(chain(["planner-sys1", "planner-sys2"])) & device_keys(eng)
    assert eng.stats.prefetched_tokens == 20


def _pipeline_hits(policy: str) -> list[list[int]]:
    """Static sequential pipeline A -> B -> C -> D, five workflows one after another. Each prompt is
    the agent's 100-token system prompt (10 blocks) + a 10-token workflow block; device 331 tokens
    = three prompts + the running request's 1 reserved output token. Returns the device-cached
    tokens of each request, per workflow."""
    eng = make_engine(policy, device=331)
    eng.set_app_graph("app", {"A": ["B"], "B": ["C"], "C": ["D"], "D": []})
    hits = []
    for w in range(5):
        row = []
        for step, agent in enumerate("ABCD"):
            labels = [f"{agent}-sys{i}" for i in range(10)] + [f"w{w}-{agent}"]
            eng.submit(request(f"w{w}-{agent}", labels, hints=Hints(f"w{w}", agent, step, "app")))
            row.append(sum(e.device_cached_tokens for e in run(eng) if isinstance(e, FirstToken)))
        eng.end_workflow(f"w{w}")
        hits.append(row)
    return hits


def test_kvflow_beats_lru_on_a_static_sequential_pipeline():
    """The workload KVFlow is built for. LRU cycles through four 110-token prompts with room for
    three, so it always evicts the prompt needed next: no hit ever. kvflow: in w0 every agent is
    seen once, so no prompt is fixed yet and it orders like LRU (no hit). In w1 each agent's
    second request fixes its 100-token system prompt (the common prefix of its two prompts), but
    the prompts were evicted in LRU order before: no hit either. From w2 on, at A the dynamic
    suffixes go first, then the tail of D's system prompt (3 steps away; 80 tokens are enough,
    D's first 20 stay); B and C find their system prompts (100 each); at D, A's prompt (A is
    unreachable from D, the graph's last agent: dynamic, LRU) makes room and D finds its first
    20 tokens."""
    assert _pipeline_hits("lru") == [[0, 0, 0, 0]] * 5
    assert _pipeline_hits("kvflow") == [[0, 0, 0, 0]] * 2 + [[0, 100, 100, 20]] * 3


def _prefetch_setup(policy, device, output, rho=0.1, other=0):
    """w1 (agent a, predicted next: a with p=1) caches A(20), which is then demoted to host (the
    only victim); an anonymous B(``other`` tokens, active cache of score 0) is cached; an
    anonymous C(10) with ``output`` tokens then decodes."""
    table = {"w1": [{"a": 1.0}] * 3}
    eng = make_engine(policy, device=device, host=200, predictor=TablePredictor(table), rho=rho)
    eng.submit(request("a", ["A1", "A2"], hints=Hints("w1", "a", 0, "app")))
    run(eng)
    eng.cache.evict_device(20)
    assert set(chain(["A1", "A2"])) <= host_keys(eng) and not device_keys(eng)
    if other:
        eng.submit(request("b", [f"B{i}" for i in range(other // 10)]))
        run(eng)
    eng.submit(request("c", ["C1"], output=output))
    return eng


def test_conservative_prefetch_loads_predicted_host_cache_into_free_space():
    """Device 60: C(10) + 30 reserved output leaves 20 free. During C's decode A has value
    P^(1)(a) = 1: pbkv loads A (20 tokens) into the free space."""
    eng = _prefetch_setup("pbkv", 60, 30)
    run(eng)
    assert set(chain(["A1", "A2"])) <= device_keys(eng)
    assert eng.stats.prefetched_tokens == 20


def test_conservative_prefetch_never_displaces_active_cache_but_aggressive_does():
    """Device 80: B(60, active anonymous, score 0), then C(10) + 10 reserved fill the device. A
    needs 20 with 0 free and no retired cache: pbkv loads nothing and evicts nothing.
    pbkv-aggressive with rho = 1 may displace up to 80 tokens of lower score: only the 20 tokens
    it needs leave, B's last two blocks (B4, B5) go to host and B0-B3 stay; A comes back."""
    eng = _prefetch_setup("pbkv", 80, 10, other=60)
    evictions = eng.stats.evictions
    run(eng)
    assert eng.stats.prefetched_tokens == 0 and eng.stats.evictions == evictions
    agg = _prefetch_setup("pbkv-aggressive", 80, 10, rho=1.0, other=60)
    run(agg)
    assert set(chain(["A1", "A2"])) <= device_keys(agg)
    b = chain([f"B{i}" for i in range(6)])
    assert set(b[4:]) <= host_keys(agg) and set(b[:4]) <= device_keys(agg)
    assert agg.stats.prefetched_tokens == 20


@pytest.mark.parametrize("policy", ["pbkv", "pbkv-aggressive"])
def test_prefetch_loads_no_more_than_pcie_moves_during_the_decode_stretch(policy):
    """A(20) of w1 and B(20) of w2 (both predicted to run again) are demoted to host; the device
    has ample free room. Anonymous C(10) with 3 output tokens then decodes alone: after its first
    token, a 2-iteration decode stretch of 2 x 0.011 s = 0.022 s, in which PCIe (1 ms per token)
    moves 22 tokens: exactly one of A and B (20 each) is prefetched, never both."""
    table = {"w1": [{"a": 1.0}] * 3, "w2": [{"b": 1.0}] * 3}
    eng = make_engine(policy, device=200, host=200, predictor=TablePredictor(table), rho=1.0)
    for wf, agent, labels in (("w1", "a", ["A1", "A2"]), ("w2", "b", ["B1", "B2"])):
        eng.submit(request(wf, labels, hints=Hints(wf, agent, 0, "app")))
        run(eng)
    eng.cache.evict_device(40)
    assert host_keys(eng) == set(chain(["A1", "A2"])) | set(chain(["B1", "B2"]))
    eng.submit(request("c", ["C1"], output=3))
    run(eng)
    assert eng.stats.prefetched_tokens == 20
    assert len(host_keys(eng)) == 2


def test_aggressive_prefetch_respects_rho():
    """Same with rho = 0.2: displacing the 20 tokens A needs exceeds the 16-token budget
    (0.2 x 80): nothing changes."""
    agg = _prefetch_setup("pbkv-aggressive", 80, 10, rho=0.2, other=60)
    run(agg)
    assert agg.stats.prefetched_tokens == 0
    assert set(chain(["A1", "A2"])) <= host_keys(agg)


@pytest.mark.parametrize("host,host_after,dropped", [(20, {"A1", "A2"}, 10), (15, set(), 30)])
def test_demotion_makes_room_on_host_or_drops_the_whole_subtree(host, host_after, dropped):
    """Device 40, LRU. A(20), then A+A3 (A3: 10), then B(10)+1 evicts the only leaf A3 to host.
    C(20)+1 needs 21 with 10 free: the LRU leaf is now A (20). With host 20, A3 (host leaf) is
    dropped to make room and A is demoted: host holds A, 10 tokens dropped. With host 15, A does
    not fit the host at all, so A is dropped together with its host child A3: 30 tokens dropped."""
    eng = make_engine("lru", device=40, host=host)
    for rid, labels in [("r1", "A1 A2"), ("r2", "A1 A2 A3"), ("r3", "B1"), ("r4", "C1 C2")]:
        eng.submit(request(rid, labels.split()))
        run(eng)
    assert host_keys(eng) == set(chain(sorted(host_after)))
    assert device_keys(eng) == set(chain(["B1"])) | set(chain(["C1", "C2"]))
    assert (eng.stats.evictions, eng.stats.evicted_tokens, eng.stats.dropped_tokens) == (2, 30, dropped)
