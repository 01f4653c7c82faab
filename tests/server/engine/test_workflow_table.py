"""The engine core's workflow table (pbkv_server.engine.workflows): one lifecycle for the engine, the
HTTP server and the engine backends (idempotent ends, idle retirement, table bound, reused ids)."""

from __future__ import annotations

import itertools
import logging

import pytest

from pbkv_contract.hints import Hints
from pbkv_server.engine.scoring import NodeScore, ScoreBoard
from pbkv_server.engine.types import EngineStats
from pbkv_server.engine.workflows import END_CLIENT, END_IDLE, END_TABLE_FULL, WorkflowTable
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
    reported: list = []  # what on_changed received, one list per call
    table = WorkflowTable(board, pred, stats=stats, latency_clock=lambda: float(next(ticks)), on_changed=reported.append)
    rec = NodeScore("node-1")
    board.touch(rec, "A", "x")  # A_A(node) = {x}, no prediction yet: score 0
    wf = table.invocation(hints("A", "x", 0), (), now=5.0)
    assert reported == [[rec]] and rec.score == pytest.approx(0.5)
    assert wf.history == ["x"] and wf.last_activity == 5.0 and wf.last_step == 0
    assert list(stats.predictor_call_s) == [1.0]  # t1 - t0
    assert list(stats.score_update_s) == [1.0]  # (t2 - t1) / 1 node
    wf2 = table.invocation(hints("A", "y", 1), (), now=7.0)
    assert wf2 is wf and wf.history == ["x", "y"] and wf.agent == "y" and wf.last_activity == 7.0
    assert reported == [[rec]]  # same prediction: nothing to re-file, no call
    # the second query saw the history before its own agent
    assert ("observe", "A", "y", ("x",), "app") in pred.calls
    assert stats.score_update_nodes == 2 and table.invocations == 2


def test_predict_false_only_observes():
    pred = RecordingPredictor()
    table = WorkflowTable(ScoreBoard(0.7, 2), pred, predict=False)
    table.invocation(hints("A", "x", 0), (), now=0.0)
    assert [c[0] for c in pred.calls] == ["observe"]


@pytest.mark.parametrize("follow_app, expected", [(False, "first"), (True, "second")])
def test_app_of_a_later_invocation_replaces_the_first_only_with_follow_app(follow_app, expected):
    table = WorkflowTable(ScoreBoard(0.7, 2), None, follow_app=follow_app)
    table.invocation(hints("A", "x", 0, app="first"), (), now=0.0)
    wf = table.invocation(hints("A", "y", 1, app="second"), (), now=1.0)
    assert wf.app == expected


def test_end_drops_the_workflow_calls_on_end_before_the_predictor_and_is_idempotent():
    calls: list = []
    board = ScoreBoard(0.7, 2)
    pred = RecordingPredictor(calls=calls)
    table = WorkflowTable(board, pred, on_end=lambda wf, recs, status, reason: calls.append(
        ("on_end", wf.workflow_id, recs, status, reason)))
    table.invocation(hints("A", "x", 0), (), now=0.0)
    table.invocation(hints("A", "y", 1), (), now=1.0)
    rec = NodeScore("node")
    board.touch(rec, "A", "x")
    calls.clear()
    wf = table.end("A", "failed")
    assert wf is not None and wf.workflow_id == "A" and "A" not in table.workflows
    assert calls == [("on_end", "A", [rec], "failed", END_CLIENT), ("ended", "app", "A", "failed")]
    assert rec.retired and rec.finished_private and table.ended == 1  # A made two invocations
    assert table.end("A") is None and table.end("never-seen") is None
    assert table.ended == 1 and len(calls) == 2


