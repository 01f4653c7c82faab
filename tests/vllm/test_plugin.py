"""The plugin loads through vLLM's own entry-point discovery; bad settings stop vLLM at start."""

import pytest

pytest.importorskip("vllm.v1.core.block_pool")  # the real vLLM, not this tests/vllm directory


@pytest.fixture
def clean_install():
    from pbkv_server.backends.vllm import block_pool

    block_pool.uninstall()
    yield
    block_pool.uninstall()


def test_entry_point_registers_connector_and_offload_policy_and_pool(monkeypatch, clean_install):
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
    from vllm.plugins import DEFAULT_PLUGINS_GROUP, load_plugins_by_group
    from vllm.v1.core import kv_cache_coordinator
    from vllm.v1.kv_offload.cpu.policies.factory import CachePolicyFactory

    from pbkv_server.backends.vllm.block_pool import PBKVBlockPool
    from pbkv_server.backends.vllm.connector import PBKVConnector
    from pbkv_server.backends.vllm.offload_policy import PBKVCachePolicy

    monkeypatch.delenv("VLLM_PLUGINS", raising=False)
    monkeypatch.setenv("PBKV_VLLM_POLICY", "pbkv-lae")
    plugins = load_plugins_by_group(DEFAULT_PLUGINS_GROUP)  # vLLM's discovery of vllm.general_plugins
    assert "pbkv" in plugins
    plugins["pbkv"]()
    plugins["pbkv"]()  # idempotent: vLLM calls it in every process, maybe twice
    assert KVConnectorFactory.get_connector_class_by_name("PBKVConnector") is PBKVConnector
    assert CachePolicyFactory.get_cache_policy_cls("pbkv") is PBKVCachePolicy
    assert kv_cache_coordinator.BlockPool is PBKVBlockPool


def test_without_a_policy_vllm_prefix_cache_is_untouched(monkeypatch, clean_install):
    from vllm.v1.core import kv_cache_coordinator
    from vllm.v1.core.block_pool import BlockPool

    from pbkv_server.backends.vllm.plugin import register

    monkeypatch.delenv("PBKV_VLLM_POLICY", raising=False)
    register()
    assert kv_cache_coordinator.BlockPool is BlockPool


@pytest.mark.parametrize("env, message", [
    ({"PBKV_VLLM_POLICY": "kvflow"}, "not a PBKV plugin policy"),
    ({"PBKV_VLLM_POLICY": "pbkv", "PBKV_VLLM_CONFIG": '{"gama": 0.5}'}, "unknown key"),
    ({"PBKV_VLLM_POLICY": "pbkv", "PBKV_VLLM_CONFIG": "[1]"}, "must be a JSON object"),
])
def test_bad_settings_raise_at_registration(monkeypatch, clean_install, env, message):
    from vllm.v1.core import kv_cache_coordinator

    from pbkv_server.backends.vllm.block_pool import PBKVBlockPool
    from pbkv_server.backends.vllm.plugin import register

    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(ValueError, match=message):
        register()
    assert kv_cache_coordinator.BlockPool is not PBKVBlockPool
