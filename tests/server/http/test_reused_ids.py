"""A request for a workflow id that already ended starts a new incarnation of it: its own cache
lifecycle, counted in /metrics, and its own workflow in the served trace (``id~2``)."""

from __future__ import annotations

import httpx

from pbkv_contract.hints import END_PATH, Hints
from pbkv_contract.trace import InvocationRecord, WorkflowEndRecord, read_trace
from .server_http_fixtures import chat, metric

USER = [{"role": "user", "content": "Plan the release, please."}]


def test_a_reused_workflow_id_is_a_new_incarnation(start_server, tmp_path):
    trace = tmp_path / "served.jsonl"
    server = start_server(trace_out=str(trace))
    with httpx.Client(base_url=server.url, timeout=30) as client:
        for run in range(2):  # the same id, run twice, each run ended
            for step in range(2):
                assert chat(client, USER, Hints("wf-same", "planner", step, "demo")).status_code == 200
            wf = server.service.workflows.get("wf-same")
            assert wf is not None and wf.incarnation == run + 1 and wf.history == ["planner", "planner"]
            assert client.post(END_PATH.format(workflow_id="wf-same"), json={}).status_code == 204
        text = client.get("/metrics").text
    assert metric(text, "pbkv_reused_workflow_ids") == 1
    server.stop()
    records = read_trace(trace)
    ids = [(r.workflow_id, r.step) for r in records if isinstance(r, InvocationRecord)]
    assert ids == [("wf-same", 0), ("wf-same", 1), ("wf-same~2", 0), ("wf-same~2", 1)]
    assert [r.workflow_id for r in records if isinstance(r, WorkflowEndRecord)] == ["wf-same", "wf-same~2"]
