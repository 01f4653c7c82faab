"""Core SDK behaviour with the real OpenAI client against the fake server: stamping, steps,
body hints, name encoding, end signals and fail-open."""

from __future__ import annotations

import logging
import time

import openai
import pytest

import pbkv_sdk
from pbkv_sdk import ending
from pbkv_contract.hints import decode_name, parse_hints

from .fake_openai import FakeOpenAI


def _warm_sender() -> None:
    """Start the end-signal threads and build their HTTP client now, so that timing assertions
    measure the app-side call, not a sender thread loading the TLS store on a loaded machine."""
    ending._sender()._http()


def _chat(client: openai.OpenAI, text: str, stream: bool = False) -> str:
    if not stream:
        return client.chat.completions.create(model="m", messages=[{"role": "user", "content": text}]).choices[0].message.content
    out = client.chat.completions.create(model="m", messages=[{"role": "user", "content": text}], stream=True)
    return "".join(c.choices[0].delta.content or "" for c in out if c.choices)


def test_requests_in_a_workflow_carry_its_id_agent_and_consecutive_steps(fake_llm: FakeOpenAI):
    client = openai.OpenAI(base_url=fake_llm.base_url, api_key="x", http_client=pbkv_sdk.http_client())
    with pbkv_sdk.workflow(app="demo", workflow_id="wf-1", server_url=fake_llm.url):
        with pbkv_sdk.agent("planner"):
            _chat(client, "plan it")
        with pbkv_sdk.agent("coder"):
            _chat(client, "code it", stream=True)
            _chat(client, "code more")
    assert [fake_llm.hints_of(r) for r in fake_llm.requests] == [
        ("wf-1", "planner", 0, "demo"),
        ("wf-1", "coder", 1, "demo"),
        ("wf-1", "coder", 2, "demo"),
    ]


def test_requests_outside_any_workflow_are_sent_without_hints(fake_llm: FakeOpenAI):
    client = openai.OpenAI(base_url=fake_llm.base_url, api_key="x", http_client=pbkv_sdk.http_client())
    with pbkv_sdk.agent("lonely"):
        _chat(client, "hi")
    assert fake_llm.hints_of(fake_llm.requests[0]) == (None, None, None, None)


def test_body_hints_travel_in_custom_params_and_parse_back(fake_llm: FakeOpenAI):
    client = openai.OpenAI(base_url=fake_llm.base_url, api_key="x", http_client=pbkv_sdk.http_client(body_hints=True))
    with pbkv_sdk.workflow(app="demo", workflow_id="wf-body", server_url=fake_llm.url):
        with pbkv_sdk.agent("verifier"):
            assert _chat(client, "check").startswith("Thought:")
    body = fake_llm.requests[0].body
    assert body["custom_params"]["pbkv"] == {"workflow_id": "wf-body", "agent": "verifier", "step": 0, "app": "demo"}
    assert body["session_id"] == "wf-body"  # SGLang's own form too (the PBKV end signal closes it)
    assert body["messages"] == [{"role": "user", "content": "check"}]  # the rest of the body is intact
    hints, reason = parse_hints({}, body)
    assert reason is None and (hints.workflow_id, hints.agent, hints.step) == ("wf-body", "verifier", 0)


def test_agent_names_outside_the_allowed_set_are_percent_encoded_not_dropped(fake_llm: FakeOpenAI):
    client = openai.OpenAI(base_url=fake_llm.base_url, api_key="x", http_client=pbkv_sdk.http_client())
    name = "Résumé writer/ü 100%"  # (a control character is refused: test_name_checks.py)
    with pbkv_sdk.workflow(app="appé", server_url=fake_llm.url), pbkv_sdk.agent(name):
        _chat(client, "x")
    raw = fake_llm.requests[0].headers["x-pbkv-agent"]
    assert raw == "R%C3%A9sum%C3%A9 writer/%C3%BC 100%25"  # UTF-8 bytes and '%' escaped by hand
    assert decode_name(raw) == name
    assert fake_llm.hints_of(fake_llm.requests[0])[3] == "appé"


