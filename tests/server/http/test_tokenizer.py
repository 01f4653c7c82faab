"""Offline token counting: counts by hand for known pieces, block accounting, truncation."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pbkv_contract.blocks import canonical_prompt, prefix_hashes
from pbkv_server.scenarios.tokenizer import (
    TokenBudgetExceeded,
    block_tokens,
    count_tokens,
    min_tokens,
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


def test_min_tokens_is_a_lower_bound_of_the_count():
    for text in ("", "a", "Hello, world!", " internationalization", "12345", "é" * 30, "x" * 700, "\n\n  \t"):
        assert min_tokens(text) <= count_tokens(text)
    assert min_tokens("x" * 700) == 100 and min_tokens("x" * 701) == 101


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=400))
def test_min_tokens_never_exceeds_the_count(text):
    assert min_tokens(text) <= count_tokens(text)


def test_block_tokens_within_budget_equals_the_unbudgeted_counts():
    messages = [{"role": "system", "content": "Rules. " * 50}, {"role": "user", "content": "Go."}]
    total = prompt_tokens(messages)
    assert block_tokens(messages, 64, budget=total) == block_tokens(messages, 64)
    with pytest.raises(TokenBudgetExceeded) as caught:
        block_tokens(messages, 64, budget=total - 1)
    assert caught.value.budget == total - 1 and caught.value.at_least > total - 1


def test_budget_refuses_before_tokenizing_a_message_that_cannot_fit(monkeypatch):
    import pbkv_server.scenarios.tokenizer as tokenizer

    tokenized: list[str] = []
    real = tokenizer.token_starts
    monkeypatch.setattr(tokenizer, "token_starts", lambda text: tokenized.append(text) or real(text))
    first = {"role": "system", "content": "short and new " + "q" * 11}
    huge = {"role": "user", "content": "z" * 7_000}  # >= 1,000 tokens by length alone
    with pytest.raises(TokenBudgetExceeded) as caught:
        block_tokens([first, huge], 64, budget=500)
    # The first message was tokenized (it fits); the second was refused on its length.
    assert len(tokenized) == 1 and "short and new" in tokenized[0]
    assert caught.value.at_least >= 1000
    with pytest.raises(TokenBudgetExceeded):
        block_tokens("y" * 3501, 64, budget=500)  # a plain prompt: 3,501 chars >= 501 tokens
    assert len(tokenized) == 1
