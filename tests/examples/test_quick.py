"""Each runner's --quick path runs end to end (embedded server, real app, traces, training, replay).

Hermetic: the runners read fixture data sets written here (PBKV_DATA_DIR), the server binds a free
port on 127.0.0.1, and nothing reaches the network.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from .examples_fixtures import write_data_dir

from pbkv_contract.trace import InvocationRecord, WorkflowEndRecord, read_trace
from pbkv_server.engine.policies import REFERENCE_POLICY, REPLAY, available_policies, policy_info
from pbkv_server.hardware.profiles import get_profile
from pbkv_server.sim.simulator import ReplayConfig, ReplayOptions, load_workload, simulate

REPO = Path(__file__).resolve().parents[2]

CASES = {
    "hover_langchain": ({"decomposer", "query_writer", "summarizer", "verifier"}, 72),
    "swe_autogen": ({"planner", "coder", "tester", "analyzer"}, 24),
    "finance_crewai": ({"Filing Researcher", "Financial Analyst", "Answer Writer", "Answer Reviewer"}, 48),
}
#: Every registered policy that replays online, in registration order, then the offline reference.
POLICIES = [p for p in available_policies(REPLAY) if not policy_info(p).offline] + [REFERENCE_POLICY]


@pytest.fixture(scope="module")
def quick_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_data_dir(tmp_path_factory.mktemp("quick-data"), quick_sizes=True)


@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("example", sorted(CASES))
def test_quick_run_writes_traces_table_plots_and_json(example: str, quick_data: Path, tmp_path: Path) -> None:
    agents, concurrency = CASES[example]
    out_json = tmp_path / "summary.json"
    env = {**os.environ, "PBKV_DATA_DIR": str(quick_data), "CREWAI_DISABLE_TELEMETRY": "true",
           "OTEL_SDK_DISABLED": "true", "CREWAI_TRACING_ENABLED": "false"}
    proc = subprocess.run(
        [sys.executable, "-m", f"examples.{example}", "--quick", "--json", str(out_json), "--out-dir", str(tmp_path)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=1190,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    text = " ".join(proc.stdout.split())  # table titles and captions wrap at the console width
    assert "speedup vs LRU = LRU mean latency / policy mean latency (x, >1 faster)" in text
    assert "per-agent mean TTFT" in proc.stdout and "host 1x" in text

    summary = json.loads(out_json.read_text())
    assert summary["quick"] is True and summary["replay_concurrency"] == concurrency
    assert list(summary["policies"]) == POLICIES
    assert {"lru", "lae", "he", "pbkv", "pbkv-aggressive", "kvflow", "opt"} <= set(POLICIES)
    # Every ratio is the policy's own figures over LRU's, recomputed here from the rows.
    lru = summary["policies"]["lru"]
    ref = summary["policies"][REFERENCE_POLICY]
    for name, result in summary["policies"].items():
        comp = summary["comparison"][name]
        assert comp["latency_speedup"] == pytest.approx(lru["mean_latency_s"] / result["mean_latency_s"], rel=1e-12), name
        assert comp["hit_rate_ratio"] == pytest.approx(result["hit_rate"] / lru["hit_rate"], rel=1e-12), name
        assert comp["hit_rate_gap_to_ref"] == pytest.approx(ref["hit_rate"] - result["hit_rate"], abs=1e-12), name
        assert set(result["ttft_by_agent"]) == agents, name
    # LRU's row is the replay of the recorded test trace at the summary's setup, replayed again here.
    config = ReplayConfig("lru", get_profile(summary["profile"]), device_tokens=summary["device_tokens"],
                          host_tokens=summary["host_tokens"])
    again = simulate(load_workload(read_trace(summary["traces"]["test"])), config,
                     ReplayOptions(concurrency=concurrency)).summary
    for key in ("hit_rate", "host_hit_rate", "mean_latency_s", "p99_latency_s", "mean_ttft_s"):
        assert lru[key] == again[key], key
    for plot in summary["plots"].values():
        assert Path(plot).stat().st_size > 1000

    # The SDK recorded one workflow per test task, every call stamped with a real agent name.
    records = read_trace(summary["traces"]["test"])
    invocations = [r for r in records if isinstance(r, InvocationRecord)]
    ends = {r.workflow_id for r in records if isinstance(r, WorkflowEndRecord)}
    assert len({r.workflow_id for r in invocations}) == summary["test_tasks"] == len(ends)
    assert {r.agent for r in invocations} == agents
    # The default is the paper's setup: the profile's GPU-memory capacity, a host tier of the same size.
    assert summary["setup"] == "paper" and summary["host_ratio"] == 1.0
    assert summary["device_tokens"] == summary["host_tokens"] == get_profile(summary["profile"]).device_kv_tokens
    assert "setup paper: device = GPU memory of profile" in proc.stdout and "where the mean workflow latency goes" in proc.stdout
