"""End to end over real HTTP on 127.0.0.1: prefix reuse, policy choice under pressure, end signal."""

from __future__ import annotations

import httpx
import pytest

from pbkv_contract.hints import END_PATH, Hints

from pbkv_contract.blocks import prefix_hashes
from pbkv_server.http.config import ServerConfig
from pbkv_server.hardware.profiles import DEFAULT_PROFILE, get_profile
from pbkv_server.scenarios.tokenizer import block_tokens, count_tokens, prompt_tokens
from .server_http_fixtures import chat, metric, text_of_tokens


#: The hand-computed figures below (TTFT = the profile's linear prefill time of the uncached tokens;
#: an eviction shortfall that counts each request's output reserved at admission) are the legacy
#: cost and engine model's: pinned, as the engine's hand-computed tests are (docs/cost-model.md).
LEGACY = {"prefill_cost": "linear", "engine_model": "legacy"}


def shared_prefix_tokens(earlier: list[dict], later: list[dict]) -> int:
    """Tokens of ``later``'s leading cache blocks that ``earlier`` already holds, computed from the
    block hashes and per-block token counts alone (no engine): what a cache that kept all of
    ``earlier`` must report as ``cached_tokens`` for ``later``."""
    chars = ServerConfig().block_chars
    n = 0
    for a, b, toks in zip(prefix_hashes(earlier, chars), prefix_hashes(later, chars), block_tokens(later, chars)):
        if a != b:
            break
        n += toks
    return n


def test_second_call_of_a_workflow_reuses_a_2000_token_prefix(start_server):
    server = start_server(policy="pbkv", **LEGACY)
    system = {"role": "system", "content": text_of_tokens(2000, "instructions")}
    m1 = [system, {"role": "user", "content": "First question?"}]
    m2 = [system, {"role": "user", "content": "Second question?"}]
    with httpx.Client(base_url=server.url, timeout=30) as client:
        first = chat(client, m1, Hints("wf-1", "planner", 0, "demo"))
        second = chat(client, m2, Hints("wf-1", "coder", 1, "demo"))
    assert first.status_code == second.status_code == 200
    u1, u2 = first.json()["usage"], second.json()["usage"]
    assert u1["prompt_tokens"] == prompt_tokens(m1) and u1["prompt_tokens_details"]["cached_tokens"] == 0
    assert u2["prompt_tokens"] == prompt_tokens(m2)
    shared = shared_prefix_tokens(m1, m2)
    assert 2000 <= shared < prompt_tokens(m2)  # the fixture: the system prompt is shared, the question is not
    assert u2["prompt_tokens_details"]["cached_tokens"] == shared
    # Headers report the same figures; a lone request on an idle engine waits for nothing but the
    # prefill of its uncached tokens, so its simulated TTFT is the profile's prefill time of those
    # (the header rounds to microseconds).
    assert int(second.headers["X-PBKV-Cached-Tokens"]) == u2["prompt_tokens_details"]["cached_tokens"]
    assert int(second.headers["X-PBKV-Prompt-Tokens"]) == u2["prompt_tokens"]
    profile = get_profile(ServerConfig().profile or DEFAULT_PROFILE)
    assert float(first.headers["X-PBKV-TTFT-S"]) == pytest.approx(profile.prefill_time(prompt_tokens(m1)), abs=1e-6)
    assert float(second.headers["X-PBKV-TTFT-S"]) == pytest.approx(profile.prefill_time(prompt_tokens(m2) - shared), abs=1e-6)


