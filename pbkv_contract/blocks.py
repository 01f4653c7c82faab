"""Block identity of a prompt (trace format v1, ``prefix_hashes``): canonical text, chained hashes.

A prompt (chat messages or a completions string) is serialised to one canonical text and cut into
blocks of ``block_chars`` characters; block ``i`` is identified by a hash chained over every block
before it, so two prompts share their first ``n`` hashes exactly when they share their first ``n``
full blocks. The SDK (trace recording), the server (cache keys of live requests) and the simulator
(replay) all use these functions, so a replayed trace rebuilds the radix-tree sharing of the live
run. See ``docs/architecture.md``, "Trace format".
"""

from __future__ import annotations

import hashlib
from typing import Any, Mapping, Sequence

__all__ = ["DEFAULT_BLOCK_CHARS", "HASH_HEX", "canonical_prompt", "message_text", "prefix_hashes",
           "block_token_counts"]

#: Default number of characters per prefix-hash block.
DEFAULT_BLOCK_CHARS = 64
#: Hex digits kept of each chained block hash (64 bits: collisions are negligible per trace).
HASH_HEX = 16


def canonical_prompt(messages: Sequence[Mapping[str, Any]] | str) -> str:
    """Canonical serialisation of a prompt: each message as ``<|role|>content<|end|>`` in order.

    A plain string (completions API) is taken as is. Non-string content (OpenAI content parts)
    keeps only its text parts, in order.
    """
    if isinstance(messages, str):
        return messages
    parts = []
    for message in messages:
        parts.append(f"<|{message.get('role', 'user')}|>{message_text(message)}<|end|>")
    return "".join(parts)


def message_text(message: Mapping[str, Any]) -> str:
    """Text of one chat message; OpenAI content-part lists are joined by newlines."""
    content = message.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return str(content)


def prefix_hashes(prompt: Sequence[Mapping[str, Any]] | str, block_chars: int = DEFAULT_BLOCK_CHARS) -> list[str]:
    """Chained hashes of the canonical prompt cut into blocks of ``block_chars`` characters.

    ``h_i = sha256(h_{i-1} || block_i)`` truncated to 16 hex digits, with ``h_{-1}`` empty. The
    last block may be shorter than ``block_chars``. Two prompts share their first ``n`` hashes
    exactly when their canonical texts share the first ``n`` full blocks, so the radix tree built
    from hashes has the sharing of the tree built from text.

    Returns:
        ``ceil(len(text) / block_chars)`` hex strings.

    Raises:
        ValueError: ``block_chars`` < 1.
    """
    if block_chars < 1:
        raise ValueError("block_chars must be >= 1")
    text = canonical_prompt(prompt)
    out: list[str] = []
    prev = b""
    for i in range(0, len(text), block_chars):
        # surrogatepass: JSON may carry lone surrogates ("\ud800"); they must hash, not crash.
        block = text[i : i + block_chars].encode("utf-8", "surrogatepass")
        prev = hashlib.sha256(prev + block).hexdigest()[:HASH_HEX].encode()
        out.append(prev.decode())
    return out


def block_token_counts(prompt_tokens: int, n_blocks: int) -> list[int]:
    """Spread ``prompt_tokens`` over ``n_blocks`` blocks: block i gets floor((i+1)T/n) - floor(iT/n).

    Used when replaying a trace, whose blocks carry no token counts of their own. The counts sum
    to ``prompt_tokens`` exactly.
    """
    if n_blocks <= 0:
        return []
    return [((i + 1) * prompt_tokens) // n_blocks - (i * prompt_tokens) // n_blocks for i in range(n_blocks)]

