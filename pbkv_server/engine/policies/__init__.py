"""Eviction policies, one small module each, registered by name (lower priority = evicted first)."""

from .base import (
    BASELINE_POLICY, DEFAULT_POLICY, ENTRY_POINT_GROUP, REFERENCE_POLICY, REPLAY, SERVER, SGLANG, Policy,
    PolicyInfo, available_policies, make_policy, policy_info, register_policy, resolve_policy_name,
    sglang_policy_names, unregister_policy,
)
from . import lru, lae, he, pbkv, pbkv_aggressive, kvflow, belady  # noqa: F401  (registration)

__all__ = [
    "Policy", "PolicyInfo", "available_policies", "make_policy", "register_policy", "unregister_policy",
    "policy_info", "resolve_policy_name", "sglang_policy_names", "REPLAY", "SERVER", "SGLANG",
    "BASELINE_POLICY", "DEFAULT_POLICY", "REFERENCE_POLICY", "ENTRY_POINT_GROUP",
]
