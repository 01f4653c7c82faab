"""Hardware cost model of one serving replica (``docs/architecture.md``, "Cost model").

A :class:`HardwareProfile` turns work into engine seconds: prefill throughput (tokens/s), decode
step time as an affine function of the batch size, and host<->device copies over PCIe. Named
instances live in :mod:`pbkv_server.sim.profiles`; each cites where its numbers come from.
"""

from __future__ import annotations

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
        pcie_bytes_per_s: effective host<->device copy bandwidth, bytes per second (> 0).
        kv_bytes_per_token: KV-cache bytes of one token over all layers (and TP ranks).
        device_kv_tokens: GPU KV-cache capacity, tokens.
        host_kv_tokens: host-memory (HiCache) KV capacity, tokens (0 = no host tier).

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

    def __post_init__(self) -> None:
        if self.prefill_tokens_per_s <= 0 or self.pcie_bytes_per_s <= 0:
            raise ValueError(f"profile {self.name!r}: prefill and PCIe rates must be positive")
        if min(self.decode_base_s, self.decode_per_seq_s, self.kv_bytes_per_token) < 0:
            raise ValueError(f"profile {self.name!r}: decode times and KV bytes must be >= 0")
        if self.device_kv_tokens <= 0 or self.host_kv_tokens < 0:
            raise ValueError(f"profile {self.name!r}: device capacity must be > 0, host >= 0")

    def prefill_time(self, tokens: int) -> float:
        """Seconds to prefill ``tokens`` uncached prompt tokens (linear in tokens)."""
        return tokens / self.prefill_tokens_per_s

    def decode_step_time(self, batch: int) -> float:
        """Seconds of one decode iteration for ``batch`` running sequences: base + per_seq * batch."""
        return self.decode_base_s + self.decode_per_seq_s * batch

    def load_time(self, tokens: int) -> float:
        """Seconds to copy the KV cache of ``tokens`` tokens between host and device over PCIe."""
        return tokens * self.kv_bytes_per_token / self.pcie_bytes_per_s

    def load_tokens(self, seconds: float) -> int:
        """Tokens of KV cache PCIe can move in ``seconds`` (inverse of :meth:`load_time`)."""
        if self.kv_bytes_per_token == 0:
            return 1 << 62
        return int(seconds * self.pcie_bytes_per_s / self.kv_bytes_per_token)
