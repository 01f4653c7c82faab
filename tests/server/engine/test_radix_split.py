"""RadixTree.split: the parts, their tokens and links, whichever part keeps the node's lists."""

import pytest

from pbkv_server.engine.radix import DEVICE, HOST, RadixTree


def _chain(tier=DEVICE):
    tree = RadixTree()
    node = tree.insert(tree.root, ["a", "b", "c", "d", "e"], [1, 2, 3, 4, 5], tier, 7.0)
    return tree, node


@pytest.mark.parametrize("j, top_keys, top_tokens, rest_keys, rest_tokens", [
    (4, ["a", "b", "c", "d"], 10, ["e"], 5),  # the top is the longer part
    (1, ["a"], 1, ["b", "c", "d", "e"], 14),  # the rest is the longer part
    (2, ["a", "b"], 3, ["c", "d", "e"], 12),
    (3, ["a", "b", "c"], 6, ["d", "e"], 9),
])
def test_split_cuts_keys_tokens_and_links(j, top_keys, top_tokens, rest_keys, rest_tokens):
    tree, node = _chain()
    top = tree.split(node, j)
    assert (top.keys, top.toks, top.tokens) == (top_keys, [1, 2, 3, 4, 5][:j], top_tokens)
    assert (node.keys, node.toks, node.tokens) == (rest_keys, [1, 2, 3, 4, 5][j:], rest_tokens)
    assert tree.root.children == {"a": top} and top.children == {rest_keys[0]: node}
    assert node.parent is top and top.parent is tree.root and top.n_dev_children == 1
    assert top.last_access == 7.0 and tree.n_nodes == 2 and tree.device_tokens == 15


def test_split_parts_do_not_share_lists():
    tree, node = _chain(HOST)
    top = tree.split(node, 4)
    top.keys.append("x")  # a later change to one part (none is made in place but a cut) stays there
    assert node.keys == ["e"] and top.n_dev_children == 0
    again = tree.split(top, 1)
    assert (again.keys, top.keys, node.keys) == (["a"], ["b", "c", "d", "x"], ["e"])


def test_shift_units_and_absorb_move_units_down_in_place():
    """shift_units moves a node's last units to the front of its only child (across tiers, the
    tokens change tier with them); absorb moves all of them. The lists stay each node's own."""
    tree = RadixTree()
    node = tree.insert(tree.root, ["a", "b", "c", "d"], [1, 2, 3, 4], DEVICE, 1.0)
    child = tree.insert(node, ["e", "f"], [5, 6], HOST, 1.0)
    assert tree.shift_units(node, child, 2) == 7
    assert (node.keys, node.toks, node.tokens) == (["a", "b"], [1, 2], 3)
    assert (child.keys, child.toks, child.tokens, child.frag) == (["c", "d", "e", "f"], [3, 4, 5, 6], 18, True)
    assert node.children == {"c": child} and (tree.device_tokens, tree.host_tokens) == (3, 18)
    assert tree.absorb(node, child) == 3
    assert (child.keys, child.toks, child.tokens) == (["a", "b", "c", "d", "e", "f"], [1, 2, 3, 4, 5, 6], 21)
    assert tree.root.children == {"a": child} and child.parent is tree.root and not node.attached
    assert (tree.device_tokens, tree.host_tokens) == (0, 21) and tree.root.n_dev_children == 0
    assert child.keys is not node.keys and child.toks is not node.toks
