"""The workflow table: idempotent ends, idle retirement, bounded size under millions of ids."""

from __future__ import annotations

import pytest

from pbkv_contract.hints import Hints
from pbkv_server.http.workflows import RETIRED_IDLE, WorkflowTable


def _h(wid: str, app: str | None = "app") -> Hints:
    return Hints(workflow_id=wid, agent="a", step=0, app=app)


def test_end_is_idempotent_and_unknown_ids_are_fine():
    table = WorkflowTable(idle_retire_s=None)
    table.touch(_h("w1"), now=0.0)
    assert table.end("w1", "completed") is True
    assert table.end("w1", "completed") is False
    assert table.end("never-seen", "failed") is False
    assert len(table) == 0 and table.ended_status("w1") == "completed"


def test_request_after_end_reactivates_the_workflow():
    table = WorkflowTable(idle_retire_s=None)
    table.touch(_h("w1"), 0.0)
    table.end("w1", "completed")
    table.touch(_h("w1"), 1.0)
    assert table.get("w1") is not None and table.ended_status("w1") is None


def test_idle_workflows_retire_after_the_configured_time_oldest_first():
    table = WorkflowTable(idle_retire_s=10.0)
    table.touch(_h("old"), 0.0)
    table.touch(_h("mid"), 5.0)
    table.touch(_h("old"), 6.0)  # touched again: now the newest
    assert table.retire_idle(14.9) == []
    assert table.retire_idle(15.0) == ["mid"]
    assert table.retire_idle(16.0) == ["old"]
    assert table.ended_status("mid") == RETIRED_IDLE and len(table) == 0


def test_full_table_retires_the_least_recently_seen():
    table = WorkflowTable(idle_retire_s=None, max_active=2)
    assert table.touch(_h("a"), 0) == []
    assert table.touch(_h("b"), 1) == []
    table.touch(_h("a"), 2)
    assert table.touch(_h("c"), 3) == ["b"]
    assert table.get("a") and table.get("c") and table.get("b") is None


def test_table_stays_bounded_under_two_million_ids():
    table = WorkflowTable(idle_retire_s=None, max_active=1000, max_ended=5000)
    overflowed = 0
    for i in range(1_000_000):
        wid = f"w{i}"
        overflowed += len(table.touch(_h(wid), float(i)))
        if i % 2:
            table.end(wid, "completed")
    for i in range(1_000_000, 2_000_000):
        table.end(f"w{i}", "completed")  # end signals for ids never seen
    # Each odd id is touched (table full at 1000, oldest even id pushed out) and then ended (999),
    # so the table ends at 999 active even ids; every other even id was pushed out.
    assert len(table) == 999
    assert table.ended_count == 5000
    assert overflowed == 500_000 - 999


def test_bad_bounds_are_rejected():
    with pytest.raises(ValueError):
        WorkflowTable(max_active=0)
    with pytest.raises(ValueError):
        WorkflowTable(idle_retire_s=0)
