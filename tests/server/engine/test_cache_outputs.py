"""``EngineConfig.cache_outputs``: a finished request leaves its output KV in the cache, as SGLang's
insert of prompt + output[:-1] does; off by default."""

from .engine_helpers import make_engine, request, run

from pbkv_contract.hints import Hints


def test_finished_output_stays_as_a_leaf_of_output_minus_one_tokens():
    eng = make_engine("lru", device=1000, cache_outputs=True)
    eng.submit(request("a", ["p1", "p2"], output=11))  # prompt 20 tokens
    run(eng)
    assert eng.cache.tree.device_tokens == 20 + 10
    # the next prompt extends the first one: it matches the prompt, never the output leaf
    eng.submit(request("b", ["p1", "p2", "p3"], output=1))
    hits = [ev.device_cached_tokens for ev in run(eng) if hasattr(ev, "device_cached_tokens")]
    assert hits == [20]
    assert eng.cache.tree.device_tokens == 30 + 10  # b's one output token has no KV to keep


def test_outputs_are_not_cached_by_default():
    eng = make_engine("lru", device=1000)
    eng.submit(request("a", ["p1", "p2"], output=11))
    run(eng)
    assert eng.cache.tree.device_tokens == 20


def test_an_active_workflows_output_outranks_an_ended_one_under_lae():
    """The output leaf is recorded for its workflow: once the (multi-step) workflow ends it is
    retired cache and goes first, like the prompt it hangs under (the plugin records the inserted
    path the same way)."""
    eng = make_engine("lae", device=60, cache_outputs=True)
    eng.submit(request("a", ["a1"], output=11, hints=Hints("wa", "x", 0)))  # 10 + 10 tokens
    eng.submit(request("b", ["b1"], output=11, hints=Hints("wb", "x", 0)))
    run(eng)
    eng.submit(request("b2", ["b1"], output=1, hints=Hints("wb", "y", 1)))  # a second step: wb is multi-step
    run(eng)
    eng.end_workflow("wb")  # the newer one ends: LRU alone would evict a's older cache first
    eng.submit(request("c", ["c1", "c2"], output=1))  # needs 20 + 1 of the 60 - 40 free: one leaf goes
    run(eng)
    out_nodes = {n.keys[0].split(":")[1] for n in eng.cache.tree.nodes() if n.keys and str(n.keys[0]).startswith("\x00out")}
    assert out_nodes == {"a"}


def test_with_pages_the_prompt_tail_and_output_fill_whole_pages_together():
    # prompt 20 tokens at page 8: 2 cached pages (16) and a 4-token tail; at finish SGLang inserts
    # prompt + output[:-1] = 30 tokens, whole pages only: 3 pages = 24, so the output adds one page.
    eng = make_engine("lru", device=1000, cache_outputs=True, page_size=8)
    eng.submit(request("a", ["p1", "p2"], output=11))
    run(eng)
    assert eng.cache.tree.device_tokens == 24
    # page 4: 5 prompt pages, no tail; output[:-1] = 10 tokens -> 2 whole pages (8)
    eng = make_engine("lru", device=1000, cache_outputs=True, page_size=4)
    eng.submit(request("a", ["p1", "p2"], output=11))
    run(eng)
    assert eng.cache.tree.device_tokens == 28
