"""The policy ranking inside SGLang matches the simulator's engine core on the same operations.

The same requests (same token sharing, hints, predictor) and the same workflow end go to the
engine core (:class:`pbkv_server.engine.Engine`, one token per block) and to a real
``PBKVRadixCache``; then both evict everything one node at a time. The victim sequences must match.
A second trace (:data:`AGES`) is one on which ``pbkv``'s own rules (workflow ages, a waiting
request's cache) order differently from ``pbkv-paper``'s, so the plugin can match the engine core
there only if it feeds ``pbkv``'s lifecycle hooks.
"""

import pytest

pytest.importorskip("sglang.srt.plugins")  # the real SGLang, not this tests/sglang directory

from .conftest import TablePredictor  # noqa: E402

# (tokens, hints or None); tokens are unique per branch so a node is named by its first token.
OPS = [
    ([1, 2, 3, 4], ("wfA", "plan", 0)),
    ([1, 2, 5, 6], ("wfB", "plan", 0)),
    ([7, 8, 9], ("wfC", "code", 0)),
    ([1, 2, 3, 4, 10, 11], ("wfA", "code", 1)),
    ([12, 13], None),
    ([7, 8, 14], ("wfC", "test", 1)),
    ([15, 16, 17], ("wfD", "test", 0)),
    ([1, 2, 18], ("wfB", "code", 1)),
]
ENDED = ["wfB"]

# Two workflows of different ages, both active, with the same agents (so equal scores): ``pbkv``
# evicts the younger one's cache first (wfB: 8, then 4 once its child is gone), ``pbkv-paper``
# by score then LRU (wfA's older leaf 7 first). Anonymous 9 (score 0) goes first under both.
AGES = [
    ([1, 2, 3], ("wfA", "plan", 0)),
    ([4, 5, 6], ("wfB", "plan", 0)),
    ([1, 2, 3, 7], ("wfA", "code", 1)),
    ([4, 5, 6, 8], ("wfB", "code", 1)),
    ([9, 10], None),
]
# A request of wfB's agent ``plan`` submitted and not admitted: the cache plan touched ([4,5,6])
# ranks above every other active cache under ``pbkv`` (it is evicted last).
WAITING = [([4, 5, 6, 13], ("wfB", "plan", 2))]


def _engine_order(policy, ops=OPS, ended=ENDED, waiting=(), host=0):
    from pbkv_contract.hints import Hints
    from pbkv_server.engine import Engine, EngineConfig, EngineRequest, Finished, HardwareProfile

    profile = HardwareProfile(name="test", description="unit test", source="made up", prefill_tokens_per_s=1e3,
                              decode_base_s=0.01, decode_per_seq_s=0.001, pcie_bytes_per_s=1e9,
                              kv_bytes_per_token=1000, device_kv_tokens=1000, host_kv_tokens=0)
    engine = Engine(EngineConfig(profile=profile, policy=policy, predictor=TablePredictor(), gamma=0.7, horizon=3,
                                 host_tokens=host))
    for i, (tokens, hint) in enumerate(ops):
        hints = Hints(hint[0], hint[1], hint[2], "t") if hint else None
        engine.submit(EngineRequest(f"r{i}", tokens, [1] * len(tokens), 1, hints))
        while not any(isinstance(e, Finished) for e in engine.step()):
            pass
        engine.advance_to(engine.clock + 1.0)
    for wf in ended:
        engine.end_workflow(wf)
    for i, (tokens, hint) in enumerate(waiting):  # submitted, never stepped: they wait
        engine.submit(EngineRequest(f"w{i}", tokens, [1] * len(tokens), 1, Hints(hint[0], hint[1], hint[2], "t")))
    # their predictions, as the next step applies them before admitting anything (the plugin
    # predicts at arrival)
    engine.workflows.flush()
    order = []
    while (node := engine.cache.peek_victim()) is not None:
        order.append(node.keys[0])
        engine.cache.evict_device(node.tokens)
    return order


def _hint(hint):
    return {"workflow_id": hint[0], "agent": hint[1], "step": hint[2], "app": "t"} if hint else None


def _sglang_order(harness, policy, ops=OPS, ended=ENDED, waiting=(), host=False):
    h = harness(policy, kv_tokens=256)
    context = h.cache.tree_core.eviction_strategy.engine_policy.context
    assert context.host_capacity == 0  # the harness has no HiCache, and the cache reported none
    if host:
        context.host_capacity = 1  # what PBKVRadixCache reports when HiCache is on
    h.cache.book.predictor = TablePredictor()
    # the policy's clock steps 1 s per request, as the engine's above (rule 8 reads call times:
    # the wall clock's would make the order depend on how fast this machine serves)
    now = [0.0]
    context.attach(context.board, lambda: now[0])
    for tokens, hint in ops:
        h.serve(tokens, _hint(hint))
        now[0] += 1.0
    for wf in ended:
        h.cache.end_workflow(wf)
    for tokens, hint in waiting:  # queued by the scheduler, not admitted
        h.arrive(tokens, _hint(hint))
    return h.eviction_order()


