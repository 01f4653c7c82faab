"""``scripts/make_replay_cost_docs.py``: docs/replay-cost.md's tables are rendered from
``benchmarks/sim_speed.py --trace ... --json``, for the settings and commands the page names."""
from __future__ import annotations

import pytest

from .scripts_loader import load_script


@pytest.fixture(scope="module")
def docs():
    return load_script("make_replay_cost_docs")


def _data(docs) -> dict:
    data = {}
    for i, (trace, host) in enumerate(docs.SETTINGS):
        rows = [{"policy": "lru", "cpu_s": 4.0, "invocations_per_cpu_s": 1600.0, "order_runs": 1,
                 "mean_latency_s": 100.0, "order_run_mean_latency_s": None},
                {"policy": "pbkv", "cpu_s": 8.0, "invocations_per_cpu_s": 800.0, "order_runs": 1,
                 "mean_latency_s": 90.0, "order_run_mean_latency_s": None},
                {"policy": "opt", "cpu_s": 20.0, "invocations_per_cpu_s": 320.0, "order_runs": 2,
                 "order_runs_limit": docs.ADVISE_ORDER_RUNS, "mean_latency_s": 80.0,
                 "order_run_mean_latency_s": [125.0, 80.0]},
                {"policy": "opt", "cpu_s": 48.0, "invocations_per_cpu_s": 133.0, "order_runs": 3,
                 "order_runs_limit": docs.MAX_ORDER_RUNS, "mean_latency_s": 50.0,
                 "order_run_mean_latency_s": [125.0, 80.0, 50.0]}]
        data[str(i)] = {"trace": f"{trace}.jsonl", "invocations": 6400, "profile": docs.PROFILE,
                        "concurrency": docs.CONCURRENCY, "device_tokens": docs.DEVICE,
                        "host_tokens": int(host * docs.DEVICE), "commit": "abc1234", "load_average": 2.5,
                        "rows": rows}
    return data


def test_rows_targets_and_order_runs(docs):
    body = docs.block(_data(docs))
    # ratios to lru by hand: 8 / 4 = 2.0x, 20 / 4 = 5.0x (at the target, so met); 800 < 1,000 inv/s: not met
    assert "| cc120-conversation | 1x | 6,400 | pbkv | 1 | 8.0 | 800 | 2.0x | not met | abc1234, 2.5 |" in body
    assert "| cc120-turn | 0x | 6,400 | opt | 2 | 20.0 | 320 | 5.0x | met | abc1234, 2.5 |" in body
    # the studies' opt (8 runs) is shown, and the target is judged at advise's runs only: 48 / 4 = 12.0x
    assert "| cc120-turn | 0x | 6,400 | opt | 3 | 48.0 | 133 | 12.0x | (at most 8 runs) | abc1234, 2.5 |" in body
    # opt's speedup after each run, from the row of the most runs: 100 / 125, 100 / 80, 100 / 50
    assert "| cc120-turn | 1x | 100 | 0.800x, 1.250x, 2.000x |" in body
    assert docs.ADVISE_ORDER_RUNS == 3 and docs.MAX_ORDER_RUNS == 8  # the figures above assume them
    for command in docs.COMMANDS:
        assert f"- `{command}`" in body
    page = "intro\n<!-- replay-cost:begin -->\nold\n<!-- replay-cost:end -->\ntail\n"
    out = docs.render(page, body)
    assert "old" not in out and body in out and docs.render(out, body) == out


def test_a_missing_setting_or_another_json_is_refused(docs):
    data = _data(docs)
    del data["3"]
    with pytest.raises(docs.InputError, match="no figures for cc120-turn host 0x"):
        docs.block(data)
    data = _data(docs)
    del data["0"]["rows"][0]["cpu_s"]
    with pytest.raises(docs.InputError, match="not the JSON of benchmarks/sim_speed.py"):
        docs.block(data)
    with pytest.raises(docs.InputError, match="not the JSON"):
        docs.block([])


def test_committed_block_is_what_the_committed_json_renders(docs):
    assert docs.main(["--check"]) == 0