def test_an_agent_name_too_long_for_the_header_is_shortened_to_128_encoded_chars(fake_llm: FakeOpenAI):
    client = openai.OpenAI(base_url=fake_llm.base_url, api_key="x", http_client=pbkv_sdk.http_client())
    with pbkv_sdk.workflow(app="a", server_url=fake_llm.url), pbkv_sdk.agent("é" * 100):
        _chat(client, "x")
    raw = fake_llm.requests[0].headers["x-pbkv-agent"]
    assert raw == "%C3%A9" * 21  # 21 * 6 = 126 <= 128 < 22 * 6
    assert decode_name(raw) == "é" * 21


def test_end_signal_arrives_exactly_once_with_its_status(fake_llm: FakeOpenAI):
    wf = pbkv_sdk.Workflow("demo", "wf-end", server_url=fake_llm.url)
    assert wf.end("failed") is True
    assert wf.end("completed") is False
    assert ending.flush(5.0)
    assert [(w, s) for w, s, _ in fake_llm.ends] == [("wf-end", "failed")]


def test_end_signal_goes_to_the_llm_origin_when_no_server_url_is_given(fake_llm: FakeOpenAI):
    client = openai.OpenAI(base_url=fake_llm.base_url, api_key="x", http_client=pbkv_sdk.http_client())
    with pbkv_sdk.workflow(app="demo", workflow_id="wf-origin"):
        _chat(client, "x")
    assert ending.flush(5.0)
    assert [(w, s) for w, s, _ in fake_llm.ends] == [("wf-origin", "completed")]


def test_failed_block_ends_the_workflow_as_failed_and_reraises(fake_llm: FakeOpenAI):
    with pytest.raises(KeyError):
        with pbkv_sdk.workflow(app="demo", workflow_id="wf-fail", server_url=fake_llm.url):
            raise KeyError("boom")
    assert ending.flush(5.0)
    assert [(w, s) for w, s, _ in fake_llm.ends] == [("wf-fail", "failed")]


def test_end_signal_never_blocks_the_app_and_gives_up_after_its_timeout(fake_llm: FakeOpenAI, caplog):
    fake_llm.end_delay_s = 2.0
    _warm_sender()
    t0 = time.perf_counter()
    with caplog.at_level(logging.WARNING, logger="pbkv_sdk"):
        pbkv_sdk.Workflow("demo", "wf-slow", server_url=fake_llm.url, end_timeout_s=0.3).end()
        returned_after = time.perf_counter() - t0
        assert ending.flush(5.0)
        attempt_done_after = time.perf_counter() - t0
    # Bounds are the injected 2 s hang, not a speed: end() returns without waiting for the answer,
    # and the attempt gives up before it (a loaded machine delays both by far less; issue 35).
    assert returned_after < fake_llm.end_delay_s / 2
    assert attempt_done_after < fake_llm.end_delay_s
    assert len([r for r in caplog.records if "end signal" in r.getMessage()]) == 1


@pytest.mark.parametrize("mode", ["server down", "500 on hint endpoint"])
def test_app_completes_with_one_warning_when_the_hint_endpoint_fails(fake_llm: FakeOpenAI, free_port, caplog, mode):
    server_url = f"http://127.0.0.1:{free_port}" if mode == "server down" else fake_llm.url
    fake_llm.end_status_code = 500
    client = openai.OpenAI(base_url=fake_llm.base_url, api_key="x", http_client=pbkv_sdk.http_client())
    with caplog.at_level(logging.WARNING, logger="pbkv_sdk"):
        for i in range(3):
            with pbkv_sdk.workflow(app="demo", workflow_id=f"wf-{i}", server_url=server_url, end_timeout_s=0.5):
                assert _chat(client, "hello").startswith("Thought:")
        assert ending.flush(10.0)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "end signal" in warnings[0].getMessage()
    assert len(fake_llm.requests) == 3
    expected_ends = [] if mode == "server down" else [("wf-0", "completed"), ("wf-1", "completed"), ("wf-2", "completed")]
    # end signals go out from a background sender: each workflow ends once, in any order
    assert sorted((w, s) for w, s, _ in fake_llm.ends) == expected_ends


def test_invalid_end_status_is_a_clear_error():
    with pytest.raises(ValueError, match="status must be one of"):
        pbkv_sdk.Workflow("demo").end("done")


