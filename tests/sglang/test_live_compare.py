"""``pbkv-bench live-compare`` (live-replay + simulator) against the real servers shared with
test_live_server.py: one workflow at a time, SGLang reports the hits computed by hand and
the simulator the same hit rate, while the pool (4,096 tokens) is smaller than the trace's 5,180
distinct prompt tokens, so both evict on the way."""

import json

import pytest
from typer.testing import CliRunner

pytest.importorskip("sglang.srt.plugins")  # the real SGLang, not this tests/sglang directory

from pbkv_contract.trace import InvocationRecord, TraceWriter, WorkflowEndRecord  # noqa: E402


def _trace(path):
    """6 workflows x 3 steps; each step appends 280 tokens to the workflow's prompt after a shared
    140-token system block (14 blocks of 10 + 28 per step): 420, 700, 980 tokens."""
    with TraceWriter(path) as writer:
        for w in range(6):
            for step in range(3):
                hashes = [f"sys{k}" for k in range(14)] + [f"w{w}-{k}" for k in range(28 * (step + 1))]
                writer.write(InvocationRecord(app="cmp", workflow_id=f"w{w}", step=step, agent=("plan", "code", "test")[step],
                                              t_start=10.0 * step, t_end=10.0 * step + 1,
                                              prompt_tokens=10 * len(hashes), completion_tokens=1,
                                              prefix_hashes=hashes, block_tokens=[10] * len(hashes)))
            writer.write(WorkflowEndRecord(app="cmp", workflow_id=f"w{w}", t=30.0))


@pytest.mark.parametrize("policy", ["lru", "pbkv"])
def test_one_workflow_at_a_time_the_simulator_matches_sglang_exactly(live_servers, tmp_path, policy):
    from pbkv_server.cli.bench import app

    server = live_servers(policy)
    server.flush()
    trace = tmp_path / "t.jsonl"
    _trace(trace)
    out = tmp_path / "cmp.json"
    result = CliRunner().invoke(app, ["live-compare", str(trace), "--target", server.url, "--concurrency", "1",
                                      "--json", str(out)], terminal_width=200)
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    live, sim = data["live"], data["sim"]
    assert data["settings"]["device_tokens"] == 4096 and data["settings"]["policy"] == policy
    assert live["requests"] == 18 and live["errors"] == 0 and live["end_signals"] == 6
    assert live["prompt_tokens"] == 6 * (420 + 700 + 980)
    # By hand, without eviction: step 0 hits the system block (140) except in the first workflow,
    # steps 1 and 2 hit the whole previous prompt (420, 700): 5 x 140 + 6 x 1,120 = 7,420.
    # The pool of 4,096 holds every workflow's own history at C=1, so eviction costs no hit.
    assert live["cached_tokens"] == 7420
    assert sim["hit_rate"] == pytest.approx(live["hit_rate"], abs=1e-12)