@pytest.mark.parametrize("sglang_policy, engine_policy", [("pbkv-he", "he"), ("pbkv", "pbkv"), ("pbkv-lae", "lae")])
def test_sglang_eviction_order_equals_engine_core_order(harness, sglang_policy, engine_policy):
    engine = _engine_order(engine_policy)
    sglang = _sglang_order(harness, sglang_policy)
    assert sorted(engine) == sorted(sglang) == [1, 3, 5, 7, 9, 10, 12, 14, 15, 18]
    assert sglang == engine
    # wfB ended: its private nodes [5,6] and [18] are the first two victims under every PBKV rule
    assert set(sglang[:2]) == {5, 18}


def test_orders_differ_from_plain_lru(harness):
    """Guard against a vacuous match: SGLang's built-in LRU ranks these nodes differently."""
    h = harness("lru", kv_tokens=256)
    for tokens, _ in OPS:
        h.serve(tokens, None)
    assert h.eviction_order() != _sglang_order(harness, "pbkv-he")


# pbkv-paper's order (score, then LRU): with the waiting request wfB is predicted from ``plan``,
# so its [8] (0.789) outranks wfA's [1] (0.710), and its [4,5,6] (1.230) goes last.
PAPER = {False: [9, 7, 8, 1, 4], True: [9, 7, 1, 8, 4]}  # key: a request waits


# ``pbkv`` with rule 7: every call of AGES extends its workflow's previous prompt, so the app is a
# growing one and each workflow's live path scores its total weight whole; a waiting request of
# wfB (any agent) holds wfB's whole live path (8, 4) last, and wfA's (7, 1) leaves first.
LIVE = [9, 7, 1, 8, 4]
# Rule 8 with a host tier and no waiting request: both live paths rank by their conversation's
# estimated next call, latest first. By hand, with a clock that steps 1 s per
# request and calls served at once (durations 0): wfA's gap is 2 s (finish 0, call 2), so at its
# finish (2) the app's mean gap is 2 and wfA is due at 4; wfB's gap is 2 s too (finish 1, call
# 3): mean 2, due at 3 + 2 = 5. wfB is due later: its path (8, 4) leaves first, then wfA's (7, 1).
# (The engine's durations are milliseconds and change no comparison.) Rule 1 gives the same
# order (wfB is younger). Without a host tier rule 6 (score, then LRU) gives LIVE.
DUE = [9, 8, 4, 7, 1]


@pytest.mark.parametrize("host, waiting, expected", [
    (True, (), DUE),
    (True, WAITING, LIVE),
    (False, (), LIVE),
    (False, WAITING, LIVE)])
def test_pbkv_ages_and_waiting_requests_reach_the_plugin(harness, host, waiting, expected):
    """``pbkv``'s lifecycle state (ages from invocations, waiting requests from arrival and
    admission) is fed inside SGLang: the plugin evicts in the engine core's ``pbkv`` order, on a
    trace where that order is not ``pbkv-paper``'s: with a host tier (HiCache) the conversations
    rank by their estimated next call (rule 8, :data:`DUE`), without one by score then LRU (rule
    6), and a waiting request holds its conversation's whole live path last (rules 2 and 7,
    :data:`LIVE`)."""
    engine = _engine_order("pbkv", AGES, [], waiting, host=1000 if host else 0)
    assert engine == expected  # by hand: module comments of AGES and WAITING
    assert _engine_order("pbkv-paper", AGES, [], waiting) == PAPER[bool(waiting)]
    assert _sglang_order(harness, "pbkv", AGES, [], waiting, host=host) == engine


def test_the_radix_cache_reports_hicaches_host_pool():
    """What ``PBKVRadixCache`` tells ``pbkv`` of the host tier (its rule 6 reads only whether there
    is one): HiCache's host pool size, 1 if HiCache is on without a size, 0 without HiCache."""
    from types import SimpleNamespace

    from pbkv_server.backends.sglang.cache import PBKVRadixCache

    tokens = PBKVRadixCache._host_tokens
    assert tokens(SimpleNamespace(cache_controller=object(), token_to_kv_pool_host=SimpleNamespace(size=4096))) == 4096
    assert tokens(SimpleNamespace(cache_controller=object())) == 1
    assert tokens(SimpleNamespace(cache_controller=None, token_to_kv_pool_host=SimpleNamespace(size=4096))) == 0


# Rule 8 against rule 1 (with a host tier): wfB starts first (the older workflow), then wfA makes
# both its calls, then wfB its second. By hand, on the 1 s clock: wfA's gap 1 s (finish 1, call
# 2), mean 1 at its finish (2): due at 3; wfB's gap 3 s (finish 0, call 3), mean 2 at its finish
# (3): due at 5. wfB is due later and leaves first (:data:`DUE`), though rule 1 would evict the
# younger wfA first.
AGES_DUE = [AGES[1], AGES[0], AGES[2], AGES[3], AGES[4]]


def test_pbkv_rule_8_reaches_the_plugin(harness):
    """Ranking by next call (rule 8) needs the finish events inside the backend: the plugin
    matches the engine core on a trace where rule 8 and rule 1 disagree."""
    engine = _engine_order("pbkv", AGES_DUE, [], (), host=1000)
    assert engine == DUE
    assert _sglang_order(harness, "pbkv", AGES_DUE, [], (), host=True) == engine
