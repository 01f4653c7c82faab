"""Offline token counting: counts by hand for known pieces, block accounting, truncation."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pbkv_contract.blocks import canonical_prompt, prefix_hashes
from pbkv_server.tokenizer import (
    block_tokens,
    count_tokens,
    prompt_token_starts,
    prompt_tokens,
    token_starts,
    truncate_to_tokens,
)


def test_count_tokens_matches_hand_count_of_pieces():
    # Pieces: "Hello" "," " world" "!" -> 4 pieces of <= 7 bytes, 1 token each.
    assert count_tokens("Hello, world!") == 4
    # " internationalization" is 21 bytes of letters -> ceil(21 / 7) = 3 tokens.
    assert count_tokens(" internationalization") == 3
    # Digits split in groups of <= 3: "12345" -> "123" "45".
    assert count_tokens("12345") == 2
    assert count_tokens("") == 0


def test_token_starts_are_ascending_offsets_inside_the_text():
    text = "def f(x):\n    return x + 1  # internationalization"
    starts = token_starts(text)
    assert starts == sorted(starts)
    assert starts[0] == 0 and all(0 <= s < len(text) for s in starts)
    assert len(set(starts)) == len(starts)


def test_block_tokens_align_with_prefix_hashes_and_sum_to_prompt_tokens():
    messages = [{"role": "system", "content": "You are a careful verifier. " * 30},
                {"role": "user", "content": "Check the claim about the 1998 film."}]
    counts = block_tokens(messages, 64)
    assert len(counts) == len(prefix_hashes(messages, 64))
    # Chat prompts are tokenized per message segment: the total is the sum over segments.
    segments = [f"<|{m['role']}|>{m['content']}<|end|>" for m in messages]
    assert sum(counts) == prompt_tokens(messages) == sum(count_tokens(seg) for seg in segments)


def test_block_counts_match_a_direct_count_of_token_starts_per_block():
    messages = [{"role": "system", "content": "Rules: " + "be exact; " * 40},
                {"role": "user", "content": "Compute 12345 + 678 and explain."}]
    text = canonical_prompt(messages)
    offsets = []
    position = 0
    for m in messages:  # independent recomputation: tokenize each segment, shift, bucket by hand
        seg = f"<|{m['role']}|>{m['content']}<|end|>"
        offsets += [position + s for s in token_starts(seg)]
        position += len(seg)
    assert position == len(text) and prompt_token_starts(messages) == offsets
    expected = [0] * -(-len(text) // 50)
    for o in offsets:
        expected[o // 50] += 1
    assert block_tokens(messages, 50) == expected


def test_shared_prefix_blocks_get_the_same_counts():
    system = {"role": "system", "content": "Shared instructions for every agent of the app. " * 40}
    a = block_tokens([system, {"role": "user", "content": "first question"}])
    b = block_tokens([system, {"role": "user", "content": "a different, longer second question"}])
    shared = len(canonical_prompt([system])) // 64  # blocks wholly inside the shared system message
    assert shared > 10
    assert a[: shared - 1] == b[: shared - 1]


def test_truncate_to_tokens_returns_a_prefix_within_budget():
    text = "alpha beta gamma delta epsilon zeta eta theta"
    cut, n = truncate_to_tokens(text, 3)
    assert text.startswith(cut) and n == count_tokens(cut) and n <= 3
    assert cut == "alpha beta gamma"
    assert truncate_to_tokens(text, 100) == (text, count_tokens(text))
    with pytest.raises(ValueError):
        truncate_to_tokens(text, -1)


def test_block_tokens_rejects_bad_block_size():
    with pytest.raises(ValueError):
        block_tokens("abc", 0)


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=300), st.integers(min_value=1, max_value=80))
def test_block_counts_always_sum_to_token_count(text, block_chars):
    counts = block_tokens(text, block_chars)
    assert sum(counts) == count_tokens(text)
    assert len(counts) == len(prefix_hashes(text, block_chars))
