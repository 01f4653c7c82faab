"""Named hardware profiles: one per reference testbed of the PBKV paper (``docs/architecture.md``, "Cost model").

Every number of a profile is derived here, in the open, from a few published inputs:

* KV bytes per token from the model's ``config.json`` on Hugging Face:
  ``2 (K and V) x num_hidden_layers x num_key_value_heads x head_dim x 2 bytes (bf16)``.
* Device KV tokens from GPU memory: ``memory x mem_fraction - weight bytes`` per GPU, divided by
  the KV bytes each GPU holds per token (TP shards KV heads, so a TP-n GPU holds 1/n of a token).
  ``mem_fraction = 0.88`` is what SGLang's ``--mem-fraction-static`` heuristic picks for 48-80 GB
  GPUs; the remaining 12 % covers activations and CUDA graphs.
* Host KV tokens: ``hicache_ratio x device`` with SGLang HiCache's default ratio 2.0.
* Prefill throughput from the GPU datasheet's dense BF16 tensor peak: ``peak x MFU / (2 x params)``
  tokens/s (2 FLOPs per parameter per token, attention FLOPs ignored), with an MFU of 0.45, the
  typical figure reported for chunked prefill in SGLang/vLLM benchmarks; TP-2 over PCIe keeps
  90 % of linear scaling (all-reduce cost).
* Decode step time is memory bound (each step reads the weights and, through attention, the whole
  KV cache of every running sequence once; the memory-bound view of decode of vLLM, Kwon et al.,
  SOSP 2023, Section 2): ``weight bytes per GPU / (HBM bandwidth x 0.8)`` for the base, plus per
  token of context the running sequences hold (prompt + tokens generated so far; the engine
  tracks it) ``KV bytes per token per GPU / (HBM bandwidth x 0.8)``.
* PCIe host-to-device bandwidth: measured pinned-memory copy rates are about 78 % of the link's
  theoretical rate (PCIe 4.0 x16: 32 GB/s -> 25 GB/s; PCIe 5.0 x16: 64 GB/s -> 50 GB/s). Under
  TP-n each GPU loads its own shard over its own link, so the per-token rate scales by n.

The published inputs (layers, KV heads, parameter counts, memory, bandwidth, peak FLOPS) are cited in
each profile's ``source``; the efficiency factors above are modelling assumptions, stated once here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pbkv_server.engine.cost import HardwareProfile

__all__ = ["PROFILES", "DEFAULT_PROFILE", "DEFAULT_HOST_RATIO", "PAPER_HOST_RATIO", "MAX_HOST_RATIO", "get_profile", "profile_names",
           "host_tokens_for",
           "ModelSpec", "GpuSpec", "derive_profile"]

#: Fraction of GPU memory SGLang reserves for weights + KV pool (``--mem-fraction-static``).
MEM_FRACTION = 0.88
#: Host KV pool size relative to the device pool (SGLang ``--hicache-ratio`` default).
HICACHE_RATIO = 2.0
#: Host tier / device ratio of a run whose device size is chosen without a host size: SGLang
#: HiCache's default, as in the profiles' own host sizes. The PBKV paper's baseline (SGLang HiCache
#: with ``HICACHE_RATIO=1``) is host = device: ``--host-ratio 1``.
DEFAULT_HOST_RATIO = HICACHE_RATIO
#: Host tier / device of every simulator comparison whose host size is not given (``pbkv-bench
#: replay`` and ``study``, ``benchmarks/alternatives_table.py`` and ``policy_matrix.py``, the
#: examples' ``paper`` setup): the PBKV paper's setup, SGLang HiCache with ``HICACHE_RATIO=1``.
#: One constant, so two tools never compare policies on different host tiers by default (a
#: policy's latency gain over LRU depends on it). The live server keeps SGLang's own default.
PAPER_HOST_RATIO = 1.0
#: Largest host / device ratio accepted (a host tier 1000x the device is beyond any real server;
#: the bound keeps ratio x device a finite token count).
MAX_HOST_RATIO = 1000.0
#: Model FLOPs utilisation of chunked prefill.
PREFILL_MFU = 0.45
#: Fraction of linear scaling kept by tensor parallelism over PCIe (all-reduce cost).
TP_EFFICIENCY = 0.9
#: Fraction of peak HBM bandwidth a decode step achieves.
HBM_EFFICIENCY = 0.8
#: Achieved pinned host-to-device copy rate as a fraction of the PCIe link's theoretical rate.
PCIE_EFFICIENCY = 0.78


@dataclass(frozen=True)
class ModelSpec:
    """Published facts about a model (from its Hugging Face ``config.json`` and model card).

    Attributes:
        name: Hugging Face id.
        params: parameter count.
        layers: ``num_hidden_layers``.
        kv_heads: ``num_key_value_heads``.
        head_dim: ``head_dim`` (or hidden_size / num_attention_heads).
        dtype_bytes: bytes per element of weights and KV (2 for bf16).
    """

    name: str
    params: float
    layers: int
    kv_heads: int
    head_dim: int
    dtype_bytes: int = 2

    @property
    def kv_bytes_per_token(self) -> int:
        """KV bytes of one token over all layers: 2 x layers x kv_heads x head_dim x dtype_bytes."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes

    @property
    def weight_bytes(self) -> float:
        """Bytes of the weights: params x dtype_bytes."""
        return self.params * self.dtype_bytes