def test_a_retried_request_keeps_the_step_of_the_attempt_it_repeats(fake_llm: FakeOpenAI):
    import httpx

    attempts: list[httpx.Request] = []
    inner = httpx.HTTPTransport()

    class FlakyOnce(httpx.BaseTransport):
        def handle_request(self, request):
            attempts.append(request)
            if len(attempts) == 1:
                return httpx.Response(503, json={"error": {"message": "busy"}}, request=request)
            return inner.handle_request(request)

    client = openai.OpenAI(
        base_url=fake_llm.base_url, api_key="x", max_retries=2, http_client=httpx.Client(transport=pbkv_sdk.PBKVTransport(FlakyOnce()))
    )
    with pbkv_sdk.workflow(app="demo", workflow_id="wf-retry", server_url=fake_llm.url), pbkv_sdk.agent("a"):
        _chat(client, "first")
        _chat(client, "second")
    assert [(r.headers["x-stainless-retry-count"], r.headers["x-pbkv-step"]) for r in attempts] == [
        ("0", "0"), ("1", "0"), ("0", "1")
    ]


def test_end_workflow_uses_the_server_url_from_the_environment(fake_llm: FakeOpenAI, monkeypatch):
    monkeypatch.setenv("PBKV_SERVER_URL", fake_llm.base_url)  # the /v1 suffix is dropped
    fake_llm.end_delay_s = 2.0  # the answer comes late: the call must not wait for it
    _warm_sender()
    t0 = time.perf_counter()
    pbkv_sdk.end_workflow("wf-env", "cancelled")
    assert time.perf_counter() - t0 < fake_llm.end_delay_s / 2
    assert ending.flush(5.0)
    assert [(w, s) for w, s, _ in fake_llm.ends] == [("wf-env", "cancelled")]


@pytest.mark.parametrize("bad_url", ["localhost:30000", "http://[bad", "ftp://host", "http://host:99999", "not a url"])
def test_a_malformed_server_url_warns_once_and_later_end_signals_still_arrive(fake_llm: FakeOpenAI, caplog, bad_url):
    client = openai.OpenAI(base_url=fake_llm.base_url, api_key="x", http_client=pbkv_sdk.http_client())
    with caplog.at_level(logging.WARNING, logger="pbkv_sdk"):
        for i in range(2):
            t0 = time.perf_counter()
            with pbkv_sdk.workflow(app="demo", workflow_id=f"wf-bad-{i}", server_url=bad_url):
                assert _chat(client, "hello").startswith("Thought:")
            assert time.perf_counter() - t0 < 5.0
        # the sender threads survived the bad URL: a good one is still delivered
        pbkv_sdk.Workflow("demo", "wf-good", server_url=fake_llm.url).end()
        assert ending.flush(5.0)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "malformed server_url" in warnings[0] and repr(bad_url) in warnings[0]
    assert [(w, s) for w, s, _ in fake_llm.ends] == [("wf-good", "completed")]
    assert [fake_llm.hints_of(r)[:3] for r in fake_llm.requests] == [("wf-bad-0", "unknown", 0), ("wf-bad-1", "unknown", 0)]
    assert ending._SENDER.alive() == ending.SENDER_THREADS


