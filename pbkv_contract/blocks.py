"""Block identity of a prompt (trace format v1, ``prefix_hashes``): canonical text, chained hashes.

A prompt (chat messages or a completions string) is serialised to one canonical text and cut into
blocks of ``block_chars`` characters; block ``i`` is identified by a full-width SHA-256 hash chained
over every block before it, so two prompts share their first ``n`` hashes exactly when they share
their first ``n`` full blocks (up to SHA-256 collisions: below 2^-170 even among 10^12 blocks). The SDK (trace recording), the server (cache keys of live requests) and the
simulator (replay) all use these functions, so a replayed trace rebuilds the radix-tree sharing of
the live run.

The canonical text is unambiguous: each message is ``<|ROLE|>CONTENT<|end|>`` with ROLE
percent-encoded and every ``<|`` inside CONTENT escaped (``<\\|``, one more backslash for a run of
them), so no content can close its message early and two different message lists never serialise
to the same text (a user message that contains ``<|end|><|user|>`` does not read as two messages).
Ordinary text, with neither ``<|`` in the content nor unusual characters in the role, is kept
byte for byte. Completions prompts (plain strings) are a different kind of prompt from chat
messages, so their hash chain starts from a different seed (:data:`CHAT_SEED`, :data:`TEXT_SEED`):
a completions string equal to a chat prompt's canonical text shares no block with it.

Hashes depend only on the text (UTF-8 bytes, lone surrogates kept), never on the process, the
platform or ``PYTHONHASHSEED``.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Mapping, Sequence
from urllib.parse import quote

__all__ = ["DEFAULT_BLOCK_CHARS", "HASH_HEX", "CHAT_SEED", "TEXT_SEED", "canonical_prompt", "message_segment",
           "message_text", "prefix_hashes", "chain_hash", "block_token_counts", "SEGMENT_SEED", "segment_prefix_hashes"]

#: Default number of characters per prefix-hash block.
DEFAULT_BLOCK_CHARS = 64
#: Hex digits of each chained block hash: the full SHA-256 digest (256 bits), never truncated.
HASH_HEX = 64
#: Chain seeds (the ``h_{-1}`` of :func:`prefix_hashes`) of chat prompts and of plain-text prompts.
CHAT_SEED = b"pbkv-chat-v1"
TEXT_SEED = b"pbkv-text-v1"
#: Chain seed of prompts known only as segments with token counts (:func:`segment_prefix_hashes`).
SEGMENT_SEED = b"pbkv-segments-v1"

# "<" followed by any run of backslashes and "|": escaping adds one backslash, so the escaped text
# holds no "<|" at all and the escape is undone by removing one backslash from each such run.
_OPENER = re.compile(r"<(\\*)\|")


def canonical_prompt(messages: Sequence[Mapping[str, Any]] | str) -> str:
    """Canonical serialisation of a prompt: the :func:`message_segment` of each message, in order.

    A plain string (completions API) is taken as is. Non-string content (OpenAI content parts)
    keeps only its text parts, in order.
    """
    if isinstance(messages, str):
        return messages
    return "".join(message_segment(message) for message in messages)


def message_segment(message: Mapping[str, Any]) -> str:
    """One message's part of the canonical text: ``<|ROLE|>CONTENT<|end|>``, escaped.

    ROLE (``"user"`` if missing) is percent-encoded (``user``, ``system``, ``tool_call`` stay as
    they are), CONTENT is :func:`message_text` with each ``<`` + backslashes + ``|`` given one more
    backslash. The server's tokenizer counts tokens per segment, so it uses this function too.
    """
    # surrogatepass: a lone surrogate (from JSON) must encode, as in the hashed text
    role = quote(str(message.get("role", "user")).encode("utf-8", "surrogatepass"), safe="_-.~")
    content = _OPENER.sub(lambda m: "<\\" + m.group(1) + "|", message_text(message))
    return f"<|{role}|>{content}<|end|>"


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

    ``h_i = sha256(h_{i-1} || utf8(block_i))`` as 64 hex digits (:func:`chain_hash`), with
    ``h_{-1}`` = :data:`CHAT_SEED` for chat messages and :data:`TEXT_SEED` for a plain string. The
    last block may be shorter than ``block_chars``. Two prompts share their first ``n`` hashes
    exactly when their canonical texts share the first ``n`` full blocks, so the radix tree built
    from hashes has the sharing of the tree built from text.

    Returns:
        ``ceil(len(text) / block_chars)`` hex strings of :data:`HASH_HEX` digits.

    Raises:
        ValueError: ``block_chars`` < 1.
    """
    if block_chars < 1:
        raise ValueError("block_chars must be >= 1")
    text = canonical_prompt(prompt)
    out: list[str] = []
    prev = TEXT_SEED if isinstance(prompt, str) else CHAT_SEED
    for i in range(0, len(text), block_chars):
        # surrogatepass: JSON may carry lone surrogates ("\ud800"); they must hash, not crash.
        digest = chain_hash(prev, text[i : i + block_chars].encode("utf-8", "surrogatepass"))
        out.append(digest)
        prev = digest.encode()
    return out


