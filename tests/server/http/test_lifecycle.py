"""The live server's workflow lifecycle: idleness counts from the end of a workflow's last
request, and an idle sweep or an end signal never retires a workflow whose request is running."""

from __future__ import annotations

import threading
import time

import httpx

from pbkv_contract.hints import END_PATH, Hints
from .server_http_fixtures import chat, metric

USER = [{"role": "user", "content": "Summarize the release notes, please."}]


def _slow_request(server, hints: Hints, result: dict) -> threading.Thread:
    """A request of 60 output tokens on a paced server (pace 1: engine time is wall time), so it
    decodes for about 1.5 s of wall time (60 decode steps of about 25 ms on the default profile)."""
    def go():
        with httpx.Client(base_url=server.url, timeout=30) as client:
            result["response"] = chat(client, USER, hints, max_tokens=60)
        result["done_at"] = time.monotonic()
    thread = threading.Thread(target=go)
    thread.start()
    return thread


def test_the_idle_sweep_never_retires_a_workflow_whose_request_is_decoding(start_server):
    server = start_server(pace=1.0, idle_retire_s=0.2)
    result: dict = {}
    thread = _slow_request(server, Hints("wf-slow", "writer", 0, "demo"), result)
    deadline = time.monotonic() + 10.0  # on a loaded machine the request may take a while to arrive
    while server.service.workflows.get("wf-slow") is None and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.8)  # four idle periods after the request arrived
    checked_at = time.monotonic()
    # the check below means something only while the request is still decoding
    assert thread.is_alive() and "done_at" not in result, "the request finished within 0.8 s; lengthen it"
    assert server.service.workflows.get("wf-slow") is not None
    thread.join()
    assert result["response"].status_code == 200 and result["done_at"] > checked_at
    assert server.service.workflows.get("wf-slow") is not None  # idle time counts from here
    deadline = time.monotonic() + 5.0
    while server.service.workflows.get("wf-slow") is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.service.workflows.get("wf-slow") is None
    text = httpx.get(server.url + "/metrics").text
    assert metric(text, "pbkv_workflow_ends_total", {"status": "cancelled", "source": "idle"}) == 1


def test_an_end_signal_during_a_running_request_applies_when_it_finishes(start_server):
    server = start_server(pace=1.0)
    result: dict = {}
    thread = _slow_request(server, Hints("wf-race", "writer", 0, "demo"), result)
    time.sleep(0.3)
    end = httpx.post(server.url + END_PATH.format(workflow_id="wf-race"), json={"status": "completed"})
    assert end.status_code == 204
    assert server.service.workflows.get("wf-race") is not None  # still running: not retired yet
    thread.join()
    assert result["response"].status_code == 200
    assert server.service.workflows.get("wf-race") is None
    assert server.service.workflows.ended_status("wf-race") == "completed"
