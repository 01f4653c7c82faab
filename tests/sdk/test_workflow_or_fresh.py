"""pbkv_sdk.context.workflow_or_fresh: the integrations' fail-open workflow constructor."""

from __future__ import annotations

import logging
import re

import pytest

from pbkv_sdk.context import workflow_or_fresh


def test_a_valid_user_id_is_kept_without_a_warning(caplog, monkeypatch):
    monkeypatch.delenv("PBKV_APP", raising=False)
    with caplog.at_level(logging.WARNING, logger="pbkv_sdk"):
        wf = workflow_or_fresh("finance", "run-1.a:b", end_timeout_s=0.2)
    assert wf.workflow_id == "run-1.a:b" and wf.app == "finance" and wf.end_timeout_s == 0.2
    assert not caplog.records


@pytest.mark.parametrize("bad", ["has space", "", "x" * 129, 42])
def test_a_bad_user_id_warns_once_and_gets_a_fresh_random_id(bad, caplog):
    with caplog.at_level(logging.WARNING, logger="pbkv_sdk"):
        wf = workflow_or_fresh("finance", bad)
    assert re.fullmatch(r"[0-9a-f]{32}", wf.workflow_id)
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(messages) == 1 and f"ignoring workflow id {bad!r}" in messages[0]


def test_the_same_bad_id_warns_once_and_each_distinct_one_once(caplog):
    with caplog.at_level(logging.WARNING, logger="pbkv_sdk"):
        ids = [workflow_or_fresh("finance", bad).workflow_id for bad in ("bad id", "bad id", "other bad", "bad id")]
    assert len(set(ids)) == 4  # a fresh id for every run all the same
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert [m.split(" (")[0] for m in messages] == ["PBKV: ignoring workflow id 'bad id'", "PBKV: ignoring workflow id 'other bad'"]


def test_app_and_trace_path_come_from_the_environment_like_the_sdk(monkeypatch, tmp_path):
    monkeypatch.setenv("PBKV_APP", "from-env")
    monkeypatch.setenv("PBKV_TRACE_PATH", str(tmp_path / "t.jsonl"))
    wf = workflow_or_fresh("from-code", None)
    assert wf.app == "from-env" and wf.trace_path == str(tmp_path / "t.jsonl")
    monkeypatch.delenv("PBKV_APP")
    assert workflow_or_fresh(None, None).app == "default"
