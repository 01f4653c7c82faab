"""``pbkv-server --engine sglang`` builds the right command and the launched SGLang has the plugin."""

import sys

import pytest

pytest.importorskip("sglang.srt.plugins")  # the real SGLang, not this tests/sglang directory

from pbkv_server.backends.sglang.launch import LaunchError, build_command, main  # noqa: E402


def test_pbkv_policies_add_the_backend_flag_and_builtins_do_not():
    cmd = build_command("pbkv", ["--model-path", "m"], python="py")
    assert cmd == ["py", "-m", "sglang.launch_server", "--model-path", "m", "--radix-eviction-policy", "pbkv",
                   "--radix-cache-backend", "pbkv"]
    assert build_command("he", [], python="py")[-3:] == ["pbkv-he", "--radix-cache-backend", "pbkv"]
    assert build_command("lru", [], python="py")[-2:] == ["--radix-eviction-policy", "lru"]


def test_flags_owned_by_the_launcher_are_refused():
    with pytest.raises(LaunchError):
        build_command("pbkv", ["--radix-eviction-policy=lru"], python="py")
    assert main("pbkv", ["--radix-cache-backend", "x"]) == 2
    with pytest.raises(LaunchError, match="simulator"):
        build_command("kvflow", [], python="py")


def test_launched_sglang_lists_the_plugin_policies(capfd, monkeypatch):
    monkeypatch.setenv("PBKV_SGLANG_PYTHON", sys.executable)
    assert main("pbkv-lae", ["--help"]) == 0
    out = capfd.readouterr().out
    assert "{lru,lfu,slru,priority,tlru,pbkv-lae,pbkv-he,pbkv}" in out