def test_streamed_answer_reports_cached_tokens_in_final_usage_chunk(start_server):
    import json

    server = start_server(policy="lru")
    system = {"role": "system", "content": text_of_tokens(2000, "shared")}
    warm, go = [system, {"role": "user", "content": "warm up"}], [system, {"role": "user", "content": "go"}]
    with httpx.Client(base_url=server.url, timeout=30) as client:
        chat(client, warm)
        resp = chat(client, go, stream=True, stream_options={"include_usage": True})
        # the scenario answers by the messages, so the same request unstreamed gets the same answer
        plain = chat(client, go).json()["choices"][0]
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
    events = [line[6:] for line in resp.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert content == plain["message"]["content"]  # the deltas add up to the whole answer
    assert chunks[-2]["choices"][0]["finish_reason"] == plain["finish_reason"]
    usage = chunks[-1]["usage"]
    assert chunks[-1]["choices"] == []
    assert usage["prompt_tokens"] == prompt_tokens(go)
    assert usage["prompt_tokens_details"]["cached_tokens"] == shared_prefix_tokens(warm, go)
    assert usage["completion_tokens"] == count_tokens(content)  # the streamed text, counted again


# Device of 2,400 tokens: two private 1,000-token prompts fit, a third forces one eviction.
PRESSURE_DEVICE = 2400


def _pressure_run(server, again=("b", "a")) -> dict:
    """B then A (A newer), A ends, then C needs room; then B and A come back in the order
    ``again`` (each miss inserts its prompt again and may evict). Returns the figures."""
    a = [{"role": "system", "content": text_of_tokens(1000, "alpha")}]
    b = [{"role": "system", "content": text_of_tokens(1000, "bravo")}]
    c = [{"role": "system", "content": text_of_tokens(1000, "charlie")}]
    out: dict = {}
    with httpx.Client(base_url=server.url, timeout=30) as client:
        rb = chat(client, b, Hints("wf-b", "worker", 0, "demo"), max_tokens=8)
        ra = chat(client, a, Hints("wf-a", "worker", 0, "demo"), max_tokens=8)
        # a second step: wf-a is a multi-step workflow, so its private history retires at its end
        assert chat(client, a, Hints("wf-a", "reviewer", 1, "demo"), max_tokens=8).status_code == 200
        assert client.post(END_PATH.format(workflow_id="wf-a"), json={"status": "completed"}).status_code == 204
        rc = chat(client, c, Hints("wf-c", "worker", 0, "demo"), max_tokens=8)
        out["metrics"] = client.get("/metrics").text
        calls = {"b": (b, Hints("wf-b", "worker", 1, "demo")), "a": (a, Hints("wf-a2", "worker", 0, "demo"))}
        for name in again:
            key, resp = name + "_again", chat(client, calls[name][0], calls[name][1], max_tokens=8)
            host = int(resp.headers["X-PBKV-Host-Cached-Tokens"])
            out[key] = {"cached": resp.json()["usage"]["prompt_tokens_details"]["cached_tokens"], "host": host,
                        "device": int(resp.headers["X-PBKV-Cached-Tokens"]) - host}
    out["prompt"] = {k: r.json()["usage"]["prompt_tokens"] for k, r in (("a", ra), ("b", rb), ("c", rc))}
    return out


def _shortfall(run: dict) -> int:
    """Tokens C (plus its 8 output tokens) needs beyond the free device room: what eviction frees,
    page by page (page size 1), from the victim's tail."""
    p = run["prompt"]
    return p["c"] + 8 - (PRESSURE_DEVICE - p["a"] - p["b"])


@pytest.mark.parametrize("policy", ["lae", "he", "pbkv"])
def test_ending_a_workflow_makes_its_private_cache_the_first_to_go(start_server, policy):
    run = _pressure_run(start_server(policy=policy, device_tokens=PRESSURE_DEVICE, host_tokens=0, **LEGACY))
    short = _shortfall(run)
    assert 0 < short < run["prompt"]["a"]
    # The policy's choice is visible in /metrics: one eviction, the tail of A's (retired) prompt,
    # exactly the tokens C needed.
    assert metric(run["metrics"], "pbkv_evictions_total") == 1
    assert metric(run["metrics"], "pbkv_evicted_tokens_total") == short
    assert metric(run["metrics"], "pbkv_server_info", {"policy": policy}) == 1
    # B (active) is still on the device; A (ended) lost its tail (no host tier to keep it).
    assert run["b_again"] == {"cached": run["prompt"]["b"], "device": run["prompt"]["b"], "host": 0}
    assert run["a_again"]["cached"] == run["prompt"]["a"] - short


def test_lru_evicts_the_least_recent_even_if_it_is_still_active(start_server):
    run = _pressure_run(start_server(policy="lru", device_tokens=PRESSURE_DEVICE, host_tokens=0, **LEGACY), again=("a", "b"))
    short = _shortfall(run)
    # LRU ignores the end signal: B's tail (older) goes although its workflow is active; A (ended) stays.
    assert metric(run["metrics"], "pbkv_evicted_tokens_total") == short
    assert run["a_again"] == {"cached": run["prompt"]["a"], "device": run["prompt"]["a"], "host": 0}
    assert run["b_again"]["cached"] == run["prompt"]["b"] - short


def test_evicted_cache_comes_back_from_the_host_tier(start_server):
    run = _pressure_run(start_server(policy="lae", device_tokens=PRESSURE_DEVICE, host_tokens=10_000, **LEGACY))
    short = _shortfall(run)
    # A's tail was evicted to host memory: its next use loads it over PCIe (a host hit).
    assert run["a_again"] == {"cached": run["prompt"]["a"], "device": run["prompt"]["a"] - short, "host": short}
    assert metric(run["metrics"], "pbkv_host_used_tokens") == short
