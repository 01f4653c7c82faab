"""``path_hit_rate``: the hit-rate ceiling of prompts keyed by path (``load_workload``'s keys),
found by bisection, equals the block-by-block count of :func:`infinite_cache_hit_rate` exactly."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from pbkv_contract.trace import read_trace
from pbkv_server.sim.ceiling import infinite_cache_hit_rate, path_hit_rate, workload_ceiling
from pbkv_server.sim.plain_client import without_hints
from pbkv_server.sim.simulator import Workload, load_workload
from pbkv_server.sim.synth.agents import write_trace


def _path_prompts(shapes):
    """Prompts whose keys are paths: key i is the tuple of the prompt's labels up to i."""
    prompts = []
    for labels, tokens in shapes:
        keys = [tuple(labels[:i + 1]) for i in range(len(labels))]
        prompts.append((keys, tokens))
    return prompts


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.lists(st.sampled_from("abc"), max_size=7),
                          st.lists(st.integers(0, 64), max_size=8)), max_size=10))
def test_bisection_equals_the_block_by_block_count(shapes):
    # labels from three letters: prompts share prefixes often, diverge and come back; token lists
    # of other lengths than the keys' exercise the pairs-only rule
    prompts = _path_prompts(shapes)
    assert path_hit_rate(prompts) == infinite_cache_hit_rate(prompts)


def test_a_hand_counted_case():
    # ab (4+4), abc (4+4+2): c new; a (4); abd (4+4+3): d new. 33 tokens, misses a4 b4 c2 d3 = 13
    prompts = _path_prompts([("ab", [4, 4]), ("abc", [4, 4, 2]), ("a", [4]), ("abd", [4, 4, 3])])
    assert path_hit_rate(prompts) == (33 - 13) / 33


def test_loaded_workloads_have_path_keys_and_the_same_ceiling(tmp_path):
    for graph in ("chat-mix", "codegen", "coding-agent"):
        path = tmp_path / f"{graph}.jsonl"
        write_trace(str(path), graph=graph, workflows=12, seed=5)
        wl = load_workload(read_trace(str(path)))
        assert wl.path_keys and without_hints(wl).path_keys
        prompts = [(r.blocks, r.block_tokens) for u in wl.units for r in u.requests]
        generic = infinite_cache_hit_rate(prompts)
        assert 0 < generic < 1, graph  # prompts share prefixes: the case is not trivial
        assert workload_ceiling(wl) == generic
        # a workload built by hand is not assumed to have path keys
        assert not Workload(wl.units).path_keys and workload_ceiling(Workload(wl.units)) == generic
