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
