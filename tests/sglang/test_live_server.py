"""The plugin inside a running SGLang server: ``pbkv-server --engine sglang`` on 127.0.0.1, tiny random
model on CPU (``SGLANG_USE_CPU_ENGINE``; ``sgl_kernel`` test stub, see scripts/sglang_test_stubs).

Two servers are shared by these tests: policy ``pbkv`` and SGLang's built-in ``lru``, pool
:data:`~sglang_live.POOL_TOKENS` = 4,096 tokens, page size 1. Every prompt is ``SIZE`` = 500 token
ids plus one output token, so 8 prompts fit (4,000 tokens) and the 9th evicts one leaf; SGLang
never caches the last output token (no KV was computed for it) and recomputes the last prompt
token, so a prompt held whole probes as ``SIZE - 1`` cached tokens and a prompt that is gone as 0.
"""

import re
import subprocess
import threading
import time
import uuid

import httpx
import pytest

pytest.importorskip("sglang.srt.plugins")  # the real SGLang, not this tests/sglang directory

from .sglang_live import POOL_TOKENS, hints, prompt_ids  # noqa: E402

SIZE = 500
FITS = POOL_TOKENS // (SIZE + 1)  # 8 prompts held at once


@pytest.fixture
def pbkv_server(live_servers):
    server = live_servers("pbkv")
    server.flush()
    return server


@pytest.fixture
def lru_server(live_servers):
    server = live_servers("lru")
    server.flush()
    return server


def _unique(tag: str) -> str:
    return f"{tag}-{uuid.uuid4().hex[:8]}"


def _fill(server, tag: str, count: int) -> list[list[int]]:
    """``count`` anonymous SIZE-token prompts, sent one after the other; returns them."""
    prompts = [prompt_ids(SIZE, f"{tag}-fill-{i}") for i in range(count)]
    for ids in prompts:
        server.generate(ids)
    return prompts


def test_header_and_body_hints_reach_the_scheduler(pbkv_server):
    """A hinted workflow's nodes get a positive lookahead score in the scheduler (cold-start Markov:
    P(next agent = solo) = 1/2), anonymous nodes score 0, so under pressure the older hinted prompts
    (one hinted by X-PBKV-* headers on the OpenAI chat endpoint, one by custom_params.pbkv on
    /generate) outlive newer anonymous ones. Without the hints it would be LRU: they would go first."""
    app = _unique("hints")
    text = " ".join(f"w{i:03d}x" for i in range(170))  # 709 tokens with the chat template
    header_hints = {"X-PBKV-Workflow-Id": f"{app}-h", "X-PBKV-Agent": "solo", "X-PBKV-Step": "0", "X-PBKV-App": app}
    first = pbkv_server.chat(text, headers=header_hints)
    body_ids = prompt_ids(SIZE, f"{app}-b")
    pbkv_server.generate(body_ids, hints(f"{app}-b", app))
    # Enough anonymous prompts that the cache held the two hinted ones + 8 more: two leaves evicted.
    fills = _fill(pbkv_server, app, FITS)

    again = pbkv_server.chat(text)  # anonymous probe of the header-hinted prompt
    assert again["prompt_tokens_details"]["cached_tokens"] == first["prompt_tokens"] - 1
    assert pbkv_server.cached(body_ids) == SIZE - 1
    assert pbkv_server.cached(fills[0]) == 0, "the oldest anonymous prompt should have been evicted"


def test_end_route_retires_the_workflow(pbkv_server):
    """After ``POST /pbkv/v1/workflows/E/end`` (204) E's cache is retired (E made two steps: a
    single-request workflow's cache stays LRU-ordered): the one eviction the 9th prompt needs takes
    E's prompt, not the older anonymous one nor the older active workflow's."""
    app_x, app_e = _unique("end-x"), _unique("end-e")  # separate apps: E's END must not change X's prediction
    oldest = prompt_ids(SIZE, f"{app_x}-anon")
    pbkv_server.generate(oldest)
    x_ids, e_ids = prompt_ids(SIZE, app_x), prompt_ids(SIZE, app_e)
    pbkv_server.generate(x_ids, hints(f"{app_x}-w", app_x))
    pbkv_server.generate(e_ids, hints(f"{app_e}-w", app_e))
    pbkv_server.generate(e_ids, hints(f"{app_e}-w", app_e, step=1))  # a hit: allocates nothing
    assert pbkv_server.end(f"{app_e}-w") == 204
    assert pbkv_server.end(f"{app_e}-w") == 204  # idempotent
    assert pbkv_server.end("never-seen") == 204
    assert pbkv_server.client.post("/pbkv/v1/workflows/bad%20id/end").status_code == 400
    _fill(pbkv_server, app_e, FITS - 2)  # 9 prompts in all: exactly one eviction

    assert pbkv_server.cached(oldest) == SIZE - 1
    assert pbkv_server.cached(x_ids) == SIZE - 1
    assert pbkv_server.cached(e_ids) == 0


