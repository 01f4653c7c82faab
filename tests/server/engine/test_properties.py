"""Hypothesis property tests over random operation sequences (submit, step, end workflow, idle
time) under every policy, on a small two-tier cache so evictions, demotions, drops, host hits
and prefetches all happen. Invariants are checked after every operation and at every eviction."""

from __future__ import annotations

import dataclasses

import hashlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pbkv_contract.hints import END_AGENT, Hints
from pbkv_server.engine import Engine, EngineConfig, EngineRequest, HardwareProfile, available_policies
from pbkv_server.engine.policies import BASELINE_POLICY, DEFAULT_POLICY
from pbkv_server.engine.radix import DEVICE, HOST
from pbkv_contract.prediction import Prediction, Predictor

from .engine_helpers import PROFILE, chain

AGENTS = ("plan", "code", "test")


class HashPredictor(Predictor):
    """Deterministic pseudo-random distributions over AGENTS + END, a function of the query."""

    horizon = 3

    def predict(self, queries):
        out = []
        for q in queries:
            dists = []
            for k in range(3):
                h = hashlib.blake2b(f"{q.workflow_id}/{q.step}/{k}".encode(), digest_size=8).digest()
                w = [1 + b for b in h[:4]]
                total = sum(w)
                dists.append(dict(zip(AGENTS + (END_AGENT,), (x / total for x in w))))
            out.append(Prediction(dists))
        return out


class HashOracle:
    """A consistent pseudo-random next-use index per (key, now)."""

    def next_use(self, key, now_index):
        return now_index + 1 + int(hashlib.blake2b(repr(key).encode(), digest_size=2).hexdigest(), 16) % 50

    def next_call(self, owner):
        """A fixed pseudo-random next-call position per owner (``pbkv-nextuse``)."""
        return int(hashlib.blake2b(repr(owner).encode(), digest_size=2).hexdigest(), 16) % 50


class CheckedEngine(Engine):
    """Engine whose cache checks the eviction-time properties on every device eviction."""

    def __init__(self, config):
        super().__init__(config)
        self.in_prefetch = False
        self.evicted_active = 0
        self.evictions_checked = 0
        inner = self.cache.prefetch

        def prefetch(seconds):
            self.in_prefetch = True
            try:
                inner(seconds)
            finally:
                self.in_prefetch = False

        self.cache.prefetch = prefetch
        evict = self.cache._evict

        def checked_evict(node):
            self.check_victim(node)
            return evict(node)

        self.cache._evict = checked_evict

    def check_victim(self, node) -> None:
        self.evictions_checked += 1
        assert node.lock == 0, "a locked node was evicted"
        assert node.tier == DEVICE and node.n_dev_children == 0
        retired = self.cache.policy.is_retired(node)
        if not retired:
            self.evicted_active += 1
            if self.cache.policy.name in ("lae", "he", "pbkv"):
                # pbkv ranks shared retired cache (not finished private) with the oldest active
                # workflow's (its rule 5): outside the fallback only finished private cache must go first
                policy = self.cache.policy
                first = ((lambda n: n.sc.finished_private) if policy.name == "pbkv" and not policy.fallback
                         else (lambda n: True))
                waiting = [n for n in self.cache.tree.nodes() if n.tier == DEVICE and n.lock == 0
                           and n.n_dev_children == 0 and policy.is_retired(n) and first(n)]
                assert not waiting, "an active node was evicted while a retired evictable node existed"
            if self.in_prefetch and self.cache.policy.name in ("pbkv", "kvflow") and not self.cache.condemned(node):
                raise AssertionError("conservative prefetch evicted an active node eviction had not chosen")


def check_scores(eng: Engine, last_step: dict[str, int]) -> None:
    """Every node's incrementally kept Score(c) and one-step value equal PBKV Eq. 2 recomputed
    from scratch over the active workflows' latest predictions (policies that use predictions)."""
    if not eng.cache.policy.uses_predictions:
        return
    eng.workflows.flush()  # batched predictions since the last step apply now (as at the next step)
    from pbkv_contract.prediction import PredictionQuery
    from pbkv_server.engine import lookahead_score, one_step_value
    preds = {}
    for wf, step in last_step.items():
        if eng.workflow(wf) is not None:
            preds[wf] = HashPredictor().predict([PredictionQuery("app", wf, step, (), "x")])[0]
    for n in eng.cache.tree.nodes():
        assert n.sc.score == pytest.approx(lookahead_score(n.sc.access, preds, eng.config.gamma), abs=1e-9)
        assert n.sc.value == pytest.approx(one_step_value(n.sc.access, preds), abs=1e-9)


