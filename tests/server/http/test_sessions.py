"""What clients of today's cache managers send reaches pbkv-server's engine: SGLang's top-level
``session_id`` (the PBKV workflow when no PBKV hints came) and ``/close_session`` (its end),
``priority``, Dynamo's ``nvext.cache_control`` TTL and ``nvext.agent_hints``, Continuum's
``is_last_step``; malformed values never fail a request."""

from __future__ import annotations

import httpx
import pytest

from pbkv_contract.hints import Hints
from pbkv_contract.trace import InvocationRecord, read_trace
from .server_http_fixtures import chat, metric, text_of_tokens


def _engine_request(server, monkeypatch):
    """Capture every EngineRequest the server submits (the last one is ``seen[-1]``)."""
    seen = []
    driver = server.service.driver
    submit = driver.submit
    monkeypatch.setattr(driver, "submit", lambda req: (seen.append(req), submit(req))[1])
    return seen


def test_an_sglang_session_is_the_pbkv_workflow_and_close_session_ends_it(start_server, tmp_path):
    """Two requests with only ``session_id`` form one workflow (steps 0 and 1, agent assistant,
    X-PBKV-Hints: session); ``POST /close_session`` ends it (a client end, counted) and repeating
    the close is fine. The served trace records the session's requests under its id."""
    trace = tmp_path / "served.jsonl"
    server = start_server(policy="sglang-session", trace_out=str(trace))
    messages = [{"role": "user", "content": text_of_tokens(80, "session")}]
    with httpx.Client(base_url=server.url, timeout=30) as client:
        first = chat(client, messages, session_id="conv-1")
        assert first.status_code == 200 and first.headers["X-PBKV-Hints"] == "session"
        messages += [{"role": "assistant", "content": first.json()["choices"][0]["message"]["content"]},
                     {"role": "user", "content": "and then?"}]
        second = chat(client, messages, session_id="conv-1")
        assert second.status_code == 200 and int(second.headers["X-PBKV-Cached-Tokens"]) > 0
        wf = server.service.workflows.workflows["conv-1"]
        assert wf.history == ["assistant", "assistant"] and wf.app is None
        assert client.get("/health").json()["active_workflows"] == 1
        assert client.post("/close_session", json={"session_id": "conv-1"}).status_code == 200
        assert client.post("/close_session", json={"session_id": "conv-1"}).status_code == 200
        assert client.get("/health").json()["active_workflows"] == 0
        text = client.get("/metrics").text
    assert metric(text, "pbkv_workflow_ends_total", {"status": "completed", "source": "client"}) == 1
    server.stop()
    steps = [(r.workflow_id, r.step, r.agent) for r in read_trace(str(trace)) if isinstance(r, InvocationRecord)]
    assert steps == [("conv-1", 0, "assistant"), ("conv-1", 1, "assistant")]


def test_pbkv_hints_win_over_a_session_and_the_session_tags_the_cache(start_server):
    """A request with PBKV hints and a ``session_id`` belongs to the hinted workflow; under
    ``sglang-session`` its cache is referenced by the session until ``/close_session``."""
    server = start_server(policy="sglang-session")
    with httpx.Client(base_url=server.url, timeout=30) as client:
        r = chat(client, [{"role": "user", "content": text_of_tokens(60, "tagged")}], Hints("wf-a", "planner", 0, "app"),
                 session_id="s-9")
        assert r.headers["X-PBKV-Hints"] == "ok"
        engine = server.service.driver.engine
        assert "wf-a" in server.service.workflows.workflows and "s-9" not in server.service.workflows.workflows
        assert any(engine.cache.policy.referenced(n) for n in engine.cache.tree.nodes())
        client.post("/close_session", json={"session_id": "s-9"})
        assert not any(engine.cache.policy.referenced(n) for n in engine.cache.tree.nodes())


def test_priority_ttl_speculative_prefill_and_last_step_reach_the_engine(start_server, monkeypatch):
    """Top-level ``priority`` wins over ``nvext.agent_hints.priority``; ``cache_control`` "10m" is
    600 s; ``speculative_prefill`` attaches the next-turn prefix (the conversation plus the reply,
    whose first blocks are the prompt's); ``is_last_step`` is read; without them, all unset."""
    server = start_server(policy="lru")
    seen = _engine_request(server, monkeypatch)
    messages = [{"role": "user", "content": text_of_tokens(60, "extras")}]
    nvext = {"agent_hints": {"priority": 3, "speculative_prefill": True}, "cache_control": {"type": "ephemeral", "ttl": "10m"}}
    with httpx.Client(base_url=server.url, timeout=30) as client:
        assert chat(client, messages, priority=7, nvext=nvext, is_last_step=True).status_code == 200
        req = seen[-1]
        assert (req.priority, req.cache_ttl_s, req.last_step) == (7, 600.0, True)
        blocks, toks = req.speculative_next
        assert list(blocks[: len(req.blocks) - 1]) == list(req.blocks[:-1]) and sum(toks) > sum(req.block_tokens)
        assert chat(client, messages, nvext={"agent_hints": {"priority": 3}}).status_code == 200
        assert seen[-1].priority == 3
        assert chat(client, messages).status_code == 200
        plain = seen[-1]
        assert (plain.priority, plain.cache_ttl_s, plain.last_step, plain.speculative_next, plain.session_id) == \
            (None, None, False, None, None)


