"""``python -m pbkv_server.loadgen.gpu_check active sglang URL`` on real SGLang servers (CPU): the
check the GPU script runs before it compares (issue 34 item 6) passes on the plugin's server and
names what is missing on SGLang's own LRU server."""

import pytest

pytest.importorskip("sglang.srt.plugins")  # the real SGLang, not this tests/sglang directory


def test_plugin_server_passes_and_lru_server_fails(live_servers):
    from pbkv_server.loadgen.gpu_check import main, sglang_plugin_problems

    pbkv, lru = live_servers("pbkv"), live_servers("lru")
    assert sglang_plugin_problems(pbkv.url) == []
    problems = sglang_plugin_problems(lru.url)
    assert any("radix_cache_backend" in p for p in problems), problems
    assert any("radix_eviction_policy is 'lru'" in p for p in problems), problems
    assert main(["active", "sglang", pbkv.url]) == 0
    assert main(["active", "sglang", lru.url]) == 3