def check_invariants(eng: Engine) -> None:
    """Token accounting, capacities, prefix closure, child counts and lock counts."""
    nodes = list(eng.cache.tree.nodes())
    dev = sum(n.tokens for n in nodes if n.tier == DEVICE)
    host = sum(n.tokens for n in nodes if n.tier == HOST)
    assert (eng.cache.tree.device_tokens, eng.cache.tree.host_tokens, eng.cache.tree.n_nodes) == (dev, host, len(nodes))
    assert all(n.tokens == sum(n.toks) and len(n.keys) == len(n.toks) >= 1 for n in nodes)
    assert eng.stats.device_used_tokens == dev + eng.cache.reserved_tokens <= eng.cache.device_capacity
    assert host <= eng.cache.host_capacity
    expected_locks = {}
    for r in eng._running.values():
        node = r.end
        while node is not None and node.parent is not None:
            expected_locks[node.id] = expected_locks.get(node.id, 0) + 1
            node = node.parent
    for n in nodes:
        assert n.attached and n.parent.children[n.keys[0]] is n
        if n.tier == DEVICE:
            assert n.parent.tier == DEVICE, "device tier must be prefix-closed"
        assert n.n_dev_children == sum(c.tier == DEVICE for c in n.children.values())
        assert n.lock == expected_locks.get(n.id, 0)
    assert eng.cache.locked_device_tokens == sum(n.tokens for n in nodes if n.tier == DEVICE and n.lock)
    assert eng.cache.tree.root.n_dev_children == sum(c.tier == DEVICE for c in eng.cache.tree.root.children.values())


submit = st.tuples(st.just("submit"), st.integers(0, 3), st.sampled_from(AGENTS), st.integers(0, 4),
                   st.integers(0, 4), st.integers(1, 9))
ops = st.lists(st.one_of(submit, submit, st.tuples(st.just("step")), st.tuples(st.just("step")),
                         st.tuples(st.just("end"), st.integers(0, 2)),
                         st.tuples(st.just("idle"), st.integers(1, 50))), min_size=30, max_size=80)

#: Tokens of a block, fixed per block content (a chained key always has the same token count).
def block_tokens(label: str) -> int:
    return 2 + int(hashlib.blake2b(label.encode(), digest_size=1).hexdigest(), 16) % 10


# The baseline and the default policy in the fast lane, every other one slow (seconds each).
@pytest.mark.parametrize("policy", [p if p in (BASELINE_POLICY, DEFAULT_POLICY) else pytest.param(p, marks=pytest.mark.slow)
                                    for p in available_policies()])
