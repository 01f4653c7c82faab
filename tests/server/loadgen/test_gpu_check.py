"""``pbkv_server.loadgen.gpu_check``: the GPU scripts' plugin check and their live-vs-simulated
table, against stand-in servers (httpx.MockTransport) and hand-computed speedups. The check on
real SGLang servers is tests/sglang/test_gpu_check_active.py."""
from __future__ import annotations

import json

import httpx
import pytest

from pbkv_server.loadgen import gpu_check


def _client(server_info: dict, hints_status: int = 200, header: bool = True, end_status: int = 204) -> httpx.Client:
    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/server_info":
            return httpx.Response(200, json=server_info)
        if request.url.path == "/pbkv/v1/kv_hints":
            return httpx.Response(hints_status, headers={"X-PBKV-KV-Hints": "v=1"} if header else {})
        if request.url.path.startswith("/pbkv/v1/workflows/"):
            return httpx.Response(end_status)
        return httpx.Response(404)
    return httpx.Client(transport=httpx.MockTransport(handle))


PLUGIN = {"radix_cache_backend": "pbkv", "radix_eviction_policy": "pbkv"}


def test_sglang_plugin_server_passes():
    assert gpu_check.sglang_plugin_problems("http://s", _client(PLUGIN)) == []


@pytest.mark.parametrize("info,hints_status,header,expected", [
    ({"radix_eviction_policy": "pbkv"}, 200, True, "radix_cache_backend is None"),
    ({**PLUGIN, "radix_eviction_policy": "lru"}, 200, True, "radix_eviction_policy is 'lru'"),
    (PLUGIN, 404, True, "answered 404"),
    (PLUGIN, 200, False, "no X-PBKV-KV-Hints header"),
])
def test_sglang_check_names_what_is_missing(info, hints_status, header, expected):
    problems = gpu_check.sglang_plugin_problems("http://s", _client(info, hints_status, header))
    assert len(problems) == 1 and expected in problems[0], problems


def test_vllm_check():
    assert gpu_check.vllm_plugin_problems("http://v", _client({})) == []
    problems = gpu_check.vllm_plugin_problems("http://v", _client({}, end_status=404, header=False))
    assert problems == ["POST /pbkv/v1/workflows/{workflow_id}/end answered 404, not 204",
                        "GET /pbkv/v1/kv_hints has no X-PBKV-KV-Hints header"]


def test_unreachable_server_is_a_problem_not_a_crash():
    def refuse(request):
        raise httpx.ConnectError("refused", request=request)
    client = httpx.Client(transport=httpx.MockTransport(refuse))
    assert gpu_check.sglang_plugin_problems("http://s", client)[0].startswith("GET /server_info failed")


def _payload(ttft: float, wf: float, hit: float, sim_ttft: float, sim_wf: float, sim_hit: float) -> dict:
    return {"live": {"ttft_mean_s": ttft, "workflow_latency_mean_s": wf, "hit_rate": hit},
            "sim": {"mean_ttft_s": sim_ttft, "mean_latency_s": sim_wf, "hit_rate": sim_hit}}


def test_compare_rows_by_hand(tmp_path, capsys):
    runs = {"lru": _payload(2.0, 10.0, 0.4, 1.0, 12.0, 0.41), "pbkv": _payload(1.6, 8.0, 0.55, 0.8, 10.0, 0.56)}
    rows = gpu_check.compare_rows(runs, "lru")
    pbkv = rows[1]
    # live TTFT 2.0 / 1.6, live workflow 10 / 8, simulated 1.0 / 0.8 and 12 / 10; live / sim 1.25 / 1.2
    assert pbkv["live_ttft_speedup"] == pytest.approx(1.25) and pbkv["sim_ttft_speedup"] == pytest.approx(1.25)
    assert pbkv["live_workflow_speedup"] == pytest.approx(1.25) and pbkv["sim_workflow_speedup"] == pytest.approx(1.2)
    assert pbkv["live_over_sim"] == pytest.approx(1.25 / 1.2)
    assert rows[0]["live_workflow_speedup"] == 1.0
    for name, p in runs.items():
        (tmp_path / f"compare_{name}.json").write_text(json.dumps(p))
    assert gpu_check.main(["compare", str(tmp_path), "lru", "pbkv"]) == 0
    line = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("pbkv ")][0]
    assert line.split() == ["pbkv", "0.550", "0.560", "1.250", "1.250", "1.250", "1.200", "1.042"]


def test_active_exit_status(monkeypatch, capsys):
    monkeypatch.setattr(gpu_check, "sglang_plugin_problems", lambda url: ["backend missing"])
    assert gpu_check.main(["active", "sglang", "http://s"]) == gpu_check.NOT_ACTIVE
    assert "PBKV plugin NOT active at http://s: backend missing" in capsys.readouterr().err
    monkeypatch.setattr(gpu_check, "vllm_plugin_problems", lambda url: [])
    assert gpu_check.main(["active", "vllm", "http://v"]) == 0


def test_sim_vllm_writes_live_compare_form(tmp_path):
    from pbkv_server.sim.synth.agents import write_trace

    trace = tmp_path / "t.jsonl"
    write_trace(str(trace), graph="mixed", workflows=4, seed=0)
    live = tmp_path / "replay_lru.json"
    live.write_text(json.dumps({"hit_rate": 0.3, "ttft_mean_s": 0.1, "workflow_latency_mean_s": 1.0, "results": []}))
    out = tmp_path / "compare_lru.json"
    assert gpu_check.main(["sim-vllm", str(trace), "--live", str(live), "--policy", "lru", "--device-tokens", "20000",
                           "--concurrency", "2", "--max-output-tokens", "16", "--profile", "h200-qwen3-32b",
                           "--out", str(out)]) == 0
    payload = json.loads(out.read_text())
    assert payload["live"] == {"hit_rate": 0.3, "ttft_mean_s": 0.1, "workflow_latency_mean_s": 1.0}
    assert payload["settings"]["device_tokens"] == 20000 and payload["settings"]["page_size"] == 16
    assert 0.0 <= payload["sim"]["hit_rate"] <= 1.0 and payload["sim"]["mean_latency_s"] > 0


def test_sim_vllm_pool_too_small_is_one_line(tmp_path, capsys):
    from pbkv_server.sim.synth.agents import write_trace

    trace = tmp_path / "t.jsonl"
    write_trace(str(trace), graph="mixed", workflows=4, seed=0)
    live = tmp_path / "replay_lru.json"
    live.write_text(json.dumps({"hit_rate": 0.3, "ttft_mean_s": 0.1, "workflow_latency_mean_s": 1.0}))
    assert gpu_check.main(["sim-vllm", str(trace), "--live", str(live), "--policy", "lru", "--device-tokens", "64",
                           "--concurrency", "2", "--profile", "h200-qwen3-32b", "--out", str(tmp_path / "c.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("sim-vllm: ") and "the device holds 64" in err[0]
