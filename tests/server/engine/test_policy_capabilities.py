"""A policy's capabilities follow from what it overrides, asked in one place (issue 32).

A policy that overrides :meth:`Policy.holds` and sets nothing else is asked about its victims; a
policy that overrides nothing has no capability; the hook names are those of
:class:`~pbkv_server.engine.policies.base.Lifecycle`, written there once.
"""

from __future__ import annotations

import time

import pytest

from pbkv_server.engine import AcquireRequest, EngineConfig, EngineStats, PrefixCache, ScoreBoard
from pbkv_server.engine.policies import Policy, register_policy, unregister_policy
from pbkv_server.engine.policies.base import (
    CAPABILITIES, NO_HOOKS, Lifecycle, Pins, Prefetching, QueueOrder, capability_methods,
)
from pbkv_server.engine.policies.lru import LRUPolicy
from pbkv_server.hardware.profiles import get_profile


class _HoldsA(LRUPolicy):
    """LRU that holds every node whose first key starts with ``a`` (only ``holds`` overridden)."""

    def priority(self, node) -> tuple:
        return (1 if self.holds(node) else 0, node.last_access)  # held nodes rank last

    def holds(self, node) -> bool:
        return str(node.keys[0]).startswith("a")


@pytest.fixture
def holds_a():
    register_policy("test-holds-a")(_HoldsA)
    yield "test-holds-a"
    unregister_policy("test-holds-a")


def _context():
    return _cache("lru").context


def _cache(policy: str) -> PrefixCache:
    config = EngineConfig(profile=get_profile("h100-qwen2.5-32b"), policy=policy, device_tokens=64, host_tokens=0)
    return PrefixCache(config, ScoreBoard(config.gamma, config.horizon), EngineStats(), time.perf_counter)


def _put(cache: PrefixCache, prefix: str, now: float) -> None:
    keys = [f"{prefix}{j}" for j in range(16)]
    got = cache.acquire(AcquireRequest(keys, [1] * 16, list(range(17)), 0, now, None, None))
    cache.release(got.end, 0)


def test_a_policy_that_overrides_holds_is_asked_without_a_flag(holds_a):
    cache = _cache(holds_a)
    assert cache.policy.capability(Pins) is cache.policy
    _put(cache, "a", 0.0)  # the oldest: plain LRU would take it first
    _put(cache, "b", 1.0)
    assert cache.evict_device(32) == 16  # only b's 16 tokens: a is held
    assert cache.tree.device_tokens == 16


def test_lru_has_no_capability():
    policy = LRUPolicy(_context())
    assert all(policy.capability(kind) is None for kind in CAPABILITIES)


def test_every_capability_is_derived_from_overrides():
    class Queue(LRUPolicy):
        def pick_waiting(self, waiting) -> int:
            return 0

    class Prefetch(LRUPolicy):
        def prefetch_plan(self, seconds: float):
            return None

    class Hook(LRUPolicy):
        def on_graph(self, app: str) -> None:
            pass

    assert Queue(_context()).capability(QueueOrder) is not None and Queue(_context()).capability(Prefetching) is None
    assert Prefetch(_context()).capability(Prefetching) is not None and Prefetch(_context()).capability(Lifecycle) is None
    assert Hook(_context()).capability(Lifecycle) is not None and Hook(_context()).capability(Pins) is None
    with pytest.raises(ValueError, match="unknown policy capability"):
        LRUPolicy(_context()).capability(int)


def test_the_hook_names_are_written_once():
    hooks = capability_methods(Lifecycle)
    assert hooks == ("on_admit", "on_prompt_cached", "on_invocation", "on_workflow_end", "on_finish", "on_session_close", "on_split",
                     "on_drop", "on_graph")
    # the policy inherits them from Lifecycle rather than writing them again
    assert all(getattr(Policy, name) is getattr(Lifecycle, name) for name in hooks)
    assert all(name in dir(NO_HOOKS) for name in hooks)
    assert capability_methods(Pins) == ("holds", "keeps", "relieve", "expire")