@dataclass(frozen=True)
class GpuSpec:
    """Datasheet facts about one GPU.

    Attributes:
        name: product name.
        memory_bytes: usable device memory in bytes (as reported by nvidia-smi).
        bf16_flops: dense BF16 tensor-core peak, FLOP/s.
        hbm_bytes_per_s: peak memory bandwidth, bytes/s.
        pcie_bytes_per_s: theoretical host link rate (one direction), bytes/s.
    """

    name: str
    memory_bytes: float
    bf16_flops: float
    hbm_bytes_per_s: float
    pcie_bytes_per_s: float


MIB = 2**20

QWEN3_14B = ModelSpec("Qwen/Qwen3-14B", params=14.8e9, layers=40, kv_heads=8, head_dim=128)
QWEN3_32B = ModelSpec("Qwen/Qwen3-32B", params=32.8e9, layers=64, kv_heads=8, head_dim=128)
QWEN25_32B = ModelSpec("Qwen/Qwen2.5-32B-Instruct", params=32.5e9, layers=64, kv_heads=8, head_dim=128)

RTX_A6000 = GpuSpec("NVIDIA RTX A6000", memory_bytes=49140 * MIB, bf16_flops=154.8e12,
                    hbm_bytes_per_s=768e9, pcie_bytes_per_s=32e9)
H100_SXM = GpuSpec("NVIDIA H100 SXM5 80GB", memory_bytes=81559 * MIB, bf16_flops=989e12,
                   hbm_bytes_per_s=3.35e12, pcie_bytes_per_s=64e9)


