"""When the simulated model calls a tool (tool_choice, ToolSettings, the tool-round bound)."""

from __future__ import annotations

import json
import random

import pytest

from pbkv_server.scenarios.base import ScenarioRequest
from pbkv_server.scenarios.default import DefaultScenario
from pbkv_server.scenarios.tool_calls import (
    ToolSettings, consecutive_tool_rounds, decide_tool_call, draw_tool_call,
)

SEARCH = {"type": "function", "function": {"name": "search", "parameters": {
    "type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}
LOOKUP = {"type": "function", "function": {"name": "lookup", "parameters": {
    "type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}}}
USER = [{"role": "user", "content": "Find the director of the film"}]
CALL = {"role": "assistant", "content": None,
        "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "search", "arguments": "{}"}}]}
RESULT = {"role": "tool", "tool_call_id": "call_1", "content": "Jane Doe"}


def _share(extra, messages, settings, n=2000):
    return sum(decide_tool_call(extra, messages, settings, random.Random(i)) is not None for i in range(n)) / n


def test_auto_calls_with_the_configured_probabilities():
    settings = ToolSettings(call_probability=0.7, after_result_probability=0.1, max_tool_rounds=5)
    extra = {"tools": [SEARCH]}
    # binomial(2000, p): sd <= 0.0112; 5 sd either side
    assert abs(_share(extra, USER, settings) - 0.7) < 0.056
    assert abs(_share(extra, [*USER, CALL, RESULT], settings) - 0.1) < 0.056
    defaults = ToolSettings()
    assert (defaults.call_probability, defaults.after_result_probability, defaults.max_tool_rounds) == (0.8, 0.2, 3)


def test_required_and_named_force_a_call_none_never_calls():
    settings = ToolSettings(call_probability=0.0, max_tool_rounds=0)
    for i in range(50):
        rng = random.Random(i)
        assert decide_tool_call({"tools": [SEARCH, LOOKUP], "tool_choice": "required"}, USER, settings, rng)
        named = {"tools": [SEARCH, LOOKUP], "tool_choice": {"type": "function", "function": {"name": "lookup"}}}
        assert decide_tool_call(named, USER, settings, rng)["name"] == "lookup"
        assert decide_tool_call({"tools": [SEARCH], "tool_choice": "none"}, USER, ToolSettings(1.0), rng) is None
        assert decide_tool_call({}, USER, ToolSettings(1.0), rng) is None
    picked = {decide_tool_call({"tools": [SEARCH, LOOKUP], "tool_choice": "required"}, USER, settings,
                               random.Random(i))["name"] for i in range(50)}
    assert picked == {"search", "lookup"}


def test_allowed_tools_restricts_the_choice():
    extra = {"tools": [SEARCH, LOOKUP], "tool_choice": {"type": "allowed_tools", "allowed_tools": {
        "mode": "required", "tools": [{"type": "function", "name": "lookup"}]}}}
    names = {decide_tool_call(extra, USER, ToolSettings(0.0), random.Random(i))["name"] for i in range(30)}
    assert names == {"lookup"}


def test_consecutive_rounds_are_bounded_so_auto_loops_end():
    assert consecutive_tool_rounds(USER) == 0
    assert consecutive_tool_rounds([*USER, CALL, RESULT, CALL, RESULT]) == 2
    # a text answer or a new user turn starts the count again
    assert consecutive_tool_rounds([*USER, CALL, RESULT, {"role": "assistant", "content": "done"}, *USER,
                                    CALL, RESULT]) == 1
    settings = ToolSettings(call_probability=1.0, after_result_probability=1.0, max_tool_rounds=2)
    assert _share({"tools": [SEARCH]}, [*USER, CALL, RESULT], settings, 100) == 1.0
    assert _share({"tools": [SEARCH]}, [*USER, CALL, RESULT, CALL, RESULT], settings, 100) == 0.0


def test_settings_refuse_out_of_range_values():
    with pytest.raises(ValueError, match="call_probability"):
        ToolSettings(call_probability=1.5)
    with pytest.raises(ValueError, match="max_tool_rounds"):
        ToolSettings(max_tool_rounds=-1)


def test_drawn_call_is_openai_shaped_and_seeded():
    call = draw_tool_call(SEARCH["function"], random.Random(4), ["director"])
    assert call.id.startswith("call_") and len(call.id) == 29 and call.name == "search"
    assert set(json.loads(call.arguments)["query"].split()) == {"director"}  # words of the prompt
    assert draw_tool_call(SEARCH["function"], random.Random(4), ["director"]) == call
    assert call.as_openai() == {"id": call.id, "type": "function",
                                "function": {"name": "search", "arguments": call.arguments}}
    # a function without parameters is called with an empty object
    assert draw_tool_call({"name": "ping"}, random.Random(1)).arguments == "{}"


def test_scenario_tool_call_uses_the_subclass_settings():
    class Never(DefaultScenario):
        tool_settings = ToolSettings(call_probability=0.0)

    request = ScenarioRequest(app=None, agent="a", workflow_id="w", step=0, messages=USER, extra={"tools": [SEARCH]})
    assert all(Never().tool_call(request, random.Random(i)) is None for i in range(50))
    calls = [DefaultScenario().tool_call(request, random.Random(i)) for i in range(50)]
    assert 25 <= sum(c is not None for c in calls) <= 50  # default 0.8: 40 expected


def test_result_of_a_tool_not_offered_is_a_fresh_turn_for_the_new_agent():
    # OpenAI Agents SDK handoff: Triage called transfer_to_billing; Billing is offered other tools
    handoff = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_h", "type": "function", "function": {"name": "transfer_to_billing", "arguments": "{}"}}]}
    done = {"role": "tool", "tool_call_id": "call_h", "content": "{\"assistant\": \"Billing\"}"}
    settings = ToolSettings(call_probability=1.0, after_result_probability=0.0)
    assert _share({"tools": [LOOKUP]}, [*USER, handoff, done], settings, 50) == 1.0
    # its own tool's result: the after-result probability applies
    assert _share({"tools": [SEARCH]}, [*USER, CALL, RESULT], settings, 50) == 0.0
    # a result whose call is not in the conversation counts as the agent's own
    assert _share({"tools": [LOOKUP]}, [*USER, RESULT], settings, 50) == 0.0
