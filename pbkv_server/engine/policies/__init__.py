"""Eviction policies, one small module each, registered by name (lower priority = evicted first)."""

from .base import Policy, available_policies, make_policy, register_policy
from . import lru, lae, he, pbkv, pbkv_aggressive, kvflow, belady  # noqa: F401  (registration)

__all__ = ["Policy", "available_policies", "make_policy", "register_policy"]
