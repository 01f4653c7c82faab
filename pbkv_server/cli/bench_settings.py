"""Settings of ``pbkv-bench replay`` and ``pbkv-bench advise``: one dataclass per command.

Each field is an option of its command (:mod:`pbkv_contract.settings`; the command line is
generated from the field by :mod:`pbkv_server.cli.settings`); a setting both commands take is
made by one function here, so its flag, default and help are written once. Adding an option is
adding a field (and reading it in the command).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from pbkv_contract.settings import argument, option
from pbkv_server.engine.types import DEFAULT_ENGINE_MODEL, DEFAULT_PREFILL_COST, ENGINE_MODELS, PREFILL_COSTS
from pbkv_server.hardware.profiles import DEFAULT_PROFILE, GPU_SPECS, MODEL_SPECS
from pbkv_server.predictors.torch_threads import DEFAULT_TORCH_THREADS
from pbkv_server.sim.advise import ADVISE_ORDER_RUNS, MAX_GPU_MEMORY_GIB, MAX_TP
from pbkv_contract.prediction import MAX_HORIZON  # re-exported: one bound for every tool
from pbkv_server.hardware.profiles import MAX_KV_TOKENS
from pbkv_server.sim.simulator import MAX_CONCURRENCY, MAX_ORDER_RUNS, ORDER_RUNS_LIMIT
from pbkv_server.sim.shipped import DEFAULT_ENGINE, ENGINES
from pbkv_server.predictors.factory import DEFAULT_ONLINE_PREDICTOR

__all__ = ["ReplaySettings", "AdviseSettings", "MAX_HORIZON", "MAX_REPLICAS"]

#: Most replicas behind one router. Each is a whole engine with its own device pool, so time and
#: memory grow with the count (``--replicas 1000000`` ran for minutes before the first line);
#: 1,024 replicas of a small trace replay in about 5 s here, and are far more than one router
#: balances in the deployments we model (SMG's examples run a handful).
MAX_REPLICAS = 1024

def _trace() -> Any:
    return argument("trace file (JSONL, v1)")


def _predictor() -> Any:
    return option(DEFAULT_ONLINE_PREDICTOR, "oracle | uniform | context | markov | noise:LAMBDA (LAMBDA in [0, 1]: "
                                            "the oracle's share given to uniform) | PATH (a trained model; it must be "
                                            "for the trace's app when the trace holds one app)")


def _concurrency() -> Any:
    return option(32, f"most workflows (sessions) in flight (closed loop; 1..{MAX_CONCURRENCY:,})", min=1,
                  max=MAX_CONCURRENCY)


def _order_runs(default: int, why: str) -> Any:
    return option(default, f"most replays of the offline reference (opt: MIN over the replay's own order, replayed "
                           f"until the order is stable; 1..{ORDER_RUNS_LIMIT}); {why}", min=1, max=ORDER_RUNS_LIMIT)


def _json_out(what: str) -> Any:
    return option(None, f"write {what} here (JSON)", flag="--json")


def _slo_ttft() -> Any:
    return option(None, "goodput's TTFT objective, ms: request_goodput counts requests whose first token came within "
                        "it (bench_serving --goodput ttft:MS)")


def _slo_tpot() -> Any:
    return option(None, "goodput's TPOT objective, ms: mean time per output token after the first (bench_serving "
                        "--goodput tpot:MS)")


@dataclass
class ReplaySettings:
    """``pbkv-bench replay``: replay a trace under each policy (help lines are the flags' docs)."""

    trace: Path = _trace()
    policy: Optional[str] = option(None, "policy name or comma-separated list (default: every policy replay can "
                                         "run; see pbkv-bench policies)")
    predictor: str = _predictor()
    concurrency: int = _concurrency()
    profile: str = option(DEFAULT_PROFILE, "hardware profile (pbkv-bench profiles)")
    # the low bounds are the engine config's (one line naming the option); the high one is the CLI's
    device_tokens: Optional[int] = option(None, "device KV capacity in tokens (default: the profile's)",
                                          max=MAX_KV_TOKENS)
    host_ratio: Optional[float] = option(
        None, "host KV tier = RATIO x device capacity, 0 = no host tier (default: 1, the PBKV paper's setup, SGLang "
              "HiCache with HICACHE_RATIO=1, as pbkv-bench study)")
    host_tokens: Optional[int] = option(None, "host KV capacity in tokens (wins over --host-ratio)",
                                        max=MAX_KV_TOKENS)
    horizon: int = option(3, f"prediction horizon K (1..{MAX_HORIZON})")
    gamma: float = option(0.7, "score decay gamma")
    rho: float = option(0.1, "pbkv-aggressive displacement share of device capacity")
    page_size: Optional[int] = option(None, "KV page size in tokens (SGLang --page-size; the live server uses 1), at "
                                            "most the device and the trace's longest prompt (only whole pages are "
                                            "cached); default: the trace's blocks are the cache units")
    json_out: Optional[Path] = _json_out("{policy: metrics}")
    plot: Optional[Path] = option(None, "write the hit-rate-over-time chart here (PNG)")
    timeline_bins: int = option(40, "bins of the hit-rate timeline")
    gap: bool = option(True, "also replay the baseline and the offline reference when not listed, for 'gap closed' "
                             "only (not added to the table or JSON); --no-gap: gap closed is '-' unless both are "
                             "listed")
    threads: int = option(DEFAULT_TORCH_THREADS, "torch CPU threads for a trained model")
    replicas: int = option(1, f"replicas behind a router (1..{MAX_REPLICAS}), each its own engine and device "
                              "(--concurrency is the whole cluster's; online policies only)")
    router: str = option("affinity", "with --replicas: affinity (consistent hashing of the workflow id), round-robin "
                                     "(per request) or cache-aware (SMG's)")
    lru_guard: bool = option(True, "robustness guard of he/pbkv/pbkv-aggressive: LRU order while a ghost LRU would "
                                   "hit more (--no-lru-guard: always the predicted order)")
    slo_ttft: Optional[float] = _slo_ttft()
    slo_tpot: Optional[float] = _slo_tpot()
    prefill_cost: str = option(DEFAULT_PREFILL_COST, f"prefill cost model ({' | '.join(PREFILL_COSTS)}): linear in new "
                                                      "tokens, or with the attention term of their context "
                                                      "(docs/cost-model.md)")
    engine_model: str = option(DEFAULT_ENGINE_MODEL, f"engine model ({' | '.join(ENGINE_MODELS)}): legacy reserves each "
                                                      "request's whole output; sglang admits by SGLang's estimate, "
                                                      "retracts when KV runs out and chunks prefills")
    chunked_prefill_size: Optional[int] = option(None, "with --engine-model sglang: most new tokens per prefill batch "
                                                       "(SGLang --chunked-prefill-size; default: the profile's, 0 = "
                                                       "no chunking)")
    order_runs: int = _order_runs(MAX_ORDER_RUNS, "the default is the studies' and published tables' reference")
    hints: bool = option(True, "--no-hints: replay the trace as a client without the SDK sends it (no PBKV hints, "
                               "session id, priority or cache TTL; docs/do-no-harm.md)")


@dataclass
class AdviseSettings:
    """``pbkv-bench advise``: should this workload run with PBKV on this hardware?"""

    trace: Path = _trace()
    profile: Optional[str] = option(None, f"hardware profile (pbkv-bench profiles; default {DEFAULT_PROFILE} "
                                          "unless --gpu-memory is given)")
    gpu_memory: Optional[float] = option(None, f"memory of each GPU in GiB, at most {MAX_GPU_MEMORY_GIB:g} (H100 "
                                               "80GB: 79.6); with --model, instead of --profile")
    model: Optional[str] = option(None, f"with --gpu-memory: {', '.join(MODEL_SPECS)} (or its Hugging Face id)")
    tp: int = option(1, f"with --gpu-memory: GPUs serving the model (tensor parallel, 1..{MAX_TP}); not with "
                        "--profile")
    gpu: str = option("h100", f"with --gpu-memory: whose speeds ({' | '.join(GPU_SPECS)}); not with --profile")
    concurrency: int = _concurrency()
    host_ratio: float = option(1.0, "host KV tier = RATIO x device (default 1: the PBKV paper's setup)")
    predictor: str = _predictor()
    engine: str = option(DEFAULT_ENGINE, f"the inference engine you serve with ({' | '.join(ENGINES)}): the verdict "
                                          "compares PBKV with the best policy it ships")
    reference: bool = option(True, "also replay the offline reference (opt), which replays the trace up to "
                                   "--order-runs times: most of advise's time on a day of traffic; --no-reference "
                                   "skips it, and the verdict then cannot say that even opt gains nothing")
    order_runs: int = _order_runs(ADVISE_ORDER_RUNS, f"the studies' reference runs {MAX_ORDER_RUNS} "
                                                     "(docs/replay-cost.md)")
    plot: Optional[Path] = option(None, "write the figure here (PNG)")
    json_out: Optional[Path] = _json_out("the figures")
    slo_ttft: Optional[float] = _slo_ttft()
    slo_tpot: Optional[float] = _slo_tpot()
