"""Closed-loop replay: invariants of the driver, hand-checked timings and hit rates, belady's oracle."""

from __future__ import annotations

import math

import pytest

from .sim_fixtures import make_end, make_inv, unit_profile  # noqa: F401 (fixture)
from pbkv_contract.trace import TraceFormatError
from pbkv_server.predictors import make_predictor
from pbkv_server.sim.future import TraceFuture, reference_order
from pbkv_server.sim.simulator import (ReplayConfig, ReplayOptions, SimulationError, load_workload, simulate,
                                      static_graphs)
from pbkv_server.sim.synth.agents import generate


def test_single_request_timing_by_hand(unit_profile):
    # 1000 uncached tokens at 1000 tok/s -> first token at 1.0 s; 3 output tokens -> two more decode
    # steps of 0.1 s -> finished at 1.2 s; the recorded trailing gap of 0.5 s -> workflow ends at 1.7 s.
    records = [make_inv("w", 0, "a", ["k1", "k2"], [600, 400], out=3, t_start=0.0, t_end=2.0), make_end("w", 2.5)]
    result = simulate(load_workload(records), ReplayConfig("lru", unit_profile), ReplayOptions(concurrency=1))
    arrival, first, finish = result.metrics.request_times()["w#0"]
    assert (arrival, first, finish) == pytest.approx((0.0, 1.0, 1.2))
    assert result.summary["mean_ttft_s"] == pytest.approx(1.0)
    assert result.summary["mean_latency_s"] == pytest.approx(1.7)
    assert result.summary["hit_rate"] == 0.0


def test_prefix_reuse_within_a_workflow_is_a_device_hit(unit_profile):
    # Step 1 extends step 0's prompt by block k3: its 600 + 400 tokens are device hits.
    records = [
        make_inv("w", 0, "a", ["k1", "k2"], [600, 400], t_start=0.0, t_end=1.0),
        make_inv("w", 1, "a", ["k1", "k2", "k3"], [600, 400, 500], t_start=3.0, t_end=4.0),
        make_end("w", 4.0),
    ]
    result = simulate(load_workload(records), ReplayConfig("lru", unit_profile), ReplayOptions(concurrency=1))
    assert result.summary["hit_rate"] == pytest.approx(1000 / 2500)
    # The 2.0 s tool gap is replayed: step 1 arrives 2.0 s after step 0 finished (1.2 s).
    times = result.metrics.request_times()
    assert times["w#1"][0] == pytest.approx(times["w#0"][2] + 2.0)
    # Step 1: 500 new tokens prefilled -> first token 0.5 s after arrival.
    assert times["w#1"][1] - times["w#1"][0] == pytest.approx(0.5)


@pytest.mark.parametrize("concurrency", [1, 3, 8])
def test_closed_loop_keeps_at_most_c_workflows_in_flight(unit_profile, concurrency):
    records = list(generate("codegen", 12, seed=11, block_chars=1024))
    workload = load_workload(records)
    result = simulate(workload, ReplayConfig("lru", unit_profile), ReplayOptions(concurrency=concurrency))
    spans = result.metrics.workflow_spans()
    assert len(spans) == 12
    order = [u.unit_id for u in workload.units]
    starts = sorted(spans.values())
    # Workflows start in trace order; the first C at time 0, each later one when another ends.
    assert [w for w, _ in sorted(spans.items(), key=lambda kv: (kv[1][0], order.index(kv[0])))] == order
    assert all(s == 0.0 for s, _ in starts[:concurrency])
    ends = {e for _, e in spans.values()}
    assert all(s in ends for s, _ in starts[concurrency:])
    for t, _ in starts:
        assert sum(1 for s, e in spans.values() if s <= t < e) <= concurrency
    # Every request served once; every workflow ended in the engine.
    stats = result.engine.stats
    assert result.summary["requests"] == workload.invocations
    assert stats.prompt_tokens == sum(r.prompt_tokens for r in records if hasattr(r, "prompt_tokens"))
    assert stats.active_workflows == 0 and stats.retired_workflows == 12 and not result.engine.busy


def test_tool_gaps_are_replayed_as_recorded(unit_profile):
    records = list(generate("research", 5, seed=2, block_chars=1024))
    workload = load_workload(records)
    result = simulate(workload, ReplayConfig("he", unit_profile),
                      ReplayOptions(concurrency=2, predictor=make_predictor("oracle", 3, records)))
    times = result.metrics.request_times()
    for wf in workload.units:
        for j in range(len(wf.requests) - 1):
            finish = times[wf.requests[j].request_id][2]
            arrival = times[wf.requests[j + 1].request_id][0]
            assert arrival == pytest.approx(finish + wf.gaps_s[j])


def test_load_workload_sorts_steps_and_rejects_empty_traces():
    records = [make_inv("w", 1, "b", ["x"], [5], t_start=5.0, t_end=6.0),
               make_inv("w", 0, "a", ["y"], [5], t_start=0.0, t_end=2.0)]
    wf = load_workload(records).units[0]
    assert wf.agents == ["a", "b"] and wf.gaps_s == [3.0, 0.0] and wf.ends == [None, ("w", 0.0, "completed")]
    with pytest.raises(TraceFormatError):
        load_workload([make_end("w", 1.0)])