@settings(max_examples=35, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=ops, host=st.sampled_from([0, 30, 200]), engine_model=st.sampled_from(["sglang", "legacy"]))
def test_random_operations_keep_cache_invariants(policy, ops, host, engine_model):
    """Device 100 tokens, blocks of 2-11 tokens (fixed per block), prompts of 4-13 blocks
    (shared system and agent blocks, per-workflow history, fresh blocks); workflow 3 means anonymous. After every operation
    the invariants of check_invariants hold; evictions obey CheckedEngine's rules; everything
    submitted finishes and every FirstToken splits its prompt into cached + prefilled tokens;
    scores stay equal to Eq. 2 recomputed from scratch (check_scores). Requests also carry the
    metadata other cache managers read (session = workflow, closed with it; priority 0/5/10;
    a 300 s cache TTL on odd outputs; the last step on the longest history; a speculative
    next-turn prefix), so session tags, priorities, TTL and tool-call pins and speculative
    prefills are exercised too. Both engine models: sglang (the default: KV grows a token a
    decode step, retraction) and legacy (the whole output reserved at admission)."""
    cfg = EngineConfig(profile=PROFILE, policy=policy, device_tokens=100, host_tokens=host,
                       predictor=HashPredictor(), future=HashOracle(), rho=0.3, idle_retire_s=0.5,
                       prefill_cost="linear", engine_model=engine_model)
    eng = CheckedEngine(cfg)
    eng.set_app_graph("app", {"plan": ["code"], "code": ["test"], "test": ["code", "plan"]})
    steps, last_step = {}, {}
    submitted, first, finished = set(), set(), set()
    for n, op in enumerate(ops):
        if op[0] == "submit":
            _, wf, agent, suffix, fresh, out = op
            labels = (["sys0", "sys1", f"{agent}-0", f"{agent}-1"] + [f"wf{wf}-{j}" for j in range(suffix)]
                      + [f"op{n}-{j}" for j in range(fresh)])
            hints = None
            if wf < 3:
                hints = Hints(f"wf{wf}", agent, steps.get(wf, 0), "app")
            rid = f"r{n}"
            toks = [block_tokens(x) for x in labels]
            nxt = labels + [f"reply{n}"]
            req = EngineRequest(rid, chain(labels), toks, out, hints, session_id=f"wf{wf}" if wf < 3 else None,
                                priority=5 * (n % 3), cache_ttl_s=300.0 if out % 2 else None, last_step=suffix == 4,
                                speculative_next=(chain(nxt), [block_tokens(x) for x in nxt]))
            if sum(toks) + out > eng.cache.device_capacity:
                with pytest.raises(ValueError, match="tokens of KV cache"):
                    eng.submit(req)
                continue
            eng.submit(req)
            submitted.add(rid)
            if hints is not None:  # only an accepted request is an invocation
                last_step[hints.workflow_id] = hints.step
                steps[wf] = hints.step + 1
        elif op[0] == "step":
            for e in eng.step():
                if type(e).__name__ == "FirstToken":
                    assert e.device_cached_tokens + e.host_cached_tokens <= e.prompt_tokens
                    first.add(e.request_id)
                else:
                    finished.add(e.request_id)
        elif op[0] == "end":
            eng.end_workflow(f"wf{op[1]}")
            eng.close_session(f"wf{op[1]}")
        else:
            eng.advance_to(eng.clock + op[1] / 100)
        check_invariants(eng)
        check_scores(eng, last_step)
    while eng.busy:
        for e in eng.step():
            (first if type(e).__name__ == "FirstToken" else finished).add(e.request_id)
        check_invariants(eng)
    assert first == finished == submitted
    for wf in range(3):
        eng.end_workflow(f"wf{wf}")
    check_invariants(eng)
    # with no workflow left, every node that a multi-step workflow touched is retired
    assert all(eng.cache.policy.is_retired(n) == n.sc.multi_step for n in eng.cache.tree.nodes())
    assert all(n.lock == 0 for n in eng.cache.tree.nodes())


@pytest.mark.parametrize("context", [False, True], ids=["per-sequence", "per-context-token"])
@pytest.mark.parametrize("policy", ["lru", "he", "lae"])
@settings(max_examples=30, deadline=None)
@given(reqs=st.lists(st.tuples(st.integers(0, 5), st.integers(1, 6), st.integers(1, 30)), min_size=1, max_size=25),
       arrivals=st.lists(st.integers(0, 40), min_size=25, max_size=25))
def test_decode_stretches_give_the_same_events_as_single_iterations(policy, context, reqs, arrivals):
    """Requests (shared prefix p, n fresh blocks of 10 tokens, output o) arrive at random times
    on a 100-token device. Advancing decode-only stretches in one go (step(until=next arrival))
    must give exactly the events, in order and time, of stepping one iteration at a time, also
    when the decode step grows with the running sequences' context (each step adds a token).
    Times are binary fractions (DYADIC profiles, arrivals in 1/64 s) so float sums are exact in
    both modes and the comparison tests the batching, not rounding."""
    def replay(single: bool):
        eng = make_engine_for(policy, DYADIC_CONTEXT if context else DYADIC)
        pending = sorted((arrivals[i] / 64, i) for i in range(len(reqs)))
        events = []
        while pending or eng.busy:
            while pending and pending[0][0] <= eng.clock:
                _, i = pending.pop(0)
                p, n, out = reqs[i]
                labels = [f"p{p}"] + [f"r{i}-{j}" for j in range(n)]
                eng.submit(EngineRequest(f"r{i}", chain(labels), [10] * len(labels), out,
                                         Hints(f"w{p}", "a", i, "app")))
            if not eng.busy:
                eng.advance_to(pending[0][0])
                continue
            nxt = pending[0][0] if pending else None
            # while a request waits, both modes step one iteration: a stretch does not yet re-check
            # admission as SGLang's estimate decays (known, test_a_stretch_skips_an_admission_...)
            events += [(type(e).__name__, e.request_id, round(e.time, 9))
                       for e in eng.step(eng.clock if single or eng._waiting else nxt)]
        assert eng._context == 0  # the running batch's context is released with its last request
        return events

    assert replay(False) == replay(True)


