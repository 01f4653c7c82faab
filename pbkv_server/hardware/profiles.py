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
  tokens/s (2 FLOPs per parameter per token), with an MFU of 0.45, the
  typical figure reported for chunked prefill in SGLang/vLLM benchmarks; TP-2 over PCIe keeps
  90 % of linear scaling (all-reduce cost). A mixture-of-experts model counts its *active*
  parameters here (each token runs through ``num_experts_per_tok`` experts) and its *total*
  parameters in memory.
* Prefill attention (``docs/cost-model.md``): ``4 x layers x heads x head_dim`` FLOPs per
  (query, key) pair, at ``peak x ATTN_EFFICIENCY`` (with the same TP scaling); layers with a
  sliding window attend to at most ``window`` keys. The legacy model leaves this term out.
* Chunked-prefill size: SGLang's default for the GPU's memory (``_handle_gpu_memory_settings``,
  sglang 0.5.23 ``srt/arg_groups/memory_hook.py``: 8,192 tokens below 160 GiB, 16,384 above).
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

__all__ = ["PROFILES", "MODEL_SPECS", "GPU_SPECS", "model_source", "DEFAULT_PROFILE", "DEFAULT_HOST_RATIO", "PAPER_HOST_RATIO", "MAX_HOST_RATIO", "MAX_KV_TOKENS", "get_profile", "profile_names",
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
#: Largest KV capacity, in tokens, of a device or host tier that ``pbkv-bench`` and ``pbkv-server``
#: accept (``--device-tokens``, ``--host-tokens``, ratio x device): 72 GPUs (an NVL72 domain,
#: ``advise``'s ``MAX_TP``) of 1 TiB each (its ``MAX_GPU_MEMORY_GIB``) at 1 KiB of KV per token (below
#: any served model: Qwen2.5-0.5B needs 12 KiB) hold 7.7e10 tokens; ``--device-tokens 1e23`` was
#: accepted and printed as a device size.
MAX_KV_TOKENS = 10**11
#: Model FLOPs utilisation of chunked prefill.
PREFILL_MFU = 0.45
#: Fraction of linear scaling kept by tensor parallelism over PCIe (all-reduce cost).
TP_EFFICIENCY = 0.9
#: Fraction of peak HBM bandwidth a decode step achieves.
HBM_EFFICIENCY = 0.8
#: Achieved pinned host-to-device copy rate as a fraction of the PCIe link's theoretical rate.
PCIE_EFFICIENCY = 0.78
#: Fraction of the dense BF16 peak that prefill attention kernels achieve: the low end of
#: FlashAttention-2's forward pass, "50-73% of the theoretical maximum FLOPs/s on A100" (Dao,
#: arXiv 2307.08691, abstract); FlashAttention-3 reaches 75% on H100 at best (Shah et al., arXiv
#: 2407.08608, abstract). The low end: serving runs variable-length batches over a paged cache.
ATTN_EFFICIENCY = 0.5


@dataclass(frozen=True)
class ModelSpec:
    """Published facts about a model (from its Hugging Face ``config.json`` and model card).

    Attributes:
        name: Hugging Face id.
        params: parameter count (all experts of a mixture-of-experts model).
        layers: ``num_hidden_layers``.
        kv_heads: ``num_key_value_heads``.
        head_dim: ``head_dim`` (or hidden_size / num_attention_heads).
        dtype_bytes: bytes per element of weights and KV (2 for bf16).
        heads: ``num_attention_heads`` (query heads; 0 = unknown: no attention term).
        active_params: parameters one token runs through (a mixture-of-experts model's activated
            parameters, from its model card); ``None`` = ``params`` (dense).
        checkpoint_bytes: bytes of the released weights when they are not ``params x
            dtype_bytes`` (gpt-oss ships its experts in MXFP4); ``None`` = that product.
        window: ``sliding_window`` of the layers that have one, tokens (0 = none).
        window_layers: how many of the layers use the sliding window (``layer_types``).
        config_url: the ``config.json`` the shape was read from.
    """

    name: str
    params: float
    layers: int
    kv_heads: int
    head_dim: int
    dtype_bytes: int = 2
    heads: int = 0
    active_params: float | None = None
    checkpoint_bytes: float | None = None
    window: int = 0
    window_layers: int = 0
    config_url: str = ""

    @property
    def kv_bytes_per_token(self) -> int:
        """KV bytes of one token over all layers: 2 x layers x kv_heads x head_dim x dtype_bytes.

        Sliding-window layers count in full: SGLang's default pool gives every layer a slot per
        token (its hybrid SWA pool, which shrinks window layers, is opt-in)."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes

    @property
    def weight_bytes(self) -> float:
        """Bytes of the weights: the checkpoint's size, or params x dtype_bytes."""
        return self.checkpoint_bytes if self.checkpoint_bytes is not None else self.params * self.dtype_bytes

    @property
    def flops_params(self) -> float:
        """Parameters whose FLOPs a token costs: the active ones (all of a dense model)."""
        return self.active_params if self.active_params is not None else self.params

    def attention_flops_per_pair(self) -> tuple[float, float]:
        """FLOPs per (query, key) pair of prefill attention over the full layers and over the
        sliding-window layers: ``4 x layers x heads x head_dim`` each (``QK^T`` and ``PV``, 2
        FLOPs per multiply-add, each ``head_dim`` long, per query head)."""
        per_layer = 4.0 * self.heads * self.head_dim
        return per_layer * (self.layers - self.window_layers), per_layer * self.window_layers


@dataclass(frozen=True)
class GpuSpec:
    """Datasheet facts about one GPU.

    Attributes:
        name: product name.
        memory_bytes: usable device memory in bytes (as reported by nvidia-smi).
        bf16_flops: dense BF16 tensor-core peak, FLOP/s.
        hbm_bytes_per_s: peak memory bandwidth, bytes/s.
        pcie_bytes_per_s: theoretical host link rate (one direction), bytes/s.
        source: the datasheet these come from.
    """

    name: str
    memory_bytes: float
    bf16_flops: float
    hbm_bytes_per_s: float
    pcie_bytes_per_s: float
    source: str = ""

    @property
    def chunked_prefill_size(self) -> int:
        """SGLang's default ``--chunked-prefill-size`` for this GPU's memory (sglang 0.5.23,
        ``_handle_gpu_memory_settings``): 2,048 below 20 GiB, 4,096 below 60, 8,192 below 160,
        else 16,384 tokens."""
        mib = self.memory_bytes / MIB
        for below, size in ((20 * 1024, 2048), (60 * 1024, 4096), (160 * 1024, 8192)):
            if mib < below:
                return size
        return 16384


MIB = 2**20

_HF = "https://huggingface.co/{}/blob/main/config.json"

QWEN3_14B = ModelSpec("Qwen/Qwen3-14B", params=14.8e9, layers=40, kv_heads=8, head_dim=128, heads=40,
                      config_url=_HF.format("Qwen/Qwen3-14B"))
QWEN3_32B = ModelSpec("Qwen/Qwen3-32B", params=32.8e9, layers=64, kv_heads=8, head_dim=128, heads=64,
                      config_url=_HF.format("Qwen/Qwen3-32B"))
QWEN25_32B = ModelSpec("Qwen/Qwen2.5-32B-Instruct", params=32.5e9, layers=64, kv_heads=8, head_dim=128, heads=40,
                       config_url=_HF.format("Qwen/Qwen2.5-32B-Instruct"))
#: 70B class: 80 layers, 64 query / 8 KV heads, hidden 8192 (head_dim 128); 70.6B parameters.
LLAMA33_70B = ModelSpec("meta-llama/Llama-3.3-70B-Instruct", params=70.6e9, layers=80, kv_heads=8, head_dim=128,
                        heads=64, config_url=_HF.format("meta-llama/Llama-3.3-70B-Instruct"))
#: MoE: 128 experts, 8 active; 30.5B parameters in all, 3.3B activated (model card).
QWEN3_CODER_30B_A3B = ModelSpec("Qwen/Qwen3-Coder-30B-A3B-Instruct", params=30.5e9, active_params=3.3e9, layers=48,
                                kv_heads=4, head_dim=128, heads=32,
                                config_url=_HF.format("Qwen/Qwen3-Coder-30B-A3B-Instruct"))
#: MoE: 128 experts, 8 active; 235B parameters in all, 22B activated (model card).
QWEN3_235B_A22B = ModelSpec("Qwen/Qwen3-235B-A22B", params=235e9, active_params=22e9, layers=94, kv_heads=4,
                            head_dim=128, heads=64, config_url=_HF.format("Qwen/Qwen3-235B-A22B"))
#: MoE: 128 experts, 4 active; 116.8B parameters, 5.1B active, a 60.8 GiB checkpoint (experts in
#: MXFP4; gpt-oss model card, arXiv 2508.10925, Table 1). Layers alternate sliding-window (128
#: tokens) and full attention (``layer_types``): 18 of the 36 have the window.
GPT_OSS_120B = ModelSpec("openai/gpt-oss-120b", params=116.8e9, active_params=5.1e9, layers=36, kv_heads=8,
                         head_dim=64, heads=64, checkpoint_bytes=60.8 * 2**30, window=128, window_layers=18,
                         config_url=_HF.format("openai/gpt-oss-120b"))

RTX_A6000 = GpuSpec("NVIDIA RTX A6000", memory_bytes=49140 * MIB, bf16_flops=154.8e12,
                    hbm_bytes_per_s=768e9, pcie_bytes_per_s=32e9,
                    source="https://www.nvidia.com/en-us/design-visualization/rtx-a6000/")
H100_SXM = GpuSpec("NVIDIA H100 SXM5 80GB", memory_bytes=81559 * MIB, bf16_flops=989e12,
                   hbm_bytes_per_s=3.35e12, pcie_bytes_per_s=64e9,
                   source="https://www.nvidia.com/en-us/data-center/h100/ (BF16 1,979 TFLOPS with sparsity = 989 "
                          "dense)")
#: H200 SXM: the H100's GH100 compute with 141 GB HBM3e at 4.8 TB/s; 143,771 MiB as nvidia-smi reports it.
H200_SXM = GpuSpec("NVIDIA H200 SXM 141GB", memory_bytes=143771 * MIB, bf16_flops=989e12,
                   hbm_bytes_per_s=4.8e12, pcie_bytes_per_s=64e9,
                   source="https://www.nvidia.com/en-us/data-center/h200/ (141 GB HBM3e, 4.8 TB/s, BF16 1,979 "
                          "TFLOPS with sparsity = 989 dense, PCIe Gen5)")
#: B200 (HGX, 1,000 W): 180 GB HBM3e at 8 TB/s per GPU, FP16/BF16 36 PFLOPS with sparsity for eight
#: GPUs = 2.25 PFLOPS dense each; 183,359 MiB as nvidia-smi reports it. Host link PCIe Gen5 x16.
B200 = GpuSpec("NVIDIA B200 180GB (HGX)", memory_bytes=183359 * MIB, bf16_flops=2.25e15,
               hbm_bytes_per_s=8e12, pcie_bytes_per_s=64e9,
               source="https://www.nvidia.com/en-us/data-center/hgx/ (HGX B200: 1.4 TB HBM3e, 64 TB/s, FP16/BF16 "
                      "36 PFLOPS with sparsity over 8 GPUs)")

#: Models by short name (``pbkv-bench advise --model``); their Hugging Face ids work too.
MODEL_SPECS: dict[str, ModelSpec] = {
    "qwen3-14b": QWEN3_14B, "qwen3-32b": QWEN3_32B, "qwen2.5-32b": QWEN25_32B, "llama3.3-70b": LLAMA33_70B,
    "qwen3-coder-30b-a3b": QWEN3_CODER_30B_A3B, "qwen3-235b-a22b": QWEN3_235B_A22B, "gpt-oss-120b": GPT_OSS_120B,
}
#: GPUs by short name (``pbkv-bench advise --gpu``).
GPU_SPECS: dict[str, GpuSpec] = {"h100": H100_SXM, "h200": H200_SXM, "b200": B200, "a6000": RTX_A6000}


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
    prefill = gpu.bf16_flops * PREFILL_MFU * scaling / (2.0 * model.flops_params)
    attn_rate = gpu.bf16_flops * ATTN_EFFICIENCY * scaling
    full_flops, window_flops = model.attention_flops_per_pair()
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
        attn_pair_s=full_flops / attn_rate,
        attn_window_pair_s=window_flops / attn_rate,
        attn_window=model.window if model.window_layers else 0,
        chunked_prefill_size=gpu.chunked_prefill_size,
    )


