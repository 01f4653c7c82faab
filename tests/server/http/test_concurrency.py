"""Many concurrent hinted clients on one server: every answer is complete and attributed right."""

from __future__ import annotations

import asyncio
import json

import httpx

from pbkv_contract.hints import END_PATH, Hints
from pbkv_contract.trace import InvocationRecord, read_trace
from pbkv_contract.blocks import prefix_hashes

from .server_http_fixtures import metric, text_of_tokens

AGENTS = ("planner", "coder", "tester", "coder")


def test_sixteen_concurrent_workflows_stream_and_json_never_mix(start_server, tmp_path):
    trace = tmp_path / "served.jsonl"
    server = start_server(policy="pbkv", trace_out=str(trace), device_tokens=30_000)
    system = text_of_tokens(800, "shared")
    sent: dict[tuple[str, int], list[dict]] = {}
    usage_prompt = 0

    async def client_run(c: int, client: httpx.AsyncClient) -> None:
        nonlocal usage_prompt
        wid, history = f"wf-{c}", []
        for step, agent in enumerate(AGENTS):
            messages = [{"role": "system", "content": system},
                        {"role": "user", "content": f"Client {c} task.\n" + "\n".join(history)}]
            sent[(wid, step)] = messages
            body = {"messages": messages, "max_tokens": 40, "stream": bool((c + step) % 2)}
            if body["stream"]:  # OpenAI refuses stream_options on a request that does not stream
                body["stream_options"] = {"include_usage": True}
            resp = await client.post("/v1/chat/completions", json=body, headers=Hints(wid, agent, step, "demo").to_headers())
            assert resp.status_code == 200
            if body["stream"]:
                events = [json.loads(line[6:]) for line in resp.text.splitlines()
                          if line.startswith("data: ") and line != "data: [DONE]"]
                text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"])
                usage = events[-1]["usage"]
            else:
                text = resp.json()["choices"][0]["message"]["content"]
                usage = resp.json()["usage"]
            usage_prompt += usage["prompt_tokens"]
            history.append(text)
        assert (await client.post(END_PATH.format(workflow_id=wid), json={})).status_code == 204

    async def main() -> None:
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
            await asyncio.gather(*(client_run(c, client) for c in range(16)))

    asyncio.run(main())
    text = httpx.get(server.url + "/metrics", timeout=30).text
    records = [r for r in read_trace(trace) if isinstance(r, InvocationRecord)]
    assert len(records) == 16 * len(AGENTS)
    for rec in records:
        # Each served record carries exactly the prompt its own client sent for that step.
        assert rec.prefix_hashes == prefix_hashes(sent[(rec.workflow_id, rec.step)])
        assert rec.agent == AGENTS[rec.step]
    assert metric(text, "pbkv_prompt_tokens_total") == usage_prompt == sum(r.prompt_tokens for r in records)
    assert metric(text, "pbkv_active_workflows") == 0 and metric(text, "pbkv_retired_workflows_total") == 16
    # All 16 clients share the 800-token system prompt: most prompt tokens come from cache.
    assert metric(text, "pbkv_hit_rate") > 0.5
