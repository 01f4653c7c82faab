"""The engine's fast read of uniform block token counts (``engine._uniform_least``) against the
general check it skips: it answers only for a list of ints, and then with their least."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pbkv_server.engine.engine import _uniform_least

# counts as a client may send them: ints, and things equal to an int that are not ints
_ODD = st.sampled_from([64.0, True, False, np.int64(64), Decimal(64), Fraction(64), 1.0, 2.0])
_COUNT = st.one_of(st.integers(-3, 70), st.sampled_from([64, 64, 64, 2, 1, 0]), _ODD)


def _general(toks):
    """The least count if every count is exactly an int (the general check's fast case), else None."""
    if type(toks) is not list or any(type(t) is not int for t in toks):
        return None
    return min(toks, default=1)


@settings(max_examples=600, deadline=None)
@given(size=st.sampled_from([64, 2, 1, 0, 300, 64.0, True]), n=st.integers(1, 40), last=_COUNT,
       odd=st.lists(st.tuples(st.integers(0, 39), _COUNT), max_size=3))
def test_answers_only_for_ints_and_then_their_least(size, n, last, odd):
    toks = [size] * (n - 1) + [last]
    for i, value in odd:
        if i < n - 1:
            toks[i] = value
    got = _uniform_least(toks)
    if got is not None:
        assert got == _general(toks) and type(got) is int
        assert len(set(toks[:-1])) <= 1  # one block size, the last block possibly another


def test_the_shapes_it_reads_and_those_it_leaves():
    big = 1000  # not a cached small int: equal values, distinct objects
    assert _uniform_least([64] * 5 + [17]) == 17
    assert _uniform_least([64] * 6) == 64
    assert _uniform_least([int(str(big)) for _ in range(4)]) == big
    assert _uniform_least([64, 64, 0]) == 0 and _uniform_least([64, -1]) == -1  # the caller refuses these
    assert _uniform_least([64, 64.0, 17]) is None  # a float equal to the size
    assert _uniform_least([64, np.int64(64), 17]) is None
    assert _uniform_least([64, 17, 64]) is None  # the short block is not the last
    assert _uniform_least([64, 64, True]) is None and _uniform_least([1, True, 1]) is None
    assert _uniform_least((64, 64)) is None and _uniform_least([]) is None


def test_uniform_sums_read_as_the_list_of_running_sums():
    from itertools import accumulate

    from pbkv_server.engine.acquire import UniformSums

    for n, size, last in ((1, 64, 17), (1, 64, 64), (5, 64, 17), (4, 10, 13), (3, 2, 0)):
        sums = UniformSums(n, size, last)
        want = [0, *accumulate([size] * (n - 1) + [last])]
        assert [sums[k] for k in range(len(sums))] == want and sums == want
        assert [sums[-k] for k in range(1, len(sums) + 1)] == want[::-1] and sums.total == want[-1]
    assert UniformSums(3, 64, 17) != [0, 64, 128, 146]
    import pytest
    with pytest.raises(IndexError):
        UniformSums(2, 64, 17)[3]


@settings(max_examples=60, deadline=None)
@given(size=st.sampled_from([2, 10, 64]), policy=st.sampled_from(["lru", "pbkv", "he"]),
       host=st.sampled_from([0, 1000]),
       prompts=st.lists(st.tuples(st.integers(0, 2), st.integers(1, 12), st.integers(0, 70)), min_size=1, max_size=12))
def test_an_engine_serves_uniform_counts_as_it_serves_the_same_counts_checked_one_by_one(size, policy, host, prompts):
    """Prompts of three conversations, each a prefix of its longer ones (hits, splits, evictions
    to the host and back): counts sent as a list take the uniform read (UniformSums in the
    cache); the same counts as a tuple take the general one (a list of sums). Same events, same
    figures."""
    from pbkv_contract.hints import Hints
    from pbkv_server.engine import EngineRequest

    from .engine_helpers import chain, make_engine, run

    def serve(as_tuple: bool):
        eng = make_engine(policy, device=2000, host=host)
        events = []
        for i, (conv, n, last) in enumerate(prompts):
            keys = chain([conv, *range(n)])
            toks = [size] * n + [min(last, 3 * size) or 1]
            eng.submit(EngineRequest(f"r{i}", keys, tuple(toks) if as_tuple else toks, 2,
                                     Hints(workflow_id=f"w{conv}", agent="a", step=i)))
            events += [(type(e).__name__, e.request_id, round(e.time, 9), getattr(e, "device_cached_tokens", None),
                        getattr(e, "host_cached_tokens", None)) for e in run(eng)]
        s = eng.stats
        return events, (s.prompt_tokens, s.device_hit_tokens, s.host_hit_tokens, s.evictions, s.evicted_tokens)

    assert serve(False) == serve(True)
