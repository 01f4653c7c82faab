"""Configuration shared by the engine backends' plugins (SGLang, vLLM).

Every plugin reads the same knobs (lookahead decay and horizon, predictor, idle retirement,
prefetch budget) from its engine's own configuration channel: SGLang's
``--radix-eviction-policy-config`` JSON, vLLM's ``PBKV_VLLM_CONFIG`` JSON. This module imports no
engine.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

from pbkv_server.engine.policies import policy_info
from pbkv_server.predictors.factory import DEFAULT_ONLINE_PREDICTOR

__all__ = ["PluginSettings"]


@dataclass(frozen=True, slots=True)
class PluginSettings:
    """Knobs of the plugin (all optional in the JSON object).

    Attributes:
        gamma: per-step decay of the lookahead score, in (0, 1] (PBKV Eq. 2).
        horizon: K, future steps scored (>= 1).
        predictor: ``context`` (online, no training; the default), ``markov``, ``uniform``, or a path
            to a trained model file
            (see :func:`pbkv_server.predictors.factory.make_predictor`).
        idle_retire_s: seconds without a request after which a workflow is retired (client crash);
            ``None`` = never.
        prefetch: run conservative prefetch; ``None`` = on for the policies that declare prefetch
            (``policy_info(name).prefetches``).
        pcie_bytes_per_s: host->device copy bandwidth used for the prefetch budget, bytes/s.
        kv_bytes_per_token: KV bytes of one token; ``None`` = read from the device KV pool.
        default_step_s: decode-step time assumed until one is measured, seconds.
        min_prefetch_tokens: smallest host node worth a ``load_back``, tokens.

    Raises:
        ValueError: (from :meth:`from_kwargs`) an unknown key or a value out of range.
    """

    gamma: float = 0.7
    horizon: int = 3
    predictor: str = DEFAULT_ONLINE_PREDICTOR
    idle_retire_s: float | None = 600.0
    prefetch: bool | None = None
    pcie_bytes_per_s: float = 25e9
    kv_bytes_per_token: int | None = None
    default_step_s: float = 0.02
    min_prefetch_tokens: int = 1

    @classmethod
    def from_kwargs(cls, policy: str, kwargs: Mapping[str, Any] | None,
                    source: str = "--radix-eviction-policy-config") -> "PluginSettings":
        """Validate ``kwargs`` (the policy-config JSON object; ``source`` names where it came from
        in error messages) for eviction policy ``policy``."""
        kwargs = dict(kwargs or {})
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise ValueError(
                f"{source}: unknown key(s) {unknown} for policy {policy!r}; "
                f"known: {sorted(known)}"
            )
        settings = cls(**kwargs)
        settings._check()
        return settings

    def prefetch_enabled(self, policy: str) -> bool:
        """Whether prefetch runs under eviction policy ``policy`` (an SGLang or engine name)."""
        return policy_info(policy).prefetches if self.prefetch is None else bool(self.prefetch)

    def _check(self) -> None:
        if not 0.0 < float(self.gamma) <= 1.0:
            raise ValueError(f"gamma must be in (0, 1], got {self.gamma}")
        if not isinstance(self.horizon, int) or self.horizon < 1:
            raise ValueError(f"horizon must be an integer >= 1, got {self.horizon}")
        if self.idle_retire_s is not None and self.idle_retire_s <= 0:
            raise ValueError("idle_retire_s must be > 0 or null")
        if self.pcie_bytes_per_s <= 0 or self.default_step_s <= 0:
            raise ValueError("pcie_bytes_per_s and default_step_s must be > 0")
        if self.kv_bytes_per_token is not None and self.kv_bytes_per_token <= 0:
            raise ValueError("kv_bytes_per_token must be > 0 or null")
        if self.min_prefetch_tokens < 1:
            raise ValueError("min_prefetch_tokens must be >= 1")
        if not isinstance(self.predictor, str) or not self.predictor:
            raise ValueError("predictor must be a non-empty string")
