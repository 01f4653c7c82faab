"""The rest of the HTTP surface: completions, models, health, body hints, pacing, idle retirement."""

from __future__ import annotations

import random
import time

import httpx
import pytest

from pbkv_contract.hints import Hints
from pbkv_contract.trace import InvocationRecord, read_trace
from pbkv_server.http import ServerConfig, run_in_thread
from pbkv_server.predictors import DEFAULT_ONLINE_PREDICTOR
from pbkv_server.scenarios.base import Scenario, ScenarioRequest, register_scenario
from pbkv_server.scenarios.tokenizer import count_tokens

from .server_http_fixtures import chat, metric, text_of_tokens


def test_completions_endpoint_answers_and_caches_the_prompt(start_server):
    server = start_server(policy="lru")
    prompt = text_of_tokens(600, "document")
    with httpx.Client(base_url=server.url, timeout=30) as client:
        first = client.post("/v1/completions", json={"model": "m", "prompt": prompt, "max_tokens": 16})
        second = client.post("/v1/completions", json={"model": "m", "prompt": [prompt + " Continue."], "max_tokens": 16})
    assert first.status_code == second.status_code == 200
    body = first.json()
    assert body["object"] == "text_completion" and body["model"] == "m"
    choice = body["choices"][0]
    assert 0 < count_tokens(choice["text"]) <= 16 and body["usage"]["completion_tokens"] == count_tokens(choice["text"])
    # The canonical form of a completion prompt is the text itself: its tokens are counted directly.
    assert body["usage"]["prompt_tokens"] == count_tokens(prompt)
    assert second.json()["usage"]["prompt_tokens_details"]["cached_tokens"] >= count_tokens(prompt) - 20


def test_max_tokens_cuts_the_reply_and_sets_finish_reason_length(start_server):
    server = start_server()
    with httpx.Client(base_url=server.url, timeout=30) as client:
        resp = chat(client, [{"role": "user", "content": "Write a long essay."}], max_tokens=3)
    choice = resp.json()["choices"][0]
    assert choice["finish_reason"] == "length" and count_tokens(choice["message"]["content"]) <= 3


def test_models_and_health(start_server):
    server = start_server(policy="lae", model_name="pbkv-sim", device_tokens=12345)
    with httpx.Client(base_url=server.url, timeout=30) as client:
        models = client.get("/v1/models").json()
        health = client.get("/health").json()
    assert models["object"] == "list" and models["data"][0]["id"] == "pbkv-sim"
    assert health["status"] == "ok" and health["policy"] == "lae" and health["device_tokens"] == 12345
    assert health["predictor"] == "none"  # lae predicts nothing


def test_health_names_the_default_predictor_of_a_predictive_policy(start_server):
    server = start_server()  # the default policy, pbkv, and no predictor given: every app gets the default
    with httpx.Client(base_url=server.url, timeout=30) as client:
        health = client.get("/health").json()
    assert health["policy"] == "pbkv" and health["predictor"] == f"*={DEFAULT_ONLINE_PREDICTOR}"


def test_hints_in_custom_params_body_are_used(start_server):
    server = start_server()
    body_hints = {"custom_params": {"pbkv": Hints("wf-body", "writer", 0, "demo").to_body()}}
    with httpx.Client(base_url=server.url, timeout=30) as client:
        resp = chat(client, [{"role": "user", "content": "hi"}], **body_hints)
    assert resp.headers["X-PBKV-Hints"] == "ok"
    assert server.service.driver.engine.workflow("wf-body").app == "demo"


def test_pace_one_sleeps_the_simulated_time(start_server):
    server = start_server(pace=1.0, policy="lru")
    messages = [{"role": "user", "content": text_of_tokens(3000, "slow")}]
    with httpx.Client(base_url=server.url, timeout=30) as client:
        chat(client, [{"role": "user", "content": "warm"}], max_tokens=2)
        t0 = time.monotonic()
        resp = chat(client, messages, max_tokens=4)
        wall = time.monotonic() - t0
    ttft = float(resp.headers["X-PBKV-TTFT-S"])
    # 3,000 uncached tokens on the default profile take a simulated fraction of a second to prefill,
    # which pace 1 turns into real waiting (plus three decode steps).
    assert ttft > 0.2
    assert wall >= ttft


def test_pace_zero_answers_faster_than_the_simulated_time(start_server):
    server = start_server(pace=0.0, policy="lru")
    messages = [{"role": "user", "content": text_of_tokens(3000, "fast")}]
    with httpx.Client(base_url=server.url, timeout=30) as client:
        chat(client, [{"role": "user", "content": "warm"}], max_tokens=2)
        t0 = time.monotonic()
        resp = chat(client, messages, max_tokens=4)
        wall = time.monotonic() - t0
    assert wall < float(resp.headers["X-PBKV-TTFT-S"])


def test_idle_workflows_are_retired_after_the_configured_time(start_server):
    server = start_server(idle_retire_s=0.2)
    with httpx.Client(base_url=server.url, timeout=30) as client:
        chat(client, [{"role": "user", "content": "hi"}], Hints("wf-idle", "a", 0, "demo"), max_tokens=2)
        assert metric(client.get("/metrics").text, "pbkv_active_workflows") == 1
        deadline = time.monotonic() + 30  # generous under load; a pass ends it early
        while time.monotonic() < deadline:
            text = client.get("/metrics").text
            if metric(text, "pbkv_active_workflows") == 0:
                break
            time.sleep(0.05)
    assert metric(text, "pbkv_active_workflows") == 0
    assert metric(text, "pbkv_workflow_ends_total", {"source": "idle"}) == 1