def derive_profile(name: str, model: ModelSpec, gpu: GpuSpec, tp: int, source: str) -> HardwareProfile:
    """Build a :class:`HardwareProfile` for ``model`` served on ``tp`` GPUs of type ``gpu``.

    Formulas are those of the module docstring. Units: tokens, bytes, seconds.

    Raises:
        ValueError: ``tp`` < 1, or the weights do not fit in the memory fraction.
    """
    if tp < 1:
        raise ValueError("tp must be >= 1")
    kv_per_gpu = model.kv_bytes_per_token / tp
    free_per_gpu = gpu.memory_bytes * MEM_FRACTION - model.weight_bytes / tp
    if free_per_gpu <= 0:
        raise ValueError(f"{model.name} does not fit on {tp} x {gpu.name}")
    device_tokens = int(free_per_gpu // kv_per_gpu)
    scaling = 1.0 if tp == 1 else tp * TP_EFFICIENCY
    prefill = gpu.bf16_flops * PREFILL_MFU * scaling / (2.0 * model.params)
    hbm = gpu.hbm_bytes_per_s * HBM_EFFICIENCY
    return HardwareProfile(
        name=name,
        description=f"{model.name} on {tp} x {gpu.name} (TP{tp}), bf16",
        source=source,
        prefill_tokens_per_s=prefill,
        decode_base_s=model.weight_bytes / tp / hbm,
        decode_per_seq_s=0.0,
        decode_per_token_s=kv_per_gpu / hbm,
        pcie_bytes_per_s=gpu.pcie_bytes_per_s * PCIE_EFFICIENCY * tp,
        kv_bytes_per_token=model.kv_bytes_per_token,
        device_kv_tokens=device_tokens,
        host_kv_tokens=int(device_tokens * HICACHE_RATIO),
    )


_A6000_SRC = ("RTX A6000 datasheet (48 GB GDDR6, 768 GB/s, 154.8 TFLOPS dense BF16 tensor, PCIe 4.0 x16); ")
_H100_SRC = ("H100 SXM5 datasheet (80 GB HBM3, 3.35 TB/s, 989 TFLOPS dense BF16 tensor, PCIe 5.0 x16); ")
_SGLANG_SRC = "SGLang defaults (mem-fraction-static ~0.88, hicache-ratio 2.0); efficiencies: pbkv_server/hardware/profiles.py"

PROFILES: dict[str, HardwareProfile] = {
    p.name: p
    for p in (
        derive_profile(
            "a6000x2-qwen3-32b-tp2", QWEN3_32B, RTX_A6000, tp=2,
            source=_A6000_SRC + "Qwen/Qwen3-32B config.json (64 layers, 8 KV heads, head_dim 128; "
            "32.8B params per model card); " + _SGLANG_SRC,
        ),
        derive_profile(
            "a6000x8-qwen3-32b-tp8", QWEN3_32B, RTX_A6000, tp=8,
            source=_A6000_SRC + "the PBKV paper's testbed (8 x RTX A6000 48 GB with NVLink, arXiv 2605.06472 "
            "Section 5), all eight GPUs serving one model; Qwen/Qwen3-32B config.json (64 layers, 8 KV heads, "
            "head_dim 128; 32.8B params per model card); " + _SGLANG_SRC,
        ),
        derive_profile(
            "a6000-qwen3-14b", QWEN3_14B, RTX_A6000, tp=1,
            source=_A6000_SRC + "Qwen/Qwen3-14B config.json (40 layers, 8 KV heads, head_dim 128; "
            "14.8B params per model card); " + _SGLANG_SRC,
        ),
        derive_profile(
            "h100-qwen2.5-32b", QWEN25_32B, H100_SXM, tp=1,
            source=_H100_SRC + "Qwen/Qwen2.5-32B-Instruct config.json (64 layers, 8 KV heads, "
            "hidden 5120 / 40 heads = head_dim 128; 32.5B params per model card); " + _SGLANG_SRC,
        ),
    )
}

#: Profile used when none is named: the single-GPU testbed.
DEFAULT_PROFILE = "a6000-qwen3-14b"


def profile_names() -> list[str]:
    """Names of all profiles, sorted."""
    return sorted(PROFILES)


def get_profile(name: str) -> HardwareProfile:
    """The profile called ``name``.

    Raises:
        KeyError: unknown name; the message lists the known names.
    """
    try:
        return PROFILES[name]
    except KeyError:
        raise KeyError(f"unknown hardware profile {name!r}; known profiles: {', '.join(profile_names())}") from None


def host_tokens_for(profile: HardwareProfile, device_tokens: int | None = None, host_tokens: int | None = None,
                    host_ratio: float | None = None) -> int:
    """Host KV capacity (tokens) of a run, from the capacity options of ``pbkv-bench`` and ``pbkv-server``.

    In order: an explicit ``host_tokens``; else ``round(host_ratio x device)``, where device is
    ``device_tokens`` or the profile's device size; else, with ``device_tokens`` given,
    ``round(DEFAULT_HOST_RATIO x device_tokens)``, so that a chosen device size moves the host
    tier with it (SGLang sizes its host pool as ``--hicache-ratio`` x the device pool); else the
    profile's host size. A ratio of 0 means no host tier.

    Raises:
        ValueError: ``host_ratio`` negative, not finite or above :data:`MAX_HOST_RATIO`,
            ``host_tokens`` < 0 or ``device_tokens`` < 1.
    """
    if host_ratio is not None and not (math.isfinite(host_ratio) and 0 <= host_ratio <= MAX_HOST_RATIO):
        raise ValueError(f"host ratio must be a number from 0 (no host tier) to {MAX_HOST_RATIO:g}, got {host_ratio}")
    if host_tokens is not None and host_tokens < 0:
        raise ValueError(f"host tokens must be >= 0, got {host_tokens}")
    if device_tokens is not None and device_tokens < 1:
        raise ValueError(f"device tokens must be >= 1, got {device_tokens}")
    if host_tokens is not None:
        return host_tokens
    device = device_tokens if device_tokens is not None else profile.device_kv_tokens
    if host_ratio is not None:
        return round(host_ratio * device)
    if device_tokens is not None:
        return round(DEFAULT_HOST_RATIO * device_tokens)
    return profile.host_kv_tokens
