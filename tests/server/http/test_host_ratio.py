"""``pbkv-server --host-ratio`` and ``--threads``: the host tier follows --device-tokens, torch is
limited before a model file loads."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

import pbkv_server.http.runner as runner_mod
from pbkv_server.cli.server import ServeSettings, app
from pbkv_server.http.config import ServerConfig
from pbkv_server.http.service import engine_config_from
from pbkv_server.hardware.profiles import DEFAULT_PROFILE, get_profile


def test_host_tokens_follow_device_tokens_and_ratio():
    assert ServerConfig(device_tokens=4096).host_tokens == 8192  # default ratio 2 (SGLang HiCache)
    assert ServerConfig(device_tokens=4096, host_ratio=1).host_tokens == 4096  # the PBKV paper's baseline
    assert ServerConfig(device_tokens=4096, host_ratio=0).host_tokens == 0
    assert ServerConfig(device_tokens=4096, host_ratio=1, host_tokens=10).host_tokens == 10
    assert ServerConfig(host_ratio=1).host_tokens == get_profile(DEFAULT_PROFILE).device_kv_tokens
    assert ServerConfig().host_tokens is None  # the profile's own sizes
    config = ServeSettings(policy="lru", predictors=[], idle_retire_s=60, device_tokens=5000, host_ratio=1.5)
    assert engine_config_from(config).host_tokens == 7500
    with pytest.raises(ValueError, match="host ratio"):
        ServerConfig(device_tokens=4096, host_ratio=float("inf"))


def test_bad_host_ratio_exits_2():
    result = CliRunner().invoke(app, ["--host-ratio", "-1", "--port", "0"])
    assert result.exit_code == 2


def test_threads_are_limited_before_the_model_loads(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    model = tmp_path / "m.pt"
    model.write_bytes(b"not loaded here")  # serve_forever (which loads it) is replaced below
    seen = {}

    def fake_serve(config, announce=None):
        seen.update(threads=torch.get_num_threads(), host=config.host_tokens)

    monkeypatch.setattr(runner_mod, "serve_forever", fake_serve)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        result = CliRunner().invoke(app, ["--port", "0", "--policy", "pbkv", "--predictor", str(model),
                                          "--device-tokens", "4096", "--host-ratio", "1", "--threads", "1"])
        assert result.exit_code == 0, result.output
        assert seen == {"threads": 1, "host": 4096}
    finally:
        torch.set_num_threads(before)
