"""The order inside vLLM's block pool matches the simulator's engine core on the same operations.

The same requests (same block sharing, hints, predictor) and the same workflow end go to the
engine core (:class:`pbkv_server.engine.Engine` with 16-token pages, so a prompt's last partial
page is not cached, as in vLLM) and to a real vLLM ``KVCacheManager`` with the PBKV block pool
(block size 16); then both evict everything. The engine evicts whole nodes (runs of pages), vLLM
one block at a time: the engine's victims, each node's blocks leaf first, must equal vLLM's.
A second trace (:data:`AGES`) is one on which ``pbkv``'s own rules (workflow ages, a waiting
request's cache) order differently from ``pbkv-paper``'s, so the plugin can match the engine core
there only if it feeds ``pbkv``'s lifecycle hooks.
"""

import pytest

pytest.importorskip("vllm.v1.core.block_pool")  # the real vLLM, not this tests/vllm directory

from .conftest import BLOCK, TablePredictor, block_tokens  # noqa: E402

# (block labels, hints or None); a label is unique per block, so a block is named by it.
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
TAIL = 3  # tokens after the last whole block of every prompt: never cached by either

# Two workflows of different ages, both active, with the same agents (so equal scores): ``pbkv``
# evicts the younger one's cache first (wfB: 8, then 6, 5, 4), ``pbkv-paper`` by score then LRU
# (wfA's older leaf 7 first). Anonymous 10, 9 (score 0) go first under both.
AGES = [
    ([1, 2, 3], ("wfA", "plan", 0)),
    ([4, 5, 6], ("wfB", "plan", 0)),
    ([1, 2, 3, 7], ("wfA", "code", 1)),
    ([4, 5, 6, 8], ("wfB", "code", 1)),
    ([9, 10], None),
]
# A request of wfB's agent ``plan`` submitted and not admitted: the blocks plan touched
# ([4,5,6]) rank above every other active cache under ``pbkv`` (they are evicted last).
WAITING = [([4, 5, 6, 13], ("wfB", "plan", 2))]


def _engine_order(policy, ops=OPS, ended=ENDED, waiting=(), host=0):
    from pbkv_contract.hints import Hints
    from pbkv_server.engine import Engine, EngineConfig, EngineRequest, Finished, HardwareProfile

    profile = HardwareProfile(name="test", description="unit test", source="made up", prefill_tokens_per_s=1e3,
                              decode_base_s=0.01, decode_per_seq_s=0.001, pcie_bytes_per_s=1e9,
                              kv_bytes_per_token=1000, device_kv_tokens=10_000, host_kv_tokens=0)
    engine = Engine(EngineConfig(profile=profile, policy=policy, predictor=TablePredictor(), gamma=0.7, horizon=3,
                                 page_size=BLOCK, host_tokens=host))
    for i, (labels, hint) in enumerate(ops):
        hints = Hints(hint[0], hint[1], hint[2], "t") if hint else None
        blocks = [*labels, ("tail", i)]
        engine.submit(EngineRequest(f"r{i}", blocks, [BLOCK] * len(labels) + [TAIL], 1, hints))
        while not any(isinstance(e, Finished) for e in engine.step()):
            pass
        engine.advance_to(engine.clock + 1.0)
    for wf in ended:
        engine.end_workflow(wf)
    for i, (labels, hint) in enumerate(waiting):  # submitted, never stepped: they wait
        engine.submit(EngineRequest(f"w{i}", [*labels, ("wtail", i)], [BLOCK] * len(labels) + [TAIL], 1,
                                    Hints(hint[0], hint[1], hint[2], "t")))
    # their predictions, as the next step applies them before admitting anything (the plugin
    # predicts at arrival)
    engine.workflows.flush()
    order = []
    while (node := engine.cache.peek_victim()) is not None:
        order += [key[0] for key in reversed(node.keys)]  # page key: (block label, offset)
        engine.cache.evict_device(node.tokens)
    return order


def _hint(hint):
    return {"workflow_id": hint[0], "agent": hint[1], "step": hint[2], "app": "t"} if hint else None


