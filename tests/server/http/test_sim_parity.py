"""One engine core: the live server (pace 0) and the simulator replaying its trace agree exactly.

A small dynamic workload (planner -> coder -> tester, with coder/tester retry loops; shared
per-agent system prompts; history growing along the workflow) is sent over HTTP one request at a
time with ``--trace-out``. The simulator then replays that trace (block hashes + recorded
block_tokens) with the same policy, profile, capacities and a fresh predictor; the token-level
device and host hit rates must be identical to what the server's /metrics reports.
"""

from __future__ import annotations

import random

import httpx
import pytest

from pbkv_contract.hints import END_PATH, GRAPH_PATH, Hints
from pbkv_contract.trace import InvocationRecord, WorkflowEndRecord, read_trace
from pbkv_contract.blocks import prefix_hashes
from pbkv_server.predictors import make_predictor
from pbkv_server.hardware.profiles import DEFAULT_PROFILE, get_profile
from pbkv_server.sim.simulator import ReplayConfig, ReplayOptions, load_workload, simulate
from pbkv_server.scenarios.tokenizer import block_tokens

from .server_http_fixtures import chat, metric, text_of_tokens

DEVICE, HOST = 3_500, 3_000


def _run_workload(server, n_workflows: int, seed: int) -> list[list[dict]]:
    rng = random.Random(seed)
    systems = {a: text_of_tokens(700, a) for a in ("planner", "coder", "tester")}
    sent: list[list[dict]] = []
    with httpx.Client(base_url=server.url, timeout=30) as client:
        for w in range(n_workflows):
            wid, history, agent, step = f"wf-{w}", [], "planner", 0
            task = f"Task {w}: " + text_of_tokens(rng.randint(100, 400), f"task{w}")
            while agent != "END":
                messages = [{"role": "system", "content": systems[agent]},
                            {"role": "user", "content": task + "\n" + "\n".join(history)}]
                resp = chat(client, messages, Hints(wid, agent, step, "codegen"), max_tokens=rng.randint(20, 80))
                assert resp.status_code == 200
                sent.append(messages)
                history.append(f"{agent}: " + resp.json()["choices"][0]["message"]["content"])
                step += 1
                if agent == "planner":
                    agent = "coder"
                elif agent == "coder":
                    agent = "tester"
                else:
                    agent = "coder" if rng.random() < 0.5 and step < 8 else "END"
            assert client.post(END_PATH.format(workflow_id=wid), json={"status": "completed"}).status_code == 204
        text = client.get("/metrics").text
    return sent, text


GRAPH = {"planner": ["coder"], "coder": ["tester"], "tester": ["coder"]}


@pytest.mark.parametrize("policy", ["lru", "lae", "he", "pbkv", "pbkv-aggressive", "kvflow"])
def test_simulator_replay_of_server_trace_gives_the_same_hit_rate(start_server, tmp_path, policy):
    trace = tmp_path / "served.jsonl"
    server = start_server(policy=policy, device_tokens=DEVICE, host_tokens=HOST, trace_out=str(trace),
                          predictors={"*": "markov"})
    graphs = {"codegen": GRAPH} if policy == "kvflow" else {}
    for app, edges in graphs.items():  # kvflow's static graph reaches both through the same call
        assert httpx.put(server.url + GRAPH_PATH.format(app=app), json={"edges": edges}, timeout=30).status_code == 204
    sent, text = _run_workload(server, n_workflows=8, seed=3)
    server.stop()
    live_hit, live_host = metric(text, "pbkv_hit_rate"), metric(text, "pbkv_host_hit_rate")
    assert metric(text, "pbkv_evictions_total") > 0  # the workload puts the cache under pressure

    records = read_trace(trace)
    invocations = [r for r in records if isinstance(r, InvocationRecord)]
    assert len(invocations) == len(sent) and sum(isinstance(r, WorkflowEndRecord) for r in records) == 8
    # The trace holds the server's cache keys and per-block token counts of each prompt.
    for rec, messages in zip(invocations, sent):
        assert rec.prefix_hashes == prefix_hashes(messages, rec.block_chars)
        assert rec.block_tokens == block_tokens(messages, rec.block_chars)

    uses_predictor = policy in ("he", "pbkv", "pbkv-aggressive")
    result = simulate(load_workload(records), ReplayConfig(policy, get_profile(DEFAULT_PROFILE), device_tokens=DEVICE,
                                                           host_tokens=HOST, page_size=1),
                      ReplayOptions(concurrency=1, predictor=make_predictor("markov", 3) if uses_predictor else None,
                                    app_graphs=graphs))
    print(f"{policy}: live hit rate {live_hit:.4f} (host {live_host:.4f}), simulator {result.summary['hit_rate']:.4f}")
    assert 0.2 < live_hit < 0.95
    assert result.summary["hit_rate"] == pytest.approx(live_hit, abs=1e-12)
    assert result.summary["host_hit_rate"] == pytest.approx(live_host, abs=1e-12)
    assert result.engine.stats.evictions == metric(text, "pbkv_evictions_total")
