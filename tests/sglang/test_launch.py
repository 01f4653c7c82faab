"""``pbkv-server --engine sglang`` builds the right command and the launched SGLang has the plugin."""

import re
import sys

import pytest

pytest.importorskip("sglang.srt.plugins")  # the real SGLang, not this tests/sglang directory

from pbkv_server.backends.sglang.launch import LaunchError, build_command, build_env, main  # noqa: E402


def test_pbkv_policies_add_the_backend_flag_and_builtins_do_not():
    cmd = build_command("pbkv", ["--model-path", "m"], python="py")
    assert cmd == ["py", "-m", "sglang.launch_server", "--model-path", "m", "--radix-eviction-policy", "pbkv",
                   "--radix-cache-backend", "pbkv", "--enable-cache-report"]
    assert build_command("he", [], python="py")[-4:-1] == ["pbkv-he", "--radix-cache-backend", "pbkv"]
    assert build_command("lru", [], python="py")[-3:] == ["--radix-eviction-policy", "lru", "--enable-cache-report"]


def test_cache_report_is_turned_on_once():
    assert build_command("lru", ["--enable-cache-report"], python="py").count("--enable-cache-report") == 1


def test_cpu_device_selects_sglangs_cpu_engine_unless_the_user_chose():
    assert build_env(["--device", "cpu"], {})["SGLANG_USE_CPU_ENGINE"] == "1"
    assert build_env(["--device=cpu"], {})["SGLANG_USE_CPU_ENGINE"] == "1"
    assert "SGLANG_USE_CPU_ENGINE" not in build_env(["--device", "cuda"], {})
    assert build_env(["--device", "cpu"], {"SGLANG_USE_CPU_ENGINE": "0"})["SGLANG_USE_CPU_ENGINE"] == "0"
    assert build_env([], {"SGLANG_PLUGINS": "other"})["SGLANG_PLUGINS"] == "other,pbkv"


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
    # SGLang's own five, then every SGLang name of a registered policy (a new one joins the list)
    from pbkv_server.engine.policies import sglang_policy_names

    choices = re.search(r"--radix-eviction-policy \{([^}]*)\}", out)
    assert choices is not None, out[-2000:]
    assert set(choices.group(1).split(",")) == {"lru", "lfu", "slru", "priority", "tlru",
                                                *sglang_policy_names()}
    assert {"pbkv", "pbkv-paper", "pbkv-he", "pbkv-lae"} <= set(sglang_policy_names())
