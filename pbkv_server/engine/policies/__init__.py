"""Eviction policies, one small module each, registered by name (lower priority = evicted first).

The built-in modules are imported in a fixed order (the order of tables and listings); any other
module placed in this package is imported after them, so an in-tree policy is one new module with
its ``@register_policy`` class and nothing else to edit.
"""

import importlib
import pkgutil

from .base import (
    BASELINE_POLICY, DEFAULT_POLICY, ENTRY_POINT_GROUP, HEADLINE_POLICIES, REAL_TRAFFIC_POLICIES, REFERENCE_POLICY,
    REPLAY, SERVER, SGLANG, Policy,    PolicyInfo, available_policies, make_policy, parse_policy_list, parse_sglang_policy_list, policy_info, register_policy, resolve_policy_name,
    sglang_policy_names, unregister_policy,
)
# PBKV and its baselines, then what users run today (docs/architecture.md, "Compared policies"),
# then the offline references
from . import lru, lae, he, pbkv, pbkv_paper, pbkv_aggressive, kvflow  # noqa: F401  (registration)
from . import sglang_session, sglang_priority, ttl_pin, continuum, spec_prefill, kvflow_shipped, tlru, slru  # noqa: F401
from . import opt, belady, opt_hybrids, pbkv_nextuse  # noqa: F401

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    importlib.import_module(f"{__name__}.{_module}")  # modules already imported are not re-run

__all__ = [
    "Policy", "PolicyInfo", "available_policies", "make_policy", "register_policy", "unregister_policy",
    "parse_policy_list", "parse_sglang_policy_list", "policy_info", "resolve_policy_name", "sglang_policy_names", "REPLAY", "SERVER", "SGLANG",
    "BASELINE_POLICY", "DEFAULT_POLICY", "REFERENCE_POLICY", "HEADLINE_POLICIES", "REAL_TRAFFIC_POLICIES",
    "ENTRY_POINT_GROUP",
]
