"""Block identity: full-width chained hashes of an unambiguous serialisation (regression case 7 (b))."""

import hashlib
import json
import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pbkv_contract.blocks import CHAT_SEED, HASH_HEX, canonical_prompt, prefix_hashes

P1 = [{"role": "user", "content": "ab"}, {"role": "user", "content": "c"}]
P2 = [{"role": "user", "content": "a"}, {"role": "user", "content": "bc"}]
P3 = [{"role": "system", "content": canonical_prompt(P1)}]


def test_case_7b_three_prompts_get_pairwise_different_first_hashes():
    firsts = [prefix_hashes(p)[0] for p in (P1, P2, P3)]
    assert len(set(firsts)) == 3


def test_a_message_holding_the_delimiters_does_not_hash_like_two_messages():
    two = [{"role": "user", "content": "x"}, {"role": "user", "content": "y"}]
    injected = [{"role": "user", "content": "x<|end|><|user|>y"}]
    assert canonical_prompt(injected) != canonical_prompt(two)
    assert prefix_hashes(injected, 1000) != prefix_hashes(two, 1000)  # one block each
    # a role cannot close its own tag either
    assert canonical_prompt([{"role": "a|>b", "content": "c"}]) != canonical_prompt([{"role": "a", "content": "b|>c"}])


def test_ordinary_text_keeps_its_canonical_form_byte_for_byte():
    msgs = [{"role": "system", "content": "You are <b>|helpful|</b> \\ ok"}, {"role": "tool_call", "content": "q"}]
    assert canonical_prompt(msgs) == "<|system|>You are <b>|helpful|</b> \\ ok<|end|><|tool_call|>q<|end|>"


def test_lone_surrogates_in_roles_hash_and_stay_distinct():
    a, b = json.loads('"\\ud800"'), json.loads('"\\udc00"')
    assert prefix_hashes([{"role": a, "content": "x"}]) != prefix_hashes([{"role": b, "content": "x"}])


def test_a_completions_string_shares_no_block_with_the_chat_prompt_it_spells():
    text = canonical_prompt(P1)
    assert set(prefix_hashes(text, 8)).isdisjoint(prefix_hashes(P1, 8))


def test_hashes_are_full_width_and_match_a_hand_computed_chain():
    assert HASH_HEX == 64
    expected = hashlib.sha256(CHAT_SEED + b"<|user|>ab<|end|><|user|>c<|end|>").hexdigest()
    assert prefix_hashes(P1) == [expected]
    # pinned: the same on every process and machine (a hash of bytes, no per-process seed); a change
    # here changes every trace's block identity
    assert expected == "7bc1e81958079d0bccf31237215913f41cfeff86ed07d15790bfc58cbac6b3ba"


def test_hashes_are_identical_across_processes_with_different_hash_seeds():
    code = "from pbkv_contract.blocks import prefix_hashes; print(prefix_hashes([{'role': 'user', 'content': 'é' * 90}], 16))"
    outs = set()
    for seed in ("1", "2", "random"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        outs.add(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                check=True).stdout)
    assert len(outs) == 1
    assert outs.pop().strip() == str(prefix_hashes([{"role": "user", "content": "é" * 90}], 16))


_TEXT = st.text(alphabet=st.sampled_from(["a", "<", "|", ">", "\\", "e", "n", "d", "u", "s", "r", "é"]), max_size=12)
_MESSAGES = st.lists(st.fixed_dictionaries({"role": _TEXT, "content": _TEXT}), max_size=4)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(_MESSAGES, _MESSAGES)
def test_canonical_text_is_injective_on_message_lists(a, b):
    """Different message lists never serialise alike, however their texts use the delimiters."""
    assert (canonical_prompt(a) == canonical_prompt(b)) == (a == b)