def test_malformed_extras_are_ignored_and_counted_never_an_error(start_server, monkeypatch):
    """A session id outside the workflow-id rule, a string priority, a cache_control that is not an
    object and a non-boolean is_last_step: the request is served (anonymously, its hints answered
    ``ignored``: none was taken) and each problem counts as a malformed hint; with valid workflow
    hints beside the same bad extras, those hints apply (``ok``)."""
    server = start_server(policy="lru")
    seen = _engine_request(server, monkeypatch)
    with httpx.Client(base_url=server.url, timeout=30) as client:
        r = chat(client, [{"role": "user", "content": "hi"}], session_id="a/b", priority="high",
                 nvext={"cache_control": "5m"}, is_last_step="yes")
        assert r.status_code == 200 and r.headers["X-PBKV-Hints"] == "ignored"
        assert metric(client.get("/metrics").text, "pbkv_malformed_hints_total") == 4
        req = seen[-1]
        assert (req.session_id, req.priority, req.cache_ttl_s, req.last_step) == (None, None, None, False)
        r = chat(client, [{"role": "user", "content": "hi"}], Hints("w1", "a", 0, "app"), priority="high")
        assert r.status_code == 200 and r.headers["X-PBKV-Hints"] == "ok"
        assert metric(client.get("/metrics").text, "pbkv_malformed_hints_total") == 5
        hinted = seen[-1]
        for nvext in ("x", {"agent_hints": 7}):  # not objects where objects belong: counted too
            r = chat(client, [{"role": "user", "content": "hi"}], nvext=nvext)
            assert r.status_code == 200 and r.headers["X-PBKV-Hints"] == "ignored"
        assert metric(client.get("/metrics").text, "pbkv_malformed_hints_total") == 7
    assert hinted.hints.workflow_id == "w1" and hinted.priority is None


@pytest.mark.parametrize("body", [None, [], {"session_id": ""}, {"session_id": "a/b"}, {"session_id": 5}])
def test_close_session_refuses_a_bad_body_with_an_openai_error(start_server, body):
    server = start_server()
    with httpx.Client(base_url=server.url, timeout=30) as client:
        r = client.post("/close_session", json=body) if body is not None else client.post("/close_session")
    assert r.status_code == 400 and r.json()["error"]["code"] in ("invalid_session_id", "invalid_json")


def test_close_session_needs_the_hint_token_when_one_is_set(start_server):
    server = start_server(hint_token="s3cret")
    with httpx.Client(base_url=server.url, timeout=30) as client:
        assert client.post("/close_session", json={"session_id": "x"}).status_code == 401
        assert client.post("/close_session", json={"session_id": "x"},
                           headers={"Authorization": "Bearer s3cret"}).status_code == 200


def test_ttl_pin_server_pins_a_prefix_asked_with_cache_control(start_server):
    """With a host tier, ``ttl-pin`` pins the prompt of a request that sent ``cache_control`` (after
    it finishes) and nothing for a request without it."""
    server = start_server(policy="ttl-pin", device_tokens=20_000, host_tokens=40_000)
    policy = server.service.driver.engine.cache.policy
    with httpx.Client(base_url=server.url, timeout=30) as client:
        chat(client, [{"role": "user", "content": text_of_tokens(60, "plain")}])
        assert policy.pinned_tokens == 0
        r = chat(client, [{"role": "user", "content": text_of_tokens(60, "pinned")}],
                 nvext={"cache_control": {"type": "ephemeral", "ttl": "5m"}})
        assert policy.pinned_tokens == int(r.headers["X-PBKV-Prompt-Tokens"]) > 0


def test_the_pbkv_end_signal_also_closes_the_session_of_the_same_id(start_server):
    """A client sending both forms (PBKV hints and session_id = workflow id, as the SDK does with
    body hints) ends both with one PBKV end signal."""
    server = start_server(policy="sglang-session")
    engine = server.service.driver.engine
    with httpx.Client(base_url=server.url, timeout=30) as client:
        chat(client, [{"role": "user", "content": text_of_tokens(60, "both")}], Hints("w-5", "coder", 0, "app"),
             session_id="w-5")
        assert any(engine.cache.policy.referenced(n) for n in engine.cache.tree.nodes())
        assert client.post("/pbkv/v1/workflows/w-5/end").status_code == 204
        assert not any(engine.cache.policy.referenced(n) for n in engine.cache.tree.nodes())
        assert "w-5" not in server.service.workflows.workflows


def test_spec_prefill_server_prefills_every_chat_turn_and_the_next_turn_hits_the_reply(start_server):
    """Under ``spec-prefill`` every chat request carries its next-turn prefix; once the turn is
    answered the engine prefills conversation + reply (counted apart from the hit rate), so the
    next turn finds the reply's tokens cached: more than the first prompt."""
    import time

    server = start_server(policy="spec-prefill")
    stats = server.service.driver.engine.stats
    messages = [{"role": "user", "content": text_of_tokens(60, "spec")}]
    with httpx.Client(base_url=server.url, timeout=30) as client:
        first = chat(client, messages)
        deadline = time.monotonic() + 30  # generous under load; a pass ends it early
        while stats.speculative_prefill_tokens == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert stats.speculative_prefill_tokens > int(first.headers["X-PBKV-Prompt-Tokens"])
        messages += [{"role": "assistant", "content": first.json()["choices"][0]["message"]["content"]},
                     {"role": "user", "content": "more"}]
        second = chat(client, messages)
    assert int(second.headers["X-PBKV-Cached-Tokens"]) > int(first.headers["X-PBKV-Prompt-Tokens"])
