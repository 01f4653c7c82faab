"""The engine core's workflow table (pbkv_server.engine.workflows), used by Engine and the SGLang plugin."""

from __future__ import annotations

import itertools
import logging

import pytest

from pbkv_contract.hints import Hints
from pbkv_server.engine.scoring import NodeScore, ScoreBoard
from pbkv_server.engine.types import EngineStats
from pbkv_server.engine.workflows import WorkflowTracker
from pbkv_contract.prediction import END_AGENT, Prediction


class RecordingPredictor:
    """Fixed prediction; records every call in ``calls``; ``fail`` makes predict/workflow_ended raise."""

    horizon = 2

    def __init__(self, prediction: Prediction | None = None, fail: bool = False, calls: list | None = None):
        self.prediction = prediction or Prediction([{END_AGENT: 1.0}, {END_AGENT: 1.0}])
        self.fail = fail
        self.calls = calls if calls is not None else []

    def observe(self, query):
        self.calls.append(("observe", query.workflow_id, query.agent, query.history, query.app))

    def predict(self, queries):
        self.calls.append(("predict", queries[0].workflow_id))
        if self.fail:
            raise RuntimeError("predictor bug")
        return [self.prediction for _ in queries]

    def workflow_ended(self, app, workflow_id, status="completed"):
        self.calls.append(("ended", app, workflow_id, status))
        if self.fail:
            raise RuntimeError("predictor bug")


def hints(wf: str, agent: str, step: int, app: str | None = "app") -> Hints:
    return Hints(workflow_id=wf, agent=agent, step=step, app=app)


def test_invocation_predicts_rescores_touched_nodes_and_records_latencies_on_the_fake_clock():
    board = ScoreBoard(gamma=0.5, horizon=2)
    # P1 = {x: .25, y: .25, END: .5}, P2 = {x: 1}: weight of x = 1 * 1 * .25 + .5 * (1 - .5) * 1 = 0.5
    pred = RecordingPredictor(Prediction([{"x": 0.25, "y": 0.25, END_AGENT: 0.5}, {"x": 1.0}]))
    stats = EngineStats()
    ticks = itertools.count()  # each clock read advances 1 s: t0 = 0, t1 = 1, t2 = 2
    tracker = WorkflowTracker(board, pred, stats=stats, latency_clock=lambda: float(next(ticks)))
    rec = NodeScore("node-1")
    board.touch(rec, "A", "x")  # A_A(node) = {x}, no prediction yet: score 0
    wf, changed = tracker.invocation(hints("A", "x", 0), (), now=5.0)
    assert changed == [rec] and rec.score == pytest.approx(0.5)
    assert wf.history == ["x"] and wf.last_activity == 5.0 and wf.last_step == 0
    assert list(stats.predictor_call_s) == [1.0]  # t1 - t0
    assert list(stats.score_update_s) == [1.0]  # (t2 - t1) / 1 node
    wf2, changed = tracker.invocation(hints("A", "y", 1), (), now=7.0)
    assert wf2 is wf and wf.history == ["x", "y"] and wf.agent == "y" and wf.last_activity == 7.0
    assert changed == []  # same prediction: nothing to re-file
    # the second query saw the history before its own agent
    assert ("observe", "A", "y", ("x",), "app") in pred.calls
    assert stats.score_update_nodes == 2 and tracker.invocations == 2


def test_predict_false_only_observes():
    pred = RecordingPredictor()
    tracker = WorkflowTracker(ScoreBoard(0.7, 2), pred, predict=False)
    tracker.invocation(hints("A", "x", 0), (), now=0.0)
    assert [c[0] for c in pred.calls] == ["observe"]


@pytest.mark.parametrize("follow_app, expected", [(False, "first"), (True, "second")])
def test_app_of_a_later_invocation_replaces_the_first_only_with_follow_app(follow_app, expected):
    tracker = WorkflowTracker(ScoreBoard(0.7, 2), None, follow_app=follow_app)
    tracker.invocation(hints("A", "x", 0, app="first"), (), now=0.0)
    wf, _ = tracker.invocation(hints("A", "y", 1, app="second"), (), now=1.0)
    assert wf.app == expected


def test_end_drops_the_workflow_calls_on_end_before_the_predictor_and_is_idempotent():
    calls: list = []
    board = ScoreBoard(0.7, 2)
    pred = RecordingPredictor(calls=calls)
    tracker = WorkflowTracker(board, pred, on_end=lambda wf, recs: calls.append(("on_end", wf.workflow_id, recs)))
    tracker.invocation(hints("A", "x", 0), (), now=0.0)
    rec = NodeScore("node")
    board.touch(rec, "A", "x")
    calls.clear()
    wf = tracker.end("A", "failed")
    assert wf is not None and wf.workflow_id == "A" and "A" not in tracker.workflows
    assert calls == [("on_end", "A", [rec]), ("ended", "app", "A", "failed")]
    assert rec.retired and tracker.ended == 1
    assert tracker.end("A") is None and tracker.end("never-seen") is None
    assert tracker.ended == 1 and len(calls) == 2


def test_idle_retirement_goes_least_recently_active_first_and_spares_workflows_in_flight():
    pred = RecordingPredictor()
    tracker = WorkflowTracker(ScoreBoard(0.7, 2), pred, predict=False)
    tracker.invocation(hints("A", "a", 0), (), now=0.0)
    b, _ = tracker.invocation(hints("B", "b", 0), (), now=1.0)
    tracker.invocation(hints("C", "c", 0), (), now=2.0)
    tracker.invocation(hints("A", "a", 1), (), now=3.0)  # order by activity: B(1) C(2) A(3)
    b.inflight = 1
    # horizon 10 - 8 = 2: B is old but in flight, C (2 <= 2) goes, A (3 > 2) stops the scan
    assert tracker.retire_idle(now=10.0, idle_s=8.0) == ["C"]
    tracker.finished(b, now=4.0)  # B: nothing in flight, active at 4 -> order A(3) B(4)
    assert b.inflight == 0 and list(tracker.workflows) == ["A", "B"]
    assert tracker.retire_idle(now=11.9, idle_s=8.0) == ["A"]  # horizon 3.9
    assert tracker.retire_idle(now=12.0, idle_s=8.0) == ["B"]  # horizon 4.0: 4 <= 4
    assert [c for c in pred.calls if c[0] == "ended"] == [
        ("ended", "app", "C", "cancelled"), ("ended", "app", "A", "cancelled"), ("ended", "app", "B", "cancelled")]
    assert tracker.retired_idle == 3 and tracker.ended == 3 and not tracker.workflows
    assert tracker.retire_idle(now=100.0, idle_s=None) == []


def test_predictor_failure_is_counted_and_logged_once_never_raised(caplog):
    pred = RecordingPredictor(fail=True)
    tracker = WorkflowTracker(ScoreBoard(0.7, 2), pred)
    with caplog.at_level(logging.ERROR, logger="pbkv_server.engine.workflows"):
        wf, changed = tracker.invocation(hints("A", "x", 0), (), now=0.0)
        wf2, _ = tracker.invocation(hints("A", "y", 1), (), now=1.0)
        ended = tracker.end("A")
    assert changed == [] and wf2 is wf and wf.history == ["x", "y"]  # the invocations still count
    assert ended is wf and tracker.predictor_errors == 3
    assert len([r for r in caplog.records if r.name == "pbkv_server.engine.workflows"]) == 1
