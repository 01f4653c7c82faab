"""The trace load's fast paths (long prompts: thousands of blocks per call) give what the plain
rules give: a block-token list checked in C keeps the per-element rule's answers, and the common
prefix of two prompts found by bisection is the one counted element by element."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, strategies as st

from pbkv_contract.trace import parse_line
from pbkv_server.sim.simulator import _common_prefix


def _line(**fields) -> str:
    base = {"type": "invocation", "v": 1, "app": "a", "workflow_id": "w", "step": 0, "agent": "main",
            "t_start": 0.0, "t_end": 1.0, "prompt_tokens": 10, "completion_tokens": 2, "prefix_hashes": ["h0", "h1"]}
    base.update(fields)
    return json.dumps(base)


@pytest.mark.parametrize("tokens,kept", [
    ([64, 64, 3], [64, 64, 3]),  # ints: the fast path
    ([64.0, 64, 3], [64, 64, 3]),  # integral floats (other tools' writers) are read as ints
    ([64, 64, 0], [64, 64, 0]),  # an empty last block is a count >= 0
])
def test_block_tokens_read_as_ints(tokens, kept):
    rec = parse_line(_line(block_tokens=tokens, prefix_hashes=["h0", "h1", "h2"]))
    assert rec.block_tokens == kept and all(type(t) is int for t in rec.block_tokens)


@pytest.mark.parametrize("tokens", [[64, -1], [64, 2.5], [True, 3], [64, "3"], [64, None]])
def test_bad_block_tokens_are_read_as_unknown(tokens):
    notes: list = []
    rec = parse_line(_line(block_tokens=tokens), notes)
    assert rec.block_tokens is None and [f for f, _ in notes] == ["block_tokens"]


@pytest.mark.parametrize("hashes", [["h0", 1], ["h0", None]])
def test_a_hash_that_is_not_a_string_rejects_the_line(hashes):
    with pytest.raises(ValueError, match="prefix_hashes"):
        parse_line(_line(prefix_hashes=hashes))


def test_common_prefix_by_hand():
    assert _common_prefix([], [1]) == 0
    assert _common_prefix([1, 2, 3], [1, 2, 3, 4]) == 3  # the next prompt extends this one
    assert _common_prefix([1, 2, 3], [1, 2, 9, 4]) == 2  # only the last, partial block differs
    assert _common_prefix([1, 2, 3, 4, 5], [1, 9, 3, 4, 5]) == 1
    assert _common_prefix([7, 2], [1, 2]) == 0


@given(st.lists(st.integers(0, 3), max_size=30), st.lists(st.integers(0, 3), max_size=30))
def test_common_prefix_matches_an_element_walk(a, b):
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    assert _common_prefix(a, b) == n