def test_prompt_larger_than_device_is_a_clear_simulation_error(unit_profile):
    records = [make_inv("w", 0, "a", ["k"], [200_000])]
    with pytest.raises(SimulationError, match="w#0"):
        simulate(load_workload(records), ReplayConfig("lru", unit_profile), ReplayOptions(concurrency=1))


def test_static_graph_is_the_union_of_observed_transitions():
    records = [make_inv("w1", 0, "p", ["a"], [1]), make_inv("w1", 1, "c", ["b"], [1]),
               make_inv("w2", 0, "p", ["a"], [1]), make_inv("w2", 1, "t", ["d"], [1])]
    assert static_graphs(load_workload(records)) == {"app": {"p": ["c", "t"], "c": [], "t": []}}


def test_reference_order_by_hand():
    # C=1: w0 runs [0, 1+2) and [3, 4+0) -> ends 4; w1 starts at 4.
    times = reference_order([[1.0, 1.0], [2.0]], [[2.0, 0.0], [0.0]], concurrency=1)
    assert times == [[0.0, 3.0], [4.0]]
    # C=2: both start at 0.
    assert reference_order([[1.0, 1.0], [2.0]], [[2.0, 0.0], [0.0]], concurrency=2) == [[0.0, 3.0], [0.0]]


def test_trace_future_skips_served_requests_and_the_one_being_admitted():
    future = TraceFuture({"r0": (0.0, ["a", "b"]), "r1": (5.0, ["a"]), "r2": (9.0, ["b", "a"])})
    assert future.next_use("a") == 0.0
    assert future.next_use("zzz") == math.inf
    future.bind(0, "r0")
    assert future.next_use("a", now_index=0) == 5.0  # r0 is being admitted: its own use is now
    assert future.next_use("b", now_index=0) == 9.0
    future.consume("r2")
    assert future.next_use("b") == math.inf
    assert future.next_use("a") == 5.0
    future.consume("r1")
    assert future.next_use("a") == math.inf


def test_repeated_step_numbers_still_replay_every_invocation(unit_profile, caplog):
    """A workflow whose client restarted its step count (steps 0, 1, 0): all three invocations are
    replayed in (step, t_start) order, with distinct request ids, and a warning names it."""
    records = [make_inv("w", 0, "a", ["x"], [5], t_start=0.0, t_end=1.0),
               make_inv("w", 1, "b", ["y"], [5], t_start=2.0, t_end=3.0),
               make_inv("w", 0, "c", ["z"], [5], t_start=4.0, t_end=5.0)]
    workload = load_workload(records)
    wf = workload.units[0]
    assert wf.agents == ["a", "c", "b"]
    assert len({r.request_id for r in wf.requests}) == 3
    assert "repeats step 0" in caplog.text
    result = simulate(workload, ReplayConfig("lru", unit_profile), ReplayOptions(concurrency=1))
    assert result.summary["requests"] == 3 and result.engine.stats.prompt_tokens == 15


def test_a_session_runs_its_workflows_in_order_each_after_its_think_time(unit_profile):
    """Two chat turns of one conversation (session ``c``) are two workflows: the replay starts the
    second turn only after the first finished plus the recorded think time (10 s), ends each turn's
    workflow after its own trailing gap, and counts both workflows but one closed-loop unit."""
    from pbkv_contract.trace import InvocationRecord, WorkflowEndRecord

    def turn(wid, t0, t1, blocks):
        return [InvocationRecord(app="chat", workflow_id=wid, step=0, agent="assistant", t_start=t0, t_end=t1,
                                 prompt_tokens=5 * len(blocks), completion_tokens=3, prefix_hashes=blocks,
                                 block_tokens=[5] * len(blocks), session_id="c"),
                WorkflowEndRecord(app="chat", workflow_id=wid, t=t1 + 1.0)]

    records = turn("c-t0", 0.0, 1.0, ["s", "u0"]) + turn("c-t1", 11.0, 12.0, ["s", "u0", "r0", "u1"])
    workload = load_workload(records)
    assert len(workload.units) == 1 and workload.workflow_count == 2
    unit = workload.units[0]
    assert unit.workflow_ids == ["c-t0", "c-t1"] and unit.gaps_s == [10.0, 1.0]
    assert unit.ends == [("c-t0", 1.0, "completed"), ("c-t1", 1.0, "completed")]
    result = simulate(workload, ReplayConfig("lru", unit_profile), ReplayOptions(concurrency=4))
    times = result.metrics.request_times()
    assert times["c-t1#0"][0] == pytest.approx(times["c-t0#0"][2] + 10.0)
    spans = result.metrics.workflow_spans()
    assert spans["c-t0"][1] == pytest.approx(times["c-t0#0"][2] + 1.0)
    assert set(spans) == {"c-t0", "c-t1"} and result.engine.stats.device_hit_tokens == 10  # "s u0" reused
