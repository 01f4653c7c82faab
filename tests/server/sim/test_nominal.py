"""Nominal, seeded re-timing of traces (pbkv_server.sim.nominal): a function of seed and content only."""

from __future__ import annotations

import hashlib
import random

import pytest

from pbkv_contract.trace import InvocationRecord, WorkflowEndRecord
from pbkv_server.sim import nominal
from pbkv_server.sim.nominal import EPOCH, HANDOFF_GAP_S, retime
from pbkv_server.sim.simulator import load_workload


def _call(wid: str, step: int, agent: str, t0: float, dur: float, prompt: int = 400, out: int = 20,
          cached: int | None = 100, session: str | None = None) -> InvocationRecord:
    return InvocationRecord(app="a", workflow_id=wid, step=step, agent=agent, t_start=t0, t_end=t0 + dur,
                            ttft_s=dur / 3, prompt_tokens=prompt, completion_tokens=out, prefix_hashes=["h1", "h2"],
                            cached_tokens=cached, session_id=session)


def _recording(slow: float) -> list:
    """Two workflows as a machine records them; ``slow`` seconds of extra load in every gap and call,
    and the workflows finishing in the other order (concurrent recording)."""
    return [
        _call("w2", 0, "planner", 100.0, 1.0 + slow),
        _call("w1", 0, "planner", 50.0, 0.5 + slow),
        _call("w1", 1, "searcher", 51.0 + 2 * slow, 0.7 + slow, prompt=900, out=40),
        WorkflowEndRecord(app="a", workflow_id="w1", t=60.0 + 3 * slow),
        _call("w2", 1, "coder", 103.0 + 3 * slow, 2.0, cached=None),
        WorkflowEndRecord(app="a", workflow_id="w2", t=110.0 + 5 * slow),
    ]


def _independent_uniform(seed: int, key: tuple, low: float, high: float) -> float:
    """The documented draw, computed here from its definition (SHA-256 of the joined key)."""
    text = "\x1f".join(str(p) for p in (seed, *key))
    return random.Random(int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")).uniform(low, high)


def test_retimed_traces_of_a_fast_and_a_loaded_recording_are_identical():
    fast, loaded = retime(_recording(0.0), seed=3), retime(_recording(4.0), seed=3)
    assert [r.to_json() for r in fast] == [r.to_json() for r in loaded]
    assert retime(_recording(0.0), seed=4) != fast  # the seed does matter


def test_times_follow_the_nominal_rule_and_the_keyed_gaps():
    tool = {"searcher": (1.0, 2.0)}
    out = retime(_recording(0.0), seed=7, tool_gaps=tool)
    # records keep their order and everything but the times and cached tokens
    assert [(r.workflow_id, getattr(r, "step", None)) for r in out] == [
        ("w2", 0), ("w1", 0), ("w1", 1), ("w1", None), ("w2", 1), ("w2", None)]
    w2_0, w1_0, w1_1, w1_end, w2_1, w2_end = out
    assert all(r.cached_tokens is None for r in (w2_0, w1_0, w1_1, w2_1))
    assert w1_1.prompt_tokens == 900 and w1_1.prefix_hashes == ["h1", "h2"]
    # duration: 0.1 s + 400 prompt tokens / 4000 per s + 20 output tokens x 25 ms = 0.7 s
    assert w1_0.ttft_s == pytest.approx(0.2) and w1_0.t_end - w1_0.t_start == pytest.approx(0.7, abs=2e-3)
    # 900 prompt, 40 output tokens: 0.325 s + 1.0 s
    assert w1_1.t_end - w1_1.t_start == pytest.approx(1.325, abs=2e-3)
    # gaps: the planner hands off (framework range), the searcher's tool runs (its own range)
    handoff = _independent_uniform(7, ("gap", "w1", 0, "planner"), *HANDOFF_GAP_S)
    assert w1_1.t_start - w1_0.t_end == pytest.approx(handoff, abs=2e-3)
    search = _independent_uniform(7, ("gap", "w1", 1, "searcher"), 1.0, 2.0)
    assert 1.0 <= search <= 2.0 and w1_end.t - w1_1.t_end == pytest.approx(search, abs=2e-3)
    # workflows start from EPOCH in order of first appearance, exponential gaps keyed by workflow id
    first = random.Random(int.from_bytes(hashlib.sha256("7\x1farrival\x1fw2".encode()).digest()[:8], "little"))
    assert w2_0.t_start == pytest.approx(EPOCH + first.expovariate(1 / nominal.MEAN_INTERARRIVAL_S), abs=1e-3)
    assert w1_0.t_start > w2_0.t_start
    assert w2_end.t > w2_1.t_end


def test_a_workflows_gaps_do_not_depend_on_the_other_workflows():
    alone = retime([r for r in _recording(0.0) if r.workflow_id == "w1"], seed=1)
    both = [r for r in retime(_recording(0.0), seed=1) if r.workflow_id == "w1"]
    gaps = lambda rs: [round(b.t_start - a.t_end, 3) for a, b in zip(rs, rs[1:]) if isinstance(b, InvocationRecord)]
    assert gaps(alone) == gaps(both)


def test_the_workflows_of_a_session_follow_each_other():
    recs = [_call("t1", 0, "chat", 0.0, 1.0, session="s"), _call("t2", 0, "chat", 0.5, 1.0, session="s")]
    t1, t2 = retime(recs, seed=0)
    assert t2.t_start >= t1.t_end


def test_replay_reads_the_nominal_gaps():
    out = retime(_recording(0.0), seed=2, tool_gaps={"searcher": (1.0, 2.0)})
    units = {u.unit_id: u for u in load_workload(out).units}
    w1 = [r for r in out if r.workflow_id == "w1"]
    assert units["w1"].gaps_s == pytest.approx([w1[1].t_start - w1[0].t_end, w1[2].t - w1[1].t_end])