def _vllm_order(harness, policy, ops=OPS, ended=ENDED, waiting=(), host=False):
    h = harness(policy, num_blocks=64, predictor=TablePredictor())
    context = h.runtime.policy.context
    assert context.host_capacity == 0  # no CPU offload tier was built
    if host:
        context.host_capacity = 1  # what PBKVCachePolicy reports when vLLM builds the tier
    # the policy's clock steps 1 s per request, as the engine's above (rule 8 reads call times:
    # the wall clock's would make the order depend on how fast this machine serves)
    now = [0.0]
    context.attach(context.board, lambda: now[0])
    for labels, hint in ops:
        h.serve(block_tokens(labels, tail=TAIL), _hint(hint))
        now[0] += 1.0
    for wf in ended:
        h.runtime.end_workflow(wf)
    for labels, hint in waiting:  # added to vLLM's waiting queue, not scheduled
        h.arrive(block_tokens(labels, tail=TAIL), _hint(hint))
    return h.eviction_order()


@pytest.mark.parametrize("vllm_policy, engine_policy", [("pbkv-he", "he"), ("pbkv", "pbkv"), ("pbkv-lae", "lae")])
def test_vllm_eviction_order_equals_engine_core_order(harness, vllm_policy, engine_policy):
    engine = _engine_order(engine_policy)
    vllm = _vllm_order(harness, vllm_policy)
    assert sorted(engine) == sorted(vllm) == list(range(1, 19))
    assert vllm == engine
    # wfB ended: its private blocks 6, 5 and 18 are the first three victims under every PBKV rule
    assert set(vllm[:3]) == {5, 6, 18}


def test_orders_differ_from_vllm_lru(harness):
    """Guard against a vacuous match: vLLM's own pool ranks these blocks differently."""
    h = harness(None, num_blocks=64)
    for labels, _ in OPS:
        h.serve(block_tokens(labels, tail=TAIL), None)
    assert h.eviction_order() != _vllm_order(harness, "pbkv-he")


# pbkv-paper's order (score, then LRU): with the waiting request wfB is predicted from ``plan``,
# so its [8] (0.789) outranks wfA's [1,2,3] (0.710), and its [4,5,6] (1.230) goes last.
PAPER = {False: [10, 9, 7, 8, 3, 2, 1, 6, 5, 4], True: [10, 9, 7, 3, 2, 1, 8, 6, 5, 4]}  # key: a request waits


# ``pbkv`` with rule 7: every call of AGES extends its workflow's previous prompt, so the app is a
# growing one and each workflow's live path ([1,2,3,7], [4,5,6,8]) scores the workflow's total
# weight whole (no leaf below its prefix). A waiting request of wfB (any agent) holds wfB's whole
# live path, 8 included, last; wfA's leaves first, whole.
LIVE = [10, 9, 7, 3, 2, 1, 8, 6, 5, 4]
# Rule 8 with a host tier and no waiting request: both live paths rank by their conversation's
# estimated next call, latest first. By hand, with a clock that steps 1 s per
# request and calls served at once (durations 0): wfA's gap is 2 s (finish 0, call 2), so at its
# finish (2) the app's mean gap is 2 and wfA is due at 4; wfB's gap is 2 s too (finish 1, call
# 3): mean 2, due at 3 + 2 = 5. wfB is due later: its path (8, 6, 5, 4) leaves first, then
# wfA's. (The engine's durations are milliseconds and change no comparison.) Rule 1 gives the
# same order (wfB is younger). Without a host tier rule 6 (score, then LRU) gives LIVE.
DUE = [10, 9, 8, 6, 5, 4, 7, 3, 2, 1]


@pytest.mark.parametrize("host, waiting, expected", [
    (True, (), DUE), (True, WAITING, LIVE),
    (False, (), LIVE), (False, WAITING, LIVE)])
def test_pbkv_ages_and_waiting_requests_reach_the_plugin(harness, host, waiting, expected):
    """``pbkv``'s lifecycle state (ages from invocations, waiting requests from arrival and
    admission) is fed inside vLLM: the block pool evicts in the engine core's ``pbkv`` order, on a
    trace where that order is not ``pbkv-paper``'s: with a host tier (the CPU offload tier) the
    conversations rank by their estimated next call (rule 8, :data:`DUE`), without one by score
    then LRU (rule 6), and a waiting request holds its conversation's whole live path last (rules
    2 and 7, :data:`LIVE`)."""
    engine = _engine_order("pbkv", AGES, [], waiting, host=1000 if host else 0)
    assert engine == expected  # by hand: module comments of AGES and WAITING
    assert _engine_order("pbkv-paper", AGES, [], waiting) == PAPER[bool(waiting)]
    assert _vllm_order(harness, "pbkv", AGES, [], waiting, host=host) == engine


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
    assert _vllm_order(harness, "pbkv", AGES_DUE, [], (), host=True) == engine
