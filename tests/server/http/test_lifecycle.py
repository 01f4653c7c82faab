"""The live server's workflow lifecycle: idleness counts from the end of a workflow's last
request, and an idle sweep or an end signal never retires a workflow whose request is running."""

from __future__ import annotations

import threading
import time

import httpx

from pbkv_contract.hints import END_PATH, Hints
from .server_http_fixtures import chat, metric

USER = [{"role": "user", "content": "Summarize the release notes, please."}]


def _slow_request(server, hints: Hints, result: dict, max_tokens: int = 60) -> threading.Thread:
    """A request of ``max_tokens`` output tokens on a paced server (pace 1: engine time is wall
    time), so it decodes for at least max_tokens x 25 ms of wall time (decode steps of about 25 ms
    on the default profile; a paced step sleeps its simulated time, so load only lengthens it)."""
    def go():
        with httpx.Client(base_url=server.url, timeout=60) as client:
            result["response"] = chat(client, USER, hints, max_tokens=max_tokens)
        result["done_at"] = time.monotonic()
    thread = threading.Thread(target=go)
    thread.start()
    return thread


def test_the_idle_sweep_never_retires_a_workflow_whose_request_is_decoding(start_server):
    server = start_server(pace=1.0, idle_retire_s=0.2)
    result: dict = {}
    thread = _slow_request(server, Hints("wf-slow", "writer", 0, "demo"), result)
    deadline = time.monotonic() + 30.0  # on a loaded machine the request may take a while to arrive
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
    deadline = time.monotonic() + 30.0  # generous under load; a pass ends it early
    while server.service.workflows.get("wf-slow") is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.service.workflows.get("wf-slow") is None
    text = httpx.get(server.url + "/metrics", timeout=30).text
    assert metric(text, "pbkv_workflow_ends_total", {"status": "cancelled", "source": "idle"}) == 1


def test_an_end_signal_during_a_running_request_applies_when_it_finishes(start_server):
    server = start_server(pace=1.0)
    result: dict = {}
    # 200 tokens decode for at least 5 s: time for the end signal to arrive on a loaded machine
    thread = _slow_request(server, Hints("wf-race", "writer", 0, "demo"), result, max_tokens=200)
    deadline = time.monotonic() + 30.0  # the request has arrived (a fixed sleep failed under load)
    while server.service.workflows.get("wf-race") is None and time.monotonic() < deadline:
        time.sleep(0.01)
    end = httpx.post(server.url + END_PATH.format(workflow_id="wf-race"), json={"status": "completed"}, timeout=30)
    assert end.status_code == 204
    # the check below means something only while the request is still decoding
    assert thread.is_alive() and "done_at" not in result, "the request finished before the end signal; lengthen it"
    assert server.service.workflows.get("wf-race") is not None  # still running: not retired yet
    thread.join()
    assert result["response"].status_code == 200
    assert server.service.workflows.get("wf-race") is None
    assert server.service.workflows.ended_status("wf-race") == "completed"