@register_scenario("registered-app-for-http-test")
class _ShoutScenario(Scenario):
    def reply(self, request: ScenarioRequest, rng: random.Random) -> str:
        return f"{request.agent.upper()} SAYS HI"


def test_registered_app_scenario_answers_and_scenario_flag_covers_other_apps(start_server):
    server = start_server(scenario="tests.server.http.server_http_fixtures:EchoScenario")
    with httpx.Client(base_url=server.url, timeout=30) as client:
        own = chat(client, [{"role": "user", "content": "x"}], Hints("w1", "critic", 0, "registered-app-for-http-test"))
        other = chat(client, [{"role": "user", "content": "x"}], Hints("w2", "coder", 3, "some-other-app"))
    assert own.json()["choices"][0]["message"]["content"] == "CRITIC SAYS HI"
    assert other.json()["choices"][0]["message"]["content"] == "echo coder step 3"


def test_bad_scenario_flag_is_a_clear_error():
    with pytest.raises(ValueError, match="module:ClassName"):
        run_in_thread(ServerConfig(port=0, scenario="no-colon-here"))


def _gap_between_two_calls(server, trace, idle_s: float) -> float:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        chat(client, [{"role": "user", "content": "one"}], Hints("wf-gap", "a", 0, "demo"), max_tokens=2)
        client.post("/pbkv/v1/workflows/unrelated/end", json={})  # wakes the idle engine loop
        time.sleep(idle_s)
        chat(client, [{"role": "user", "content": "two"}], Hints("wf-gap", "a", 1, "demo"), max_tokens=2)
    first, second = [r for r in read_trace(trace) if isinstance(r, InvocationRecord)]
    return second.t_start - first.t_end


def test_paced_clock_counts_idle_wall_time_and_pace_zero_does_not(start_server, tmp_path):
    paced = _gap_between_two_calls(start_server(pace=1.0, trace_out=str(tmp_path / "p1.jsonl")),
                                   tmp_path / "p1.jsonl", 0.5)
    assert 0.45 <= paced <= 3.0
    fast = _gap_between_two_calls(start_server(pace=0.0, trace_out=str(tmp_path / "p0.jsonl")),
                                  tmp_path / "p0.jsonl", 0.5)
    assert abs(fast) < 1e-3  # virtual time stands still while the server is idle at pace 0


@register_scenario("prose-app-for-selector-test")
class _ProseScenario(Scenario):
    """An app scenario that ignores speaker selection (as the SWE example's does)."""

    def reply(self, request: ScenarioRequest, rng: random.Random) -> str:
        # Names one candidate (tester) and the previous speaker: AutoGen would reject it.
        return "tester next; the planner should think again"


def test_selector_call_gets_one_listed_name_even_when_the_app_scenario_ignores_selection(start_server):
    prompt = "You are in a role play game. Then select the next role from ['coder', 'tester'] to play. Only return the role."
    with httpx.Client(base_url=start_server().url) as client:
        for step in range(10):
            hints = Hints("wf-sel", "speaker_selector", step, "prose-app-for-selector-test")
            reply = chat(client, [{"role": "user", "content": prompt}], hints).json()["choices"][0]["message"]["content"]
            assert reply in ("coder", "tester")
        # An ordinary call of the same app still gets the app scenario's reply.
        plain = chat(client, [{"role": "user", "content": "hi"}], Hints("wf-sel", "coder", 10, "prose-app-for-selector-test"))
    assert plain.json()["choices"][0]["message"]["content"].startswith("tester next")



def test_answers_and_traces_say_the_simulator_wrote_the_reply(start_server, tmp_path):
    # issue 35: advise must know a trace was recorded against the simulator (made-up reply lengths).
    # The server says so on every answer (X-PBKV-Engine: sim), its own trace marks served_by, and
    # the SDK's recorder copies the header into the app-side trace.
    import pbkv_sdk
    from pbkv_sdk.recorder import flush_all

    served = tmp_path / "served.jsonl"
    server = start_server(trace_out=str(served))
    with httpx.Client(base_url=server.url, timeout=30) as client:
        resp = chat(client, [{"role": "user", "content": "hi"}], Hints("wf-sim", "writer", 0, "demo"))
        stream = client.post("/v1/chat/completions", json={"model": "t", "stream": True,
                                                            "messages": [{"role": "user", "content": "x"}]})
    assert resp.headers["X-PBKV-Engine"] == "sim" and stream.headers["X-PBKV-Engine"] == "sim"
    app_side = tmp_path / "app.jsonl"
    with pbkv_sdk.http_client() as client, pbkv_sdk.workflow(app="demo", workflow_id="wf-app", server_url=server.url,
                                                             trace_path=app_side):
        with pbkv_sdk.agent("writer"):
            client.post(f"{server.url}/v1/chat/completions", json={"model": "t", "messages": [
                {"role": "user", "content": "hello"}]})
    assert flush_all(10.0)
    for path in (served, app_side):
        calls = [r for r in read_trace(path) if isinstance(r, InvocationRecord)]
        assert calls and {r.served_by for r in calls} == {"sim"}, path
