"""Hardware cost model of one serving replica (``docs/architecture.md``, "Cost model").

A :class:`HardwareProfile` turns work into engine seconds: prefill throughput (tokens/s), decode
step time as an affine function of the batch size and of the context the running sequences hold,
and host<->device copies over PCIe. Named instances live in :mod:`pbkv_server.hardware.profiles`; each
cites where its numbers come from.

Prefill has two terms (``docs/cost-model.md``): the linear one, ``n / prefill_tokens_per_s`` (the
weights' FLOPs, 2 per active parameter and token), and the attention one, which grows with the
context each new token attends to: causal attention of ``n`` new tokens over ``c`` cached ones
computes ``QK^T`` and ``PV`` for about ``n (c + n/2)`` (query, key) pairs, ``4 x heads x head_dim``
FLOPs per pair and layer. :meth:`HardwareProfile.prefill_time` is the linear term alone (the
legacy model, ``--prefill-cost linear``); :meth:`HardwareProfile.prefill_time_at` adds the
attention term (``--prefill-cost attention``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["HardwareProfile"]


@dataclass(frozen=True, slots=True)
class HardwareProfile:
    """Throughput and capacity figures of one GPU setup serving one model.

    Attributes:
        name: short identifier, e.g. ``"a6000x2-qwen3-32b"``.
        description: the setup it models (GPUs, model, parallelism).
        source: where the numbers come from (model config for KV bytes/token, published figures).
        prefill_tokens_per_s: prefill throughput, tokens per second (> 0).
        decode_base_s: fixed part of one decode iteration, seconds (>= 0).
        decode_per_seq_s: added decode iteration time per running sequence, seconds (>= 0).
        decode_per_token_s: added decode iteration time per token of context the running
            sequences hold (prompt plus tokens generated so far), seconds (>= 0): a decode step
            reads every running sequence's KV cache once, so this is KV bytes per token (per GPU)
            over the achieved memory bandwidth. 0 = the step does not depend on context.
        pcie_bytes_per_s: effective host<->device copy bandwidth, bytes per second (> 0).
        kv_bytes_per_token: KV-cache bytes of one token over all layers (and TP ranks).
        device_kv_tokens: GPU KV-cache capacity, tokens.
        host_kv_tokens: host-memory (HiCache) KV capacity, tokens (0 = no host tier).
        attn_pair_s: seconds of attention per (query token, key token) pair over all
            full-attention layers: ``4 x full_layers x heads x head_dim / attention FLOP/s``
            (0 = no attention term: the legacy profile).
        attn_window_pair_s: the same over the sliding-window layers (0 = none).
        attn_window: the sliding window of those layers, tokens (0 = no window layers).
        chunked_prefill_size: SGLang's ``--chunked-prefill-size`` default for this setup, tokens
            (0 = not chunked): the most new tokens one prefill batch holds under ``--engine-model sglang``.
        prefill_request_s: seconds each request adds to the prefill that admits it, whatever its
            size (the server's fixed cost per request: scheduling, the forward pass's own overhead);
            0 = none (every named profile).
        cached_token_s: seconds per *cached* prompt token of a prefill (0 = a cached token costs
            nothing but the attention pairs of the new tokens that attend to it).
        cached_pair_s: seconds per (cached query, cached key) pair, ``c^2 / 2`` of them for ``c``
            cached tokens: an attention backend that runs attention over the whole sequence again
            on every prefill (SGLang's ``torch_native`` on CPU) pays for the cached prefix's own
            queries. 0 = cached queries are not recomputed (GPU backends: every named profile).
            The three terms enter :meth:`prefill_time_at` only (``--prefill-cost attention``);
            they come from probes of a live server (:mod:`pbkv_server.loadgen.probe_fit`).

    Raises:
        ValueError: on construction, if a rate is not positive or a time or capacity is negative.
    """

    name: str
    description: str
    source: str
    prefill_tokens_per_s: float
    decode_base_s: float
    decode_per_seq_s: float
    pcie_bytes_per_s: float
    kv_bytes_per_token: int
    device_kv_tokens: int
    host_kv_tokens: int
    decode_per_token_s: float = 0.0
    attn_pair_s: float = 0.0
    attn_window_pair_s: float = 0.0
    attn_window: int = 0
    chunked_prefill_size: int = 0
    prefill_request_s: float = 0.0
    cached_token_s: float = 0.0
    cached_pair_s: float = 0.0

    def __post_init__(self) -> None:
        if self.prefill_tokens_per_s <= 0 or self.pcie_bytes_per_s <= 0:
            raise ValueError(f"profile {self.name!r}: prefill and PCIe rates must be positive")
        if min(self.decode_base_s, self.decode_per_seq_s, self.decode_per_token_s, self.kv_bytes_per_token) < 0:
            raise ValueError(f"profile {self.name!r}: decode times and KV bytes must be >= 0")
        if self.device_kv_tokens <= 0 or self.host_kv_tokens < 0:
            raise ValueError(f"profile {self.name!r}: device capacity must be > 0, host >= 0")
        if min(self.attn_pair_s, self.attn_window_pair_s, self.attn_window, self.chunked_prefill_size) < 0:
            raise ValueError(f"profile {self.name!r}: attention terms, window and chunk size must be >= 0")
        if min(self.prefill_request_s, self.cached_token_s, self.cached_pair_s) < 0:
            raise ValueError(f"profile {self.name!r}: per-request and cached-token costs must be >= 0")

    def prefill_time(self, tokens: int) -> float:
        """Seconds to prefill ``tokens`` uncached prompt tokens (linear in tokens)."""
        return tokens / self.prefill_tokens_per_s

    def attention_pairs(self, tokens: int, context: int = 0) -> tuple[float, float]:
        """(query, key) pairs of causal attention for ``tokens`` new tokens after ``context``
        cached ones: ``(full, windowed)``. A full layer's new token ``i`` (0-based) attends to the
        ``context + i`` tokens before it and itself; summed continuously, ``n (c + n/2)``. A
        sliding-window layer's token attends to at most ``attn_window`` of them: the integral of
        ``min(c + x, w)`` for ``x`` in ``[0, n]``."""
        n, c, w = float(tokens), float(context), float(self.attn_window)
        full = n * (c + n / 2)
        if w <= 0:
            return full, 0.0
        if c >= w:
            windowed = n * w
        elif c + n <= w:
            windowed = full
        else:
            ramp = w - c  # tokens before the window is full
            windowed = ramp * c + ramp * ramp / 2 + (n - ramp) * w
        return full, windowed

    def attention_time(self, tokens: int, context: int = 0) -> float:
        """Seconds of the attention term of prefilling ``tokens`` new tokens after ``context``
        cached ones: ``attn_pair_s x full pairs + attn_window_pair_s x windowed pairs``
        (:meth:`attention_pairs`); 0 on a profile without attention terms."""
        if not (self.attn_pair_s or self.attn_window_pair_s) or tokens <= 0:
            return 0.0
        full, windowed = self.attention_pairs(tokens, context)
        return self.attn_pair_s * full + self.attn_window_pair_s * windowed

    def prefill_time_at(self, tokens: int, context: int = 0) -> float:
        """Seconds to prefill ``tokens`` new tokens that attend to ``context`` cached tokens:
        the linear term (:meth:`prefill_time`) plus the attention term (:meth:`attention_time`),
        plus, on a profile that has them, the request's fixed cost and its cached tokens' own
        cost (:meth:`cached_time`)."""
        t = self.prefill_time(tokens) + self.attention_time(tokens, context)
        if self.prefill_request_s or self.cached_token_s or self.cached_pair_s:
            t += self.prefill_request_s + self.cached_time(context)
        return t

    def cached_time(self, context: int) -> float:
        """Seconds that ``context`` cached prompt tokens still cost a prefill:
        ``cached_token_s x c + cached_pair_s x c^2 / 2`` (0 on every named profile)."""
        c = float(max(0, context))
        return self.cached_token_s * c + self.cached_pair_s * c * c / 2

    def decode_step_time(self, batch: int, context_tokens: int = 0) -> float:
        """Seconds of one decode iteration for ``batch`` running sequences holding
        ``context_tokens`` tokens of KV in all: base + per_seq * batch + per_token * context."""
        return self.decode_base_s + self.decode_per_seq_s * batch + self.decode_per_token_s * context_tokens

    def decode_steps_time(self, batch: int, context_tokens: int, steps: int) -> float:
        """Seconds of ``steps`` consecutive decode iterations of the same ``batch``, whose context
        grows by one token per sequence and iteration from ``context_tokens``:
        ``steps * decode_step_time(batch, context) + per_token * batch * steps * (steps - 1) / 2``."""
        first = self.decode_step_time(batch, context_tokens)
        if not self.decode_per_token_s:
            return first * steps
        return first * steps + self.decode_per_token_s * batch * steps * (steps - 1) / 2

    def decode_steps_until(self, batch: int, context_tokens: int, seconds: float) -> int:
        """Fewest decode iterations (>= 1) of :meth:`decode_steps_time` that last ``seconds`` or
        more (up to a relative 1e-9 of the first step, so float rounding never adds a step)."""
        first = self.decode_step_time(batch, context_tokens)
        if first <= 0:
            return 1
        if not self.decode_per_token_s:
            return max(1, math.ceil(seconds / first - 1e-9))
        target = seconds - 1e-9 * first
        grow = self.decode_per_token_s * batch
        # T(k) = first * k + grow * k (k - 1) / 2 >= target: the positive root, then settle by hand
        b = first - grow / 2
        k = max(1, math.ceil((-b + math.sqrt(b * b + 2 * grow * target)) / grow) if grow > 0 else
                math.ceil(target / first))
        while k > 1 and self.decode_steps_time(batch, context_tokens, k - 1) >= target:
            k -= 1
        while self.decode_steps_time(batch, context_tokens, k) < target:
            k += 1
        return k

    def load_time(self, tokens: int) -> float:
        """Seconds to copy the KV cache of ``tokens`` tokens between host and device over PCIe."""
        return tokens * self.kv_bytes_per_token / self.pcie_bytes_per_s

    def load_tokens(self, seconds: float) -> int:
        """Tokens of KV cache PCIe can move in ``seconds`` (inverse of :meth:`load_time`)."""
        if self.kv_bytes_per_token == 0:
            return 1 << 62
        return int(seconds * self.pcie_bytes_per_s / self.kv_bytes_per_token)
