"""``RadixTree(path_keys=True)``: with keys that fix every key before them (a replay's), matching by a
node's last key and bisecting where it diverges finds the same matches and makes the same splits
as comparing key by key."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from pbkv_server.engine.radix import DEVICE, RadixTree


def _shape(tree: RadixTree) -> list:
    """Every node's keys, depth first in key order: the tree's whole structure."""
    out, stack = [], [tree.root]
    while stack:
        node = stack.pop()
        out.append(tuple(node.keys))
        stack.extend(node.children[k] for k in sorted(node.children, key=repr))
    return out


def _serve(tree: RadixTree, prompt: list) -> tuple:
    """Match ``prompt`` and insert what is missing; returns what the match found."""
    m = tree.match(prompt)
    if m.matched < len(prompt):
        parent = m.path[-1] if m.path else tree.root
        tree.insert(parent, prompt[m.matched:], [1] * (len(prompt) - m.matched), DEVICE, 0.0)
    return m.matched, [tuple(node.keys) for node in m.path]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.sampled_from("abc"), min_size=1, max_size=9), max_size=12))
def test_path_keys_match_and_split_as_key_by_key(prompts):
    # three letters: prompts share prefixes, diverge inside nodes and extend each other
    plain, fast = RadixTree(), RadixTree(path_keys=True)
    for labels in prompts:
        keys = [tuple(labels[:i + 1]) for i in range(len(labels))]  # path keys
        assert _serve(fast, list(keys)) == _serve(plain, list(keys))
        assert _shape(fast) == _shape(plain)


def test_a_divergence_inside_a_node_is_found_by_bisection():
    tree = RadixTree(path_keys=True)
    path = [tuple("abcdefgh"[:i + 1]) for i in range(8)]
    _serve(tree, path)
    other = path[:5] + [tuple("abcdeX"), tuple("abcdeXY")]
    m = tree.match(other)
    assert m.matched == 5 and [len(n.keys) for n in m.path] == [5]  # split after the fifth key
    assert tree.match(path[:3]).matched == 3  # a prompt shorter than the node: its last key is compared