@pytest.mark.parametrize("policy, kept", [
    # LRU: the 8 most recent prompts.
    ("lru", list(range(16, 24))),
    # pbkv: every arrival past 8 evicts the oldest ended workflow while one is held; from the 16th
    # on none is. The server has no HiCache, so the running workflows' cache leaves by score, then
    # LRU (pbkv's rule 6; their scores are equal): the 8 most recent running workflows stay, as in
    # the engine core's pbkv on the same requests with no host tier. (With a host tier the engine
    # keeps its stable resident set instead: 1, 3, ..., 13 and the last, 23.)
    ("pbkv", list(range(9, 24, 2))),
])
def test_ended_workflows_go_first_under_pressure_while_lru_keeps_the_most_recent(live_servers, policy, kept):
    server = live_servers(policy)
    server.flush()
    app = _unique("pressure")
    prompts = [prompt_ids(SIZE, f"{app}-{i}") for i in range(24)]
    for i, ids in enumerate(prompts):
        server.generate(ids, hints(f"{app}-{i}", app))
        if i % 2 == 0:  # a second step (a hit, no allocation) makes it a multi-step workflow, then it ends
            server.generate(ids, hints(f"{app}-{i}", app, step=1))
            assert server.end(f"{app}-{i}") == 204
    # Probe the expected survivors first: a hit allocates nothing that could evict another prompt.
    held = {i: server.cached(prompts[i]) for i in kept}
    assert held == {i: SIZE - 1 for i in kept}
    gone = {i: server.cached(prompts[i]) for i in range(24) if i not in kept}
    assert gone == {i: 0 for i in gone}


def test_cached_tokens_in_usage_match_sglangs_own_counters(lru_server):
    """``cached_tokens`` of /generate and of OpenAI ``usage`` (``--enable-cache-report``, added by the
    launcher) equal the shared prefixes computed by hand, the Prometheus counter
    ``sglang:cached_tokens_total`` and the scheduler's ``#cached-token`` log of the same batches."""
    tag = _unique("usage")
    p, q, r = prompt_ids(200, f"{tag}-p"), prompt_ids(100, f"{tag}-q"), prompt_ids(30, f"{tag}-r")
    counter_before = lru_server.metric("sglang:cached_tokens_total")
    log_offset = lru_server.log_size()

    reported = [lru_server.generate(ids)["cached_tokens"] for ids in (p, p + q, p[:50] + r, p + q)]
    assert reported == [0, 200, 50, 299]
    text = " ".join(f"{tag}{i}" for i in range(60))
    first, second = lru_server.chat(text, max_tokens=4), lru_server.chat(text, max_tokens=4)
    assert first["prompt_tokens_details"]["cached_tokens"] == 0
    assert second["prompt_tokens_details"]["cached_tokens"] == second["prompt_tokens"] - 1
    total = sum(reported) + second["prompt_tokens_details"]["cached_tokens"]

    deadline = time.monotonic() + 10  # metrics and log lines are written asynchronously
    while True:
        counter = lru_server.metric("sglang:cached_tokens_total") - counter_before
        logged = sum(int(n) for n in re.findall(r"Prefill batch.*?#cached-token: (\d+)",
                                                 lru_server.log_since(log_offset)))
        if (counter, logged) == (total, total) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert (counter, logged) == (total, total)


def test_a_workflow_whose_request_is_still_decoding_is_never_evicted(pbkv_server):
    """Workflow D is ended while its request decodes, so its prompt ranks first for eviction, but
    the request holds it: the pressure that evicts other prompts meanwhile never takes it, and the
    request finishes without a retraction."""
    app = _unique("decoding")
    d_ids = prompt_ids(SIZE, f"{app}-d")
    decode_tokens = 1200  # a margin of 10x or more over the fills' time, also on a loaded machine
    result = {}

    def run_d():
        result["meta"] = pbkv_server.generate(d_ids, hints(f"{app}-d", app), max_new_tokens=decode_tokens)
        result["t"] = time.monotonic()

    thread = threading.Thread(target=run_d)
    thread.start()
    deadline = time.monotonic() + 30
    while pbkv_server.metric("sglang:num_running_reqs") < 1 and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pbkv_server.end(f"{app}-d") == 204
    # Up to 500 + 1,200 tokens are D's; 6 x 501 more than fill the remaining 2,396: evictions.
    fills = _fill(pbkv_server, app, 6)
    fills_done = time.monotonic()
    thread.join(120)

    meta = result["meta"]
    assert result["t"] > fills_done, "D finished before the pressure ended: nothing was tested"
    assert meta["completion_tokens"] == decode_tokens and meta["num_retractions"] == 0
    assert pbkv_server.cached(d_ids) == SIZE - 1  # D's prompt survived (probe before any new pressure)
    assert pbkv_server.cached(fills[0]) == 0  # while other prompts were evicted


def test_server_shuts_down_cleanly(live_servers):
    """SIGTERM to ``pbkv-server`` reaches SGLang: launcher, scheduler and detokenizer all exit, the
    port closes, and the log holds no traceback. (Runs last in this module: it stops the lru server.)"""
    server = live_servers("lru")
    group = _group(server.proc.pid)
    assert len(group) >= 4, group  # launcher, SGLang's main process, scheduler, detokenizer
    offset = server.log_size()

    assert server.stop() == 0
    deadline = time.monotonic() + 15  # SGLang's multiprocessing resource tracker leaves last, by itself
    while (left := _group(server.proc.pid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left == [], f"processes left behind: {left}"
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{server.url}/v1/models", timeout=2)
    assert "Traceback" not in server.log_since(offset)


def _group(pgid: int) -> list[str]:
    """``pid command`` of every process in process group ``pgid``."""
    out = subprocess.run(["ps", "-o", "pid=,args=", "-g", str(pgid)], capture_output=True, text=True).stdout
    return [line.strip()[:120] for line in out.splitlines() if line.strip()]
