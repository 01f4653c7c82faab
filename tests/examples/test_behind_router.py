"""The HoVer app through a real SMG router to three pbkv-server replicas (README "Scaling out
behind a router"): affinity by workflow id, hints in the body, end signals to the serving replica."""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict

import httpx
import pytest

from pbkv_contract.trace import InvocationRecord, WorkflowEndRecord, read_trace
from pbkv_server.testing.local_cluster import RouterUnavailable, local_cluster, smg_executable

REPLICAS, CLAIMS = 3, 9


@pytest.fixture
def cluster(fixture_data, tmp_path, monkeypatch):
    if smg_executable() is None:
        pytest.skip("the SMG router is not installed (pip install smg; the test extra pins it)")
    flags = ["--policy", "pbkv", "--scenario", "examples.hover_langchain.scenario:HoverScenario"]
    try:
        with local_cluster(REPLICAS, router_policy="consistent_hashing", server_flags=flags,
                           trace_dir=tmp_path / "served", log_dir=tmp_path / "logs") as running:
            monkeypatch.setenv("PBKV_BODY_HINTS", "1")  # SMG forwards the body, not X-PBKV-* headers
            monkeypatch.setenv("PBKV_REPLICAS", ",".join(running.replica_urls))
            yield running
    except RouterUnavailable as exc:
        pytest.skip(f"the SMG router cannot start here: {exc}")


@pytest.mark.slow
def test_hover_through_smg_keeps_each_workflow_on_one_replica_and_ends_it_there(cluster, tmp_path):
    from examples.hover_langchain.data import load_hover
    from examples.hover_langchain.run import run_claims
    from pbkv_sdk import ending

    claims = list(load_hover())[:CLAIMS]
    app_trace = tmp_path / "app.jsonl"
    outcomes = asyncio.run(run_claims(claims, cluster.router_url, str(app_trace), concurrency=6))
    assert ending.flush(10.0)
    assert len(outcomes) == CLAIMS and all(o["verdict"] for o in outcomes)
    # SMG does not route PBKV's endpoints: the reason for the replica list
    assert httpx.post(cluster.router_url + "/pbkv/v1/workflows/x/end", json={}, timeout=30).status_code == 404
    ends_received = [cluster.metric(i, "pbkv_requests_total", route="workflow_end", status="204")
                     for i in range(REPLICAS)]
    malformed = sum(cluster.metric(i, "pbkv_malformed_hints_total") for i in range(REPLICAS))
    active = [httpx.get(u + "/health", timeout=30).json()["active_workflows"] for u in cluster.replica_urls]

    app_steps = Counter((r.workflow_id, r.step) for r in read_trace(app_trace) if isinstance(r, InvocationRecord))
    served_by: dict[str, set[int]] = defaultdict(set)
    served_steps: Counter = Counter()
    ended: dict[int, set[str]] = defaultdict(set)
    for i, path in enumerate(cluster.traces):
        if not path.is_file() or path.stat().st_size == 0:
            continue  # the ring gave this replica no workflow (it depends on the free ports drawn)
        for rec in read_trace(path):
            if isinstance(rec, InvocationRecord):
                served_by[rec.workflow_id].add(i)
                served_steps[(rec.workflow_id, rec.step)] += 1
            elif isinstance(rec, WorkflowEndRecord):
                ended[i].add(rec.workflow_id)
    assert max(app_steps.values()) == 1 and served_steps == app_steps  # every request hinted, served once
    assert len(served_by) == CLAIMS and all(len(s) == 1 for s in served_by.values())  # affinity
    per_replica = Counter(next(iter(s)) for s in served_by.values())
    assert len(per_replica) >= 2  # the ring spreads the workflows
    for i in range(REPLICAS):  # each end reached the replica that served the workflow, and only it
        assert ended[i] == {w for w, s in served_by.items() if i in s}
        assert ends_received[i] == per_replica[i]
    assert malformed == 0 and active == [0] * REPLICAS
