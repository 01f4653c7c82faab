"""``slru`` and ``tlru`` (SGLang's segmented LRU and Tail-Optimized LRU) on hand-built traces, each
against ``lru`` on the same trace. Profile and helpers: engine_helpers (prefill 1,000 tokens/s, so
``tlru``'s budget ``xi`` is 1,000 tokens; outputs of 1 token are not cached)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pbkv_server.engine.policies import policy_info

from .engine_helpers import chain, device_keys, make_engine, request, run


@pytest.mark.parametrize("policy,kept", [("lru", "B"), ("slru", "A")])
def test_slru_keeps_cache_matched_twice_over_more_recent_cache(policy, kept):
    """Device 60, 10 tokens a block. [A1 A2] is sent three times (inserted, then matched twice:
    2 hits, protected), then [B1 B2] once (0 hits, probationary, and more recent). An anonymous
    [R1 R2 R3] needs 31 tokens with 20 free: one 20-token node must go. lru evicts the least
    recently used, A; slru evicts the probationary B."""
    eng = make_engine(policy, device=60)
    for i in range(3):
        eng.submit(request(f"a{i}", ["A1", "A2"]))
        run(eng)
    eng.submit(request("b", ["B1", "B2"]))
    run(eng)
    eng.submit(request("r", ["R1", "R2", "R3"]))
    run(eng)
    other = "A" if kept == "B" else "B"
    dev = device_keys(eng)
    assert set(chain([f"{kept}1", f"{kept}2"])) <= dev
    assert not set(chain([f"{other}1", f"{other}2"])) & dev


def test_slru_counts_matches_not_inserts():
    eng = make_engine("slru", device=100)
    for i in range(3):
        eng.submit(request(f"a{i}", ["A1", "A2"]))
        run(eng)
        (node,) = [n for n in eng.cache.tree.nodes() if n.parent is not None]
        assert eng.cache.policy.hits(node) == i  # inserted with 0, then +1 per later match


@pytest.mark.parametrize("policy,evicted", [("lru", "b"), ("tlru", "a")])
def test_tlru_evicts_the_tail_a_next_prefill_recomputes_within_budget(policy, evicted):
    """200 tokens a block, xi = 1,000 tokens. Session s2 sends [b1..b6] once (1,200 tokens, one
    node). Session s1 sends [a1..a4] (800) then [a1..a6] (1,200): its prompt grew by 400, so
    Q_hat = 400. s1's leaf [a5 a6] spans tokens 800-1,200 of a history L = 1,200: B = 1,200 + 400
    - 1,000 = 600 <= 800, TEL-safe. s2's node starts at 0 < B (1,200 + 0 - 1,000 = 200 when it was
    filed): not safe. An anonymous [r1 r2] (400 + 1 reserved) on a device of 2,600 holding 2,400
    needs 201 tokens, two blocks: lru takes the tail of the least recently used leaf, [b5 b6];
    tlru takes the TEL-safe [a5 a6] though s1 used it last."""
    eng = make_engine(policy, device=2600)

    def send(rid, labels, session=None):
        eng.submit(replace(request(rid, labels, tokens_per_block=200), session_id=session))
        run(eng)

    send("s2.0", [f"b{i}" for i in range(1, 7)], "s2")
    send("s1.0", [f"a{i}" for i in range(1, 5)], "s1")
    send("s1.1", [f"a{i}" for i in range(1, 7)], "s1")
    if policy == "tlru":
        assert eng.cache.policy.next_prompt_estimate == 400
        assert eng.cache.policy.threshold == 1000
    send("r", ["r1", "r2"])
    dev = device_keys(eng)
    tails = {"a": chain([f"a{i}" for i in range(1, 7)])[4:], "b": chain([f"b{i}" for i in range(1, 7)])[4:]}
    assert not set(tails[evicted]) & dev
    kept = "a" if evicted == "b" else "b"
    assert set(tails[kept]) <= dev


def test_shipped_by_sglang():
    for name in ("tlru", "slru"):
        assert policy_info(name).shipped_by == frozenset({"sglang"})
