"""The plugin loads through SGLang's own ``load_plugins()`` and its flags parse."""

import pytest

pytest.importorskip("sglang.srt.plugins")  # the real SGLang, not this tests/sglang directory


def test_load_plugins_registers_policies_backends_and_hooks(plugins_loaded):
    from sglang.srt.arg_groups.choices import RADIX_EVICTION_POLICY_CHOICES
    from sglang.srt.mem_cache.registry import registered_radix_cache_backends
    from sglang.srt.mem_cache.unified_cache.tree_core_registry import registered_tree_core_backends
    from sglang.srt.mem_cache.utils import get_eviction_strategy
    from sglang.srt.plugins.hook_registry import HookRegistry

    from pbkv_server.backends.sglang.plugin import (SCHEDULER_BATCH_TARGET, SCHEDULER_CLOSE_SESSION_TARGET,
                                                    SCHEDULER_DISPATCH_TARGET)
    from pbkv_server.backends.sglang.strategy import strategy_class

    # each plugin policy is an SGLang choice whose strategy ranks like the engine policy it names
    for name, engine_name in (("pbkv", "pbkv"), ("pbkv-he", "he"), ("pbkv-lae", "lae")):
        assert name in RADIX_EVICTION_POLICY_CHOICES
        strategy = get_eviction_strategy(name)
        assert type(strategy) is strategy_class(name)
        assert strategy.engine_policy.name == engine_name
    assert get_eviction_strategy("pbkv").prefetch and not get_eviction_strategy("pbkv-he").prefetch
    assert "pbkv" in registered_radix_cache_backends()
    assert "pbkv" in registered_tree_core_backends()
    assert {SCHEDULER_BATCH_TARGET, SCHEDULER_DISPATCH_TARGET, SCHEDULER_CLOSE_SESSION_TARGET} <= HookRegistry._patched


def test_loading_twice_registers_each_policy_once(plugins_loaded):
    from sglang.srt.arg_groups.choices import RADIX_EVICTION_POLICY_CHOICES

    from pbkv_server.backends.sglang.plugin import register

    register()
    register()
    assert RADIX_EVICTION_POLICY_CHOICES.count("pbkv") == 1


def test_a_policy_registered_in_the_registry_becomes_an_sglang_choice(plugins_loaded):
    # One class and its registration, nothing else: the plugin's choices follow the registry.
    from sglang.srt.mem_cache.utils import get_eviction_strategy
    from sglang.srt.server_args import prepare_server_args

    from pbkv_server.backends.sglang.plugin import register
    from pbkv_server.engine.policies import Policy, register_policy, unregister_policy

    @register_policy("toy-largest")
    class ToyLargestFirst(Policy):
        """Largest node first, LRU among equals."""

        sglang_name = "pbkv-toy-largest"

        def priority(self, node) -> tuple:
            return (-node.tokens, node.last_access)

    try:
        register()
        args = prepare_server_args(["--model-path", "dummy", "--radix-eviction-policy", "pbkv-toy-largest"])
        assert args.radix_eviction_policy == "pbkv-toy-largest"
        strategy = get_eviction_strategy("pbkv-toy-largest")
        assert strategy.engine_policy.name == "toy-largest" and not strategy.prefetch
    finally:
        unregister_policy("toy-largest")


def test_server_flags_parse_policy_backend_and_config(plugins_loaded):
    from sglang.srt.server_args import prepare_server_args

    args = prepare_server_args([
        "--model-path", "dummy", "--radix-eviction-policy", "pbkv-he", "--radix-cache-backend", "pbkv",
        "--radix-eviction-policy-config", '{"gamma": 0.5, "horizon": 2, "predictor": "uniform"}',
    ])
    assert args.radix_eviction_policy == "pbkv-he"
    assert args.radix_cache_backend == "pbkv"
    assert args.radix_eviction_policy_config == {"gamma": 0.5, "horizon": 2, "predictor": "uniform"}


def test_unknown_policy_name_is_rejected_by_the_parser(plugins_loaded):
    from sglang.srt.server_args import prepare_server_args

    with pytest.raises(SystemExit):
        prepare_server_args(["--model-path", "dummy", "--radix-eviction-policy", "pbkv-nope"])


def test_policy_config_reaches_the_strategy_and_bad_keys_fail(plugins_loaded):
    from sglang.srt.mem_cache.utils import get_eviction_strategy

    strategy = get_eviction_strategy("pbkv", {"gamma": 0.5, "horizon": 2, "prefetch": False})
    assert (strategy.settings.gamma, strategy.settings.horizon, strategy.prefetch) == (0.5, 2, False)
    assert get_eviction_strategy("pbkv").prefetch is True
    assert get_eviction_strategy("pbkv-he").prefetch is False
    with pytest.raises(ValueError, match="unknown key"):
        get_eviction_strategy("pbkv", {"gama": 0.5})
    with pytest.raises(ValueError, match="gamma"):
        get_eviction_strategy("pbkv-he", {"gamma": 1.5})


def test_backend_factory_forces_the_pbkv_python_tree_core(harness):
    from sglang.srt.mem_cache.unified_cache.unified_tree_core import UnifiedTreeCore

    from pbkv_server.backends.sglang.tree_core import PBKVTreeCore

    h = harness("pbkv-he", kv_tokens=32)
    assert isinstance(h.cache.tree_core, PBKVTreeCore)
    assert isinstance(h.cache.tree_core, UnifiedTreeCore)  # SGLang's Python core, not the Rust one


def test_pbkv_cache_refuses_a_tree_core_without_node_records(plugins_loaded):
    import torch
    from sglang.srt.mem_cache.allocator import TokenToKVPoolAllocator
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool
    from sglang.srt.mem_cache.unified_cache.components.base import ComponentType

    from pbkv_server.backends.sglang.cache import PBKVRadixCache

    kv = MHATokenToKVPool(size=16, page_size=1, dtype=torch.float16, head_num=1, head_dim=4, layer_num=1,
                          device="cpu", enable_memory_saver=False)
    alloc = TokenToKVPoolAllocator(size=16, dtype=torch.float16, device="cpu", kvcache=kv, need_sort=False)
    params = CacheInitParams(disable=False, req_to_token_pool=ReqToTokenPool(size=2, max_context_len=16, device="cpu",
                                                                             enable_memory_saver=False),
                             token_to_kv_pool_allocator=alloc, page_size=1, eviction_policy="pbkv",
                             tree_components=(ComponentType.FULL,), tree_core_backend="python")
    with pytest.raises(TypeError, match="tree core backend 'pbkv'"):
        PBKVRadixCache(params)
