"""Replay keys of block hashes (``simulator._PathKeys``): the hash itself under the parent it was
first met under, ``HASH~n`` under its n-th other parent. Reusing the keys of the prefix a prompt
shares with the last one keyed must give the keys and collision count of keying every hash one by
one."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pbkv_server.sim.simulator import _PathKeys, _common_prefix


class _Reference:
    """The rule, hash by hash: a (parent key, hash) pair met before keeps its key; a new pair is
    keyed ``h`` if ``h`` had no parent yet, else ``h~n`` (n parents before it)."""

    def __init__(self) -> None:
        self.pairs: dict = {}
        self.parents: dict = {}
        self.colliding: set = set()

    def keys(self, hashes) -> list:
        out, parent = [], None
        for h in hashes:
            if (parent, h) not in self.pairs:
                n = self.parents.get(h, 0)
                self.parents[h] = n + 1
                if n:
                    self.colliding.add(h)
                self.pairs[(parent, h)] = f"{h}~{n}" if n else h
            parent = self.pairs[(parent, h)]
            out.append(parent)
        return out


def test_chained_prompts_keep_their_hashes_and_collisions_are_renamed():
    keys = _PathKeys()
    assert keys.keys(["a", "b", "c"]) == ["a", "b", "c"]
    assert keys.keys(("a", "b", "c", "d")) == ["a", "b", "c", "d"]  # the previous turn, extended
    assert keys.keys(["x", "b"]) == ["x", "b~1"]  # b under another parent
    assert keys.keys(["x", "b", "c"]) == ["x", "b~1", "c~1"]
    assert keys.keys(["a", "b", "c"]) == ["a", "b", "c"]
    assert keys.collisions == 2


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.sampled_from("abcdefg"), max_size=12), max_size=25))
def test_keys_equal_the_rule_applied_hash_by_hash(prompts):
    fast, ref = _PathKeys(), _Reference()
    for hashes in prompts:
        assert fast.keys(hashes) == ref.keys(hashes)
    assert fast.collisions == len(ref.colliding)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from("ab"), max_size=40), st.lists(st.sampled_from("ab"), max_size=40))
def test_common_prefix_counts_the_leading_items_both_share(a, b):
    expected = 0
    while expected < min(len(a), len(b)) and a[expected] == b[expected]:
        expected += 1
    assert _common_prefix(a, b) == expected