def chain_hash(prev: bytes, block: bytes) -> str:
    """One link of a hash chain: ``sha256(prev || block)`` as :data:`HASH_HEX` hex digits.

    ``prev`` is the previous link's hex digits (ASCII bytes) or the chain's seed. The synthetic
    trace generator (``pbkv_server.sim.synth.agents``) chains its own block descriptions with it, so its
    hashes have the width and the chaining of real ones.
    """
    return hashlib.sha256(prev + block).hexdigest()[:HASH_HEX]


def block_token_counts(prompt_tokens: int, n_blocks: int) -> list[int]:
    """Spread ``prompt_tokens`` over ``n_blocks`` blocks: block i gets floor((i+1)T/n) - floor(iT/n).

    Used when replaying a trace, whose blocks carry no token counts of their own. The counts sum
    to ``prompt_tokens`` exactly.
    """
    if n_blocks <= 0:
        return []
    return [((i + 1) * prompt_tokens) // n_blocks - (i * prompt_tokens) // n_blocks for i in range(n_blocks)]


def segment_prefix_hashes(segments: Sequence[tuple[str, int]], block_tokens: int) -> tuple[list[str], list[int]]:
    """Chained block hashes of a prompt known only as segments ``(identity key, tokens)``.

    For traces that record a prompt's structure but not its text (the GitHub Copilot coding-agent
    release's ``message_metadata``): the segments are laid end to end and cut into blocks of
    ``block_tokens`` tokens; block b's hash is ``sha256(h_{b-1} || pieces)`` (:func:`chain_hash`,
    ``h_{-1}`` = :data:`SEGMENT_SEED`), where ``pieces`` names the (key, offset, length) runs it
    holds. Two prompts share their first n hashes exactly when their first n blocks hold the same
    runs of the same keys: segments with equal keys stand for equal text. Keys must not contain
    ``|`` or ``@`` (they are escaped when they do).

    Returns:
        ``(hashes, tokens per block)``; the last block may hold fewer than ``block_tokens``;
        zero-token segments add nothing.

    Raises:
        ValueError: ``block_tokens`` < 1 or a negative segment length.
    """
    if block_tokens < 1:
        raise ValueError("block_tokens must be >= 1")
    hashes: list[str] = []
    counts: list[int] = []
    prev, pieces, fill = SEGMENT_SEED, [], 0
    for key, n in segments:
        if n < 0:
            raise ValueError(f"segment {key!r} has a negative length {n}")
        key = key.replace("%", "%25").replace("|", "%7C").replace("@", "%40")
        off = 0
        while off < n:
            take = min(n - off, block_tokens - fill)
            pieces.append(f"{key}@{off}+{take}")
            off += take
            fill += take
            if fill == block_tokens:
                digest = chain_hash(prev, "|".join(pieces).encode("utf-8", "surrogatepass"))
                hashes.append(digest)
                counts.append(fill)
                prev, pieces, fill = digest.encode(), [], 0
    if pieces:
        hashes.append(chain_hash(prev, "|".join(pieces).encode("utf-8", "surrogatepass")))
        counts.append(fill)
    return hashes, counts
