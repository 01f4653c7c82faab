"""Schemathesis against the server's own OpenAPI document (CI size; longer runs: benchmarks/server_fuzz.py).

Every operation, positive and negative data: no 5xx, every answer documented (status, content
type, body schema), schema-invalid input refused with a 4xx, schema-valid input accepted.
"""

from __future__ import annotations

import pytest

pytest.importorskip("schemathesis")

from pbkv_server.testing.fuzzing import fuzz  # noqa: E402

# Cases per operation and mode: about 13 s for the whole API on the 2-core machine.
CI_EXAMPLES = 40


@pytest.mark.slow
def test_schemathesis_finds_no_server_error_and_no_schema_violation(start_server):
    server = start_server(policy="pbkv", hint_token=None)
    runs = fuzz(server.url, CI_EXAMPLES, seed=17)
    failures = [f"{r.operation} [{r.mode}] {f}" for r in runs for f in r.failures]
    assert not failures, "\n".join(failures[:5])
    assert sum(r.server_errors for r in runs) == 0
    by_key = {(r.operation, r.mode): r for r in runs}
    # Every operation with inputs got the full budget in both modes; the rest one positive case each.
    for op in ("POST /v1/chat/completions", "POST /v1/completions", "POST /pbkv/v1/workflows/{workflow_id}/end",
               "PUT /pbkv/v1/apps/{app_name}/graph"):
        assert by_key[(op, "positive")].cases == CI_EXAMPLES and by_key[(op, "negative")].cases == CI_EXAMPLES
    for op in ("GET /v1/models", "GET /health", "GET /metrics"):
        assert by_key[(op, "positive")].cases >= 1
    # Schema-valid LLM requests are served, except those whose tool_choice names a tool they do not
    # offer (400 by design; which cases hypothesis draws depends on what else ran in the worker);
    # schema-invalid ones are all refused with 400.
    chat_ok, chat_bad = by_key[("POST /v1/chat/completions", "positive")], by_key[("POST /v1/chat/completions", "negative")]
    assert chat_ok.statuses[400] == chat_ok.unoffered < CI_EXAMPLES
    assert chat_ok.statuses[200] == CI_EXAMPLES - chat_ok.unoffered, f"schema-valid chat answers by status: {dict(chat_ok.statuses)}"
    assert chat_bad.statuses[400] == CI_EXAMPLES, f"schema-invalid chat answers by status: {dict(chat_bad.statuses)}"


def test_openapi_document_describes_request_bodies_and_error_shapes(start_server):
    import httpx

    doc = httpx.get(start_server().url + "/openapi.json", timeout=30).json()
    chat = doc["paths"]["/v1/chat/completions"]["post"]
    assert chat["requestBody"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/ChatCompletionRequest"}
    assert set(chat["responses"]) == {"200", "400", "413", "431", "500"}
    assert set(chat["responses"]["200"]["content"]) == {"application/json", "text/event-stream"}
    temperature = doc["components"]["schemas"]["ChatCompletionRequest"]["properties"]["temperature"]["anyOf"][0]
    assert (temperature["minimum"], temperature["maximum"], temperature["type"]) == (0, 2, "number")
    error = doc["components"]["schemas"]["ErrorDetail"]
    assert set(error["required"]) == {"message", "type", "param", "code"}


def test_the_one_cross_field_rule_the_schema_cannot_state_is_recognised():
    # tool_choice naming a function outside tools: schema-valid, refused by the server (test_tool_calls)
    from pbkv_server.testing.fuzzing import names_unoffered_tool

    tools = [{"type": "function", "function": {"name": "a"}}]
    assert names_unoffered_tool({"tools": tools, "tool_choice": {"type": "function", "function": {"name": "b"}}})
    assert not names_unoffered_tool({"tools": tools, "tool_choice": {"type": "function", "function": {"name": "a"}}})
    assert not names_unoffered_tool({"tools": tools, "tool_choice": "required"})
