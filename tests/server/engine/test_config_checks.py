"""EngineConfig checks its own settings at construction: one line naming the field."""

from __future__ import annotations

import pytest

from pbkv_server.engine import EngineConfig
from pbkv_server.hardware.profiles import get_profile

PROFILE = get_profile("h100-qwen2.5-32b")


@pytest.mark.parametrize(("setting", "line"), [
    ({"device_tokens": 0}, "device_tokens must be >= 1 token, got 0"),
    ({"host_tokens": -1}, "host_tokens must be >= 0 tokens, got -1"),
    ({"horizon": 0}, "horizon must be >= 1, got 0"),
    ({"gamma": 0.0}, "gamma must be in (0, 1], got 0.0"),
    ({"gamma": float("nan")}, "gamma must be in (0, 1], got nan"),
    ({"rho": 1.5}, "rho must be in [0, 1], got 1.5"),
    ({"max_batch": 0}, "max_batch must be >= 1, got 0"),
    ({"page_size": 0}, "page_size must be >= 1 token, got 0"),
    # counts of another type are named as such (a float page would fail in every request's paging)
    ({"page_size": 16.0}, "page_size must be a whole number, got 16.0"),
    ({"device_tokens": 4096.7}, "device_tokens must be a whole number, got 4096.7"),
    ({"device_tokens": float("inf")}, "device_tokens must be a whole number, got inf"),
    ({"device_tokens": "4096"}, "device_tokens must be a whole number, got '4096'"),
    ({"max_batch": 2.5}, "max_batch must be a whole number, got 2.5"),
    ({"horizon": True}, "horizon must be a whole number, got True"),
    ({"gamma": "0.5"}, "gamma must be in (0, 1], got '0.5'"),
    ({"max_active_workflows": 64.5}, "max_active_workflows must be a whole number, got 64.5"),
    ({"max_ended_ids": "64"}, "max_ended_ids must be a whole number, got '64'"),
    ({"idle_retire_s": -1}, "idle_retire_s must be a finite number of seconds >= 0 or None, got -1"),
    ({"idle_retire_s": float("nan")}, "idle_retire_s must be a finite number of seconds >= 0 or None, got nan"),
    ({"horizon": 0, "device_tokens": 0.5}, "device_tokens must be a whole number, got 0.5"),  # field order
])
def test_a_setting_out_of_range_is_one_line_naming_it(setting, line):
    with pytest.raises(ValueError) as info:
        EngineConfig(profile=PROFILE, **setting)
    assert str(info.value) == line


def test_the_edges_of_each_range_are_valid():
    config = EngineConfig(profile=PROFILE, device_tokens=1, host_tokens=0, horizon=1, gamma=1.0, rho=0.0, max_batch=1,
                          page_size=1)
    assert (config.device_tokens, config.host_tokens, config.gamma, config.rho) == (1, 0, 1.0, 0.0)
    assert EngineConfig(profile=PROFILE, rho=1.0).rho == 1.0  # None capacities: the profile's, checked by it
    import numpy as np
    assert EngineConfig(profile=PROFILE, device_tokens=np.int64(4096), page_size=np.int32(16)).page_size == 16