def test_idle_retirement_goes_least_recently_active_first_and_spares_workflows_in_flight():
    pred = RecordingPredictor()
    table = WorkflowTable(ScoreBoard(0.7, 2), pred, predict=False)
    table.invocation(hints("A", "a", 0), (), now=0.0)
    b = table.invocation(hints("B", "b", 0), (), now=1.0)
    table.invocation(hints("C", "c", 0), (), now=2.0)
    table.invocation(hints("A", "a", 1), (), now=3.0)  # order by activity: B(1) C(2) A(3)
    b.inflight = 1
    # horizon 10 - 8 = 2: B is old but in flight, C (2 <= 2) goes, A (3 > 2) stops the scan
    assert table.retire_idle(now=10.0, idle_s=8.0) == ["C"]
    table.finished(b, now=4.0)  # B: nothing in flight, active at 4 -> order A(3) B(4)
    assert b.inflight == 0 and list(table.workflows) == ["A", "B"]
    assert table.retire_idle(now=11.9, idle_s=8.0) == ["A"]  # horizon 3.9
    assert table.retire_idle(now=12.0, idle_s=8.0) == ["B"]  # horizon 4.0: 4 <= 4
    assert [c for c in pred.calls if c[0] == "ended"] == [
        ("ended", "app", "C", "cancelled"), ("ended", "app", "A", "cancelled"), ("ended", "app", "B", "cancelled")]
    assert table.retired_idle == 3 and table.ended == 3 and not table.workflows
    assert table.retire_idle(now=100.0, idle_s=None) == []


def test_predictor_failure_is_counted_and_logged_once_never_raised(caplog):
    pred = RecordingPredictor(fail=True)
    changed: list = []
    table = WorkflowTable(ScoreBoard(0.7, 2), pred, on_changed=changed.append)
    with caplog.at_level(logging.ERROR, logger="pbkv_server.engine.workflows"):
        wf = table.invocation(hints("A", "x", 0), (), now=0.0)
        wf2 = table.invocation(hints("A", "y", 1), (), now=1.0)
        ended = table.end("A")
    assert changed == [] and wf2 is wf and wf.history == ["x", "y"]  # the invocations still count
    assert ended is wf and table.predictor_errors == 3
    assert len([r for r in caplog.records if r.name == "pbkv_server.engine.workflows"]) == 1


def test_end_is_idempotent_and_remembers_the_status_of_ended_ids():
    table = WorkflowTable(ScoreBoard(0.7, 2))
    table.invocation(hints("w1", "a", 0), (), now=0.0)
    assert table.end("w1", "completed") is not None
    assert table.end("w1", "completed") is None and table.end("never-seen", "failed") is None
    assert len(table) == 0 and table.ended_status("w1") == "completed" and table.ended == 1


def test_a_reused_id_starts_a_new_incarnation_counted_and_logged_once(caplog):
    table = WorkflowTable(ScoreBoard(0.7, 2))
    first = table.invocation(hints("w1", "a", 0), (), now=0.0)
    table.invocation(hints("w1", "b", 1), (), now=1.0)
    table.end("w1", "completed")
    with caplog.at_level(logging.WARNING, logger="pbkv_server.engine.workflows"):
        again = table.invocation(hints("w1", "a", 0), (), now=2.0)
        table.end("w1", "completed")
        third = table.invocation(hints("w1", "a", 0), (), now=3.0)
    assert again is not first and again.history == ["a"] and again.incarnation == 2 and third.incarnation == 3
    assert table.ended_status("w1") is None and table.reused_ids == 2
    assert len([r for r in caplog.records if "used again" in r.message]) == 1


def test_idle_and_bound_retirements_end_with_status_cancelled_and_their_reason():
    ends = []
    table = WorkflowTable(ScoreBoard(0.7, 2), max_active=2,
                          on_end=lambda wf, recs, status, reason: ends.append((wf.workflow_id, status, reason)))
    table.invocation(hints("a", "x", 0), (), now=0.0)
    table.invocation(hints("b", "x", 0), (), now=1.0)
    table.invocation(hints("a", "x", 1), (), now=2.0)  # a is now the most recent
    table.invocation(hints("c", "x", 0), (), now=3.0)
    assert ends == [("b", "cancelled", END_TABLE_FULL)] and list(table.workflows) == ["a", "c"]
    assert table.retire_idle(now=20.0, idle_s=10.0) == ["a", "c"]
    assert ends == [("b", "cancelled", END_TABLE_FULL), ("a", "cancelled", END_IDLE), ("c", "cancelled", END_IDLE)]
    assert table.retired_full == 1 and table.retired_idle == 2