_A6000_SRC = ("RTX A6000 datasheet (48 GB GDDR6, 768 GB/s, 154.8 TFLOPS dense BF16 tensor, PCIe 4.0 x16); ")
_H100_SRC = ("H100 SXM5 datasheet (80 GB HBM3, 3.35 TB/s, 989 TFLOPS dense BF16 tensor, PCIe 5.0 x16); ")
_SGLANG_SRC = "SGLang defaults (mem-fraction-static ~0.88, hicache-ratio 2.0); efficiencies: pbkv_server/hardware/profiles.py"


def model_source(model: ModelSpec) -> str:
    """Where a model's shape comes from, in the words of a profile's ``source``."""
    moe = (f", {model.active_params / 1e9:g}B of {model.params / 1e9:g}B parameters active" if model.active_params
           else f", {model.params / 1e9:g}B parameters")
    window = f", sliding window {model.window} on {model.window_layers} layers" if model.window_layers else ""
    return (f"{model.config_url} ({model.layers} layers, {model.heads} query / {model.kv_heads} KV heads, head_dim "
            f"{model.head_dim}{window}{moe})")


def _derived(name: str, model: ModelSpec, gpu: GpuSpec, tp: int) -> HardwareProfile:
    """A profile of the 2025 generation: sources written from the specs themselves."""
    return derive_profile(name, model, gpu, tp, source=f"{gpu.name} datasheet {gpu.source}; {model_source(model)}; {_SGLANG_SRC}")


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
        # the 2025 generation: H100 at TP1/4/8, H200, B200; dense 32B and 70B, three MoE models
        _derived("h100-qwen3-32b", QWEN3_32B, H100_SXM, tp=1),
        _derived("h100-qwen3-coder-30b-a3b", QWEN3_CODER_30B_A3B, H100_SXM, tp=1),
        _derived("h100-gpt-oss-120b", GPT_OSS_120B, H100_SXM, tp=1),
        _derived("h100x4-llama3.3-70b-tp4", LLAMA33_70B, H100_SXM, tp=4),
        _derived("h100x8-llama3.3-70b-tp8", LLAMA33_70B, H100_SXM, tp=8),
        _derived("h100x8-qwen3-235b-a22b-tp8", QWEN3_235B_A22B, H100_SXM, tp=8),
        _derived("h200-qwen3-32b", QWEN3_32B, H200_SXM, tp=1),
        _derived("h200-qwen3-coder-30b-a3b", QWEN3_CODER_30B_A3B, H200_SXM, tp=1),
        _derived("h200-gpt-oss-120b", GPT_OSS_120B, H200_SXM, tp=1),
        _derived("h200x2-llama3.3-70b-tp2", LLAMA33_70B, H200_SXM, tp=2),
        _derived("h200x4-qwen3-235b-a22b-tp4", QWEN3_235B_A22B, H200_SXM, tp=4),
        _derived("b200-qwen3-32b", QWEN3_32B, B200, tp=1),
        _derived("b200-llama3.3-70b", LLAMA33_70B, B200, tp=1),
        _derived("b200-qwen3-coder-30b-a3b", QWEN3_CODER_30B_A3B, B200, tp=1),
        _derived("b200-gpt-oss-120b", GPT_OSS_120B, B200, tp=1),
        _derived("b200x4-qwen3-235b-a22b-tp4", QWEN3_235B_A22B, B200, tp=4),
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
            ``host_tokens`` < 0 or ``device_tokens`` < 1, either above :data:`MAX_KV_TOKENS`.
    """
    for what, tokens in (("device", device_tokens), ("host", host_tokens)):
        if tokens is not None and tokens > MAX_KV_TOKENS:
            raise ValueError(f"{what} tokens must be at most {MAX_KV_TOKENS:,} (72 GPUs of 1 TiB at 1 KiB of KV "
                             f"per token), got {tokens:,}")
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
