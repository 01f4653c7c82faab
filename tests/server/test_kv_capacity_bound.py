"""Absurd KV capacities are refused in one line (issue 35: ``--device-tokens 1e23`` was accepted and
printed as a device size), by the rule every tool shares (``MAX_KV_TOKENS``)."""
from __future__ import annotations

import sys

import pytest

from pbkv_server.cli.entry import pbkv_bench, pbkv_server
from pbkv_server.hardware.profiles import MAX_KV_TOKENS, get_profile, host_tokens_for
from pbkv_server.http.config import ServerConfig


def test_the_bound_holds_72_gpus_of_1_tib_at_1_kib_per_token():
    from pbkv_server.sim.advise import MAX_GPU_MEMORY_GIB, MAX_TP

    largest = MAX_TP * MAX_GPU_MEMORY_GIB * 2**30 / 1024  # 7.7e10 tokens
    assert largest <= MAX_KV_TOKENS < 10 * largest


@pytest.mark.parametrize("entry, args", [
    (pbkv_bench, ["replay", "t.jsonl", "--device-tokens", str(10**23)]),
    (pbkv_bench, ["replay", "t.jsonl", "--host-tokens", str(MAX_KV_TOKENS + 1)]),
    (pbkv_server, ["--device-tokens", str(10**23)]),
])
def test_a_capacity_beyond_the_bound_is_one_line_naming_the_flag(monkeypatch, capsys, entry, args):
    monkeypatch.setattr(sys, "argv", ["prog", *args])
    assert entry() == 2
    err = capsys.readouterr().err
    flag = args[-2]
    assert err.count("\n") == 1 and f"Invalid value for '{flag}'" in err and f"{MAX_KV_TOKENS}" in err


def test_python_callers_meet_the_same_bound():
    with pytest.raises(ValueError, match="device_tokens must be at most 100,000,000,000"):
        ServerConfig(device_tokens=10**23)
    with pytest.raises(ValueError, match="host tokens must be at most"):
        host_tokens_for(get_profile("a6000-qwen3-14b"), None, MAX_KV_TOKENS + 1)
    assert host_tokens_for(get_profile("a6000-qwen3-14b"), MAX_KV_TOKENS, None, 0.0) == 0