@pytest.mark.xfail(strict=True, reason="known: a decode-only stretch (engine model sglang) does not stop where "
                                      "the decaying new_token_ratio would admit a waiting request; the fix "
                                      "changes replay figures, so it lands with their regeneration")
def test_a_stretch_skips_an_admission_that_the_decaying_estimate_allows():
    """Found by the property test above (a CI run, 2026-12-04). SGLang re-checks admission every
    iteration, and its estimate of running outputs shrinks each step (``new_token_ratio`` decays,
    remaining outputs fall), so a waiting request can fit mid-decode. Stepping one iteration at a
    time admits r0 (50 tokens) while r3 decodes; one stretch to r3's finish admits it only then."""
    reqs = [(0, 4, 16), (0, 1, 19), (0, 2, 13), (0, 2, 25), (0, 1, 1), (0, 1, 1), (0, 1, 1), (0, 3, 4), (0, 2, 23)]
    arrivals = [2, 0, 1, 1, 0, 0, 0, 0, 0]

    def first_token_of_r0(single: bool) -> float:
        eng = make_engine_for("lru", DYADIC)
        pending = sorted((arrivals[i] / 64, i) for i in range(len(reqs)))
        while pending or eng.busy:
            while pending and pending[0][0] <= eng.clock:
                _, i = pending.pop(0)
                p, n, out = reqs[i]
                labels = [f"p{p}"] + [f"r{i}-{j}" for j in range(n)]
                eng.submit(EngineRequest(f"r{i}", chain(labels), [10] * len(labels), out, Hints(f"w{p}", "a", i, "app")))
            if not eng.busy:
                eng.advance_to(pending[0][0])
                continue
            for e in eng.step(eng.clock if single else (pending[0][0] if pending else None)):
                if type(e).__name__ == "FirstToken" and e.request_id == "r0":
                    return e.time
        raise AssertionError("r0 never started")

    assert first_token_of_r0(True) == 0.783203125  # admitted mid-decode of r3, one iteration at a time
    assert first_token_of_r0(False) == first_token_of_r0(True)


#: Every duration is a binary fraction: prefill 1/1024 s per token, decode 1/64 + batch/1024 s,
#: load 1/1024 s per token.
DYADIC = HardwareProfile(name="dyadic", description="exact-float test profile", source="tests",
                         prefill_tokens_per_s=1024.0, decode_base_s=1 / 64, decode_per_seq_s=1 / 1024,
                         pcie_bytes_per_s=1024.0 * 1024, kv_bytes_per_token=1024,
                         device_kv_tokens=100, host_kv_tokens=50)


#: DYADIC with the decode step growing by 1/65536 s per token of context the running batch holds.
DYADIC_CONTEXT = dataclasses.replace(DYADIC, decode_per_seq_s=0.0, decode_per_token_s=1 / 65536)


def make_engine_for(policy: str, profile: HardwareProfile = DYADIC) -> Engine:
    return Engine(EngineConfig(profile=profile, policy=policy, predictor=HashPredictor()))


def test_the_eviction_checks_see_every_eviction():
    """CheckedEngine's per-eviction checks are wired into the cache (a check that never runs would
    pass everything): on a 100-token device, twelve 30-token prompts evict, and every eviction
    went through the checks."""
    eng = CheckedEngine(EngineConfig(profile=PROFILE, policy="he", device_tokens=100, host_tokens=0,
                                     predictor=HashPredictor()))
    for i in range(12):
        eng.submit(EngineRequest(f"r{i}", chain([f"b{i}-{j}" for j in range(3)]), [10, 10, 10], 1,
                                 Hints(f"wf{i % 3}", "plan", i // 3, "app")))
        while eng.busy:
            eng.step()
    assert eng.stats.evictions > 0 and eng.evictions_checked == eng.stats.evictions