def test_a_burst_of_ends_to_a_hanging_server_is_sent_in_parallel_and_exit_waits_one_timeout(fake_llm: FakeOpenAI):
    fake_llm.end_delay_s = 2.0  # the hint endpoint hangs far longer than the end timeout
    n, timeout_s = 8, 0.3
    _warm_sender()
    t0 = time.perf_counter()
    for i in range(n):
        pbkv_sdk.Workflow("demo", f"wf-hang-{i}", server_url=fake_llm.url, end_timeout_s=timeout_s).end()
    assert time.perf_counter() - t0 < fake_llm.end_delay_s / 2  # the app never waits for the hanging server
    assert ending.flush(5.0)
    drained = time.perf_counter() - t0
    # 8 ends on 4 threads = 2 rounds of one timeout each (0.6 s); one thread would need 8 x 0.3 = 2.4 s
    # (the bound, 7 timeouts, leaves a loaded machine 3.5 times the expected time and still fails one thread)
    assert drained < 7 * timeout_s, drained
    assert sorted(w for w, _, _ in fake_llm.ends) == sorted(f"wf-hang-{i}" for i in range(n))
    # at interpreter exit the SDK waits at most the largest timeout of the ends still pending
    # (+0.1 s), not EXIT_FLUSH_S, and not the timeout of an end that was already delivered: one with
    # a 5 s timeout goes first (as any earlier app or test may have sent) and must not lengthen it.
    # 40 hanging ends need 10 rounds (3 s) to drain; the exit wait is bounded by 0.4 s. The 1.5 s
    # limit leaves room for a loaded CI machine while still failing an exit that waits 2 s.
    fake_llm.end_delay_s = 0.0
    pbkv_sdk.Workflow("demo", "wf-long-timeout", server_url=fake_llm.url, end_timeout_s=5.0).end()
    assert ending.flush(5.0)
    fake_llm.end_delay_s = 2.0
    for i in range(40):
        pbkv_sdk.Workflow("demo", f"wf-exit-{i}", server_url=fake_llm.url, end_timeout_s=timeout_s).end()
    t1 = time.perf_counter()
    ending._flush_at_exit()
    assert time.perf_counter() - t1 < 1.5


@pytest.mark.parametrize("raw, expected", [("1.5", 1.5), ("abc", 0.5), ("-1", 0.5), ("0", 0.5), ("inf", 0.5),
                                          ("1e308", 0.5), ("61", 0.5), ("60", 60.0)])
def test_end_timeout_comes_from_the_environment_and_a_bad_value_falls_back_to_the_default(monkeypatch, caplog, raw, expected):
    monkeypatch.setenv("PBKV_END_TIMEOUT_S", raw)
    with caplog.at_level(logging.WARNING, logger="pbkv_sdk"):
        timeouts = [pbkv_sdk.Workflow("demo").end_timeout_s for _ in range(2)]
    assert timeouts == [expected, expected]
    assert len(caplog.records) == (0 if raw in ("1.5", "60") else 1)


def test_a_huge_end_timeout_still_delivers_the_end_signal(fake_llm: FakeOpenAI, monkeypatch, caplog):
    # issue 35: PBKV_END_TIMEOUT_S=1e308 overflowed the socket timeout ("timestamp out of range") and
    # every end signal was dropped after one warning; now it is one warning and the default budget.
    monkeypatch.setenv("PBKV_END_TIMEOUT_S", "1e308")
    with caplog.at_level(logging.WARNING, logger="pbkv_sdk"):
        pbkv_sdk.Workflow("demo", "wf-huge-env", server_url=fake_llm.url).end()
        pbkv_sdk.Workflow("demo", "wf-huge-arg", server_url=fake_llm.url, end_timeout_s=1e308).end()
        assert ending.flush(5.0)
    assert sorted(w for w, _, _ in fake_llm.ends) == ["wf-huge-arg", "wf-huge-env"]
    lines = [r.getMessage() for r in caplog.records]
    assert any("PBKV_END_TIMEOUT_S='1e308'" in line and "(0, 60]" in line for line in lines), lines
    assert any("end_timeout_s=1e+308" in line for line in lines), lines
    assert not any("out of range" in line for line in lines), lines


@pytest.mark.parametrize("name, attribute", [("PBKV_KV_HINTS", "kv_hints"), ("PBKV_BODY_HINTS", "body_hints")])
@pytest.mark.parametrize("raw, on, warned", [("1", True, False), ("0", False, False), ("", False, False),
                                            ("maybe", False, True), ("2", False, True), ("true", False, True)])
def test_a_switch_variable_with_another_value_warns_once_and_stays_off(monkeypatch, caplog, name, attribute, raw, on,
                                                                        warned):
    monkeypatch.setenv(name, raw)
    with caplog.at_level(logging.WARNING, logger="pbkv_sdk"):
        values = [getattr(pbkv_sdk.Workflow("demo"), attribute) for _ in range(3)]
    assert values == [on] * 3
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ([f"PBKV: {name}={raw!r} is not 1 (on) or 0 (off); using 0 (off)"] if warned else [])