def test_the_bound_never_retires_a_workflow_with_a_request_in_flight():
    ends: list = []
    table = WorkflowTable(ScoreBoard(0.7, 2), max_active=2, on_end=lambda wf, recs, status, reason: ends.append(
        wf.workflow_id))
    a = table.invocation(hints("a", "x", 0), (), now=0.0)
    table.invocation(hints("b", "x", 0), (), now=1.0)
    a.inflight = 1  # the oldest is busy: the next oldest goes instead
    table.invocation(hints("c", "x", 0), (), now=2.0)
    assert ends == ["b"]
    table.workflows["c"].inflight = 1
    # every other workflow is busy: the table grows past its bound rather than retire live work
    table.invocation(hints("d", "x", 0), (), now=3.0)
    assert ends == ["b"]
    assert list(table.workflows) == ["a", "c", "d"]


@pytest.mark.slow
def test_table_stays_bounded_under_two_million_ids():
    full: list = []
    table = WorkflowTable(ScoreBoard(0.7, 2), max_active=1000, max_ended=5000,
                          on_end=lambda wf, recs, status, reason: full.append(1) if reason == END_TABLE_FULL else None)
    for i in range(1_000_000):
        wid = f"w{i}"
        table.invocation(hints(wid, "a", 0), (), float(i))
        if i % 2:
            table.end(wid, "completed")
    for i in range(1_000_000, 2_000_000):
        table.end(f"w{i}", "completed")  # end signals for ids never seen
    # Each odd id arrives (table full at 1000, the oldest even id is pushed out) and then ends,
    # so the table ends at 999 active even ids; every other even id was pushed out.
    assert len(table) == 999
    assert table.ended_count == 5000
    assert len(full) == 500_000 - 999


def test_bad_bounds_are_rejected():
    with pytest.raises(ValueError):
        WorkflowTable(ScoreBoard(0.7, 2), max_active=0)
    with pytest.raises(ValueError):
        WorkflowTable(ScoreBoard(0.7, 2), max_ended=0)


def test_an_end_signal_that_races_a_running_request_applies_when_it_finishes():
    ends = []
    table = WorkflowTable(ScoreBoard(0.7, 2), on_end=lambda wf, recs, status, reason: ends.append((wf.workflow_id, status)))
    wf = table.invocation(hints("A", "x", 0), (), now=0.0)
    wf.inflight = 2  # two requests in flight (the owner counts them)
    assert table.end("A", "failed") is wf and table.end("A", "completed") is wf  # recorded once, first wins
    assert "A" in table.workflows and ends == [] and table.ended_status("A") is None
    table.finished(wf, now=1.0)
    assert "A" in table.workflows and ends == []  # one request still running
    table.finished(wf, now=2.0)
    assert ends == [("A", "failed")] and "A" not in table.workflows and table.ended_status("A") == "failed"


def test_idleness_counts_from_the_end_of_the_last_request():
    table = WorkflowTable(ScoreBoard(0.7, 2))
    wf = table.invocation(hints("A", "x", 0), (), now=0.0)
    wf.inflight = 1
    assert table.retire_idle(now=100.0, idle_s=10.0) == []  # decoding for 100 s: never idle
    table.finished(wf, now=100.0)
    assert table.retire_idle(now=109.9, idle_s=10.0) == []
    assert table.retire_idle(now=110.0, idle_s=10.0) == ["A"]


def test_only_a_multi_step_workflow_retires_its_cache():
    """A single-request workflow (a chat turn) ends at once, but the next turn extends its prompt:
    its node is not retired; a workflow of two invocations retires its nodes, and marks the ones
    only it touched as its finished private history."""
    board = ScoreBoard(0.7, 2)
    table = WorkflowTable(board)
    chat, agent, shared = NodeScore("chat"), NodeScore("agent"), NodeScore("shared")
    table.invocation(hints("turn", "assistant", 0), (), now=0.0)
    board.touch(chat, "turn", "assistant")
    board.touch(shared, "turn", "assistant")
    table.end("turn")
    assert not chat.retired and not chat.finished_private and not shared.retired
    for step in (0, 1):
        table.invocation(hints("flow", "x", step), (), now=1.0 + step)
    board.touch(agent, "flow", "x")
    board.touch(shared, "flow", "x")
    table.end("flow")
    assert agent.retired and agent.finished_private
    assert shared.retired and not shared.finished_private  # two workflows touched it
