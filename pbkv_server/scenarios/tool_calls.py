"""Whether and which tool the simulated model calls, and the call's OpenAI form.

A request that offers ``tools`` (and whose ``tool_choice`` is not ``"none"``) may be answered
with a tool call instead of text, so that framework code that only runs on tool calls (OpenAI
Agents SDK handoffs, LangGraph's ToolNode, AutoGen and CrewAI tools) runs against the simulator.

The decision (:func:`decide_tool_call`), with the knobs of :class:`ToolSettings`:

* ``tool_choice: "required"`` or a named function: always a call (the named one, or one drawn
  from the offered tools), as OpenAI guarantees.
* ``"auto"`` (or absent): a call with probability ``call_probability`` when the conversation's
  last message is not the result of one of the offered tools, ``after_result_probability`` when
  it is (a model that got its tool's answer usually answers in text; the result of a tool it is
  not offered, a handoff, starts a fresh turn), and never after ``max_tool_rounds`` consecutive
  tool rounds, so every ReAct loop ends.

The arguments are :func:`pbkv_server.scenarios.schema_values.schema_value` of the function's
``parameters`` (compact JSON, as OpenAI writes it); the call id is ``call_`` plus 24 characters
drawn from the same seeded source, so reruns are identical.
"""

from __future__ import annotations

import json
import random
import string
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from pbkv_server.scenarios.schema_values import schema_value

__all__ = ["ToolSettings", "ToolCall", "offered_functions", "consecutive_tool_rounds", "decide_tool_call",
           "draw_tool_call"]

_ID_CHARS = string.ascii_letters + string.digits


@dataclass(frozen=True, slots=True)
class ToolSettings:
    """How often a scenario answers with a tool call (``tool_choice: "auto"`` only).

    Attributes:
        call_probability: chance of a call when the last message is not a tool result (default
            0.8: an agent given tools and a fresh task mostly uses them).
        after_result_probability: chance of another call right after a tool result (default 0.2:
            the model mostly answers from the result; another round now and then).
        max_tool_rounds: consecutive tool rounds (assistant tool-call messages since the last
            text answer or user message) after which ``"auto"`` answers in text (default 3).
    """

    call_probability: float = 0.8
    after_result_probability: float = 0.2
    max_tool_rounds: int = 3

    def __post_init__(self) -> None:
        for name in ("call_probability", "after_result_probability"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {value}")
        if self.max_tool_rounds < 0:
            raise ValueError(f"max_tool_rounds must be >= 0, got {self.max_tool_rounds}")


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One function call of an assistant message.

    Attributes:
        id: ``call_...``, unique within the conversation for practical purposes.
        name: the offered function's name.
        arguments: a JSON object as text (validates against the function's ``parameters``).
    """

    id: str
    name: str
    arguments: str

    def as_openai(self) -> dict[str, Any]:
        """The ``message.tool_calls[i]`` object."""
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


def offered_functions(extra: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The ``function`` objects of the request's function tools (validated by the HTTP layer)."""
    tools = extra.get("tools")
    if not isinstance(tools, list):
        return []
    return [t["function"] for t in tools if isinstance(t, Mapping) and t.get("type") == "function"
            and isinstance(t.get("function"), Mapping) and isinstance(t["function"].get("name"), str)]


def consecutive_tool_rounds(messages: Sequence[Mapping[str, Any]]) -> int:
    """Assistant tool-call messages since the newest user message or text-only assistant answer."""
    rounds = 0
    for message in reversed(messages):
        role = message.get("role")
        if role == "assistant":
            if not message.get("tool_calls") and not message.get("function_call"):
                break
            rounds += 1
        elif role in ("user", "system", "developer"):
            break
    return rounds


def decide_tool_call(extra: Mapping[str, Any], messages: Sequence[Mapping[str, Any]], settings: ToolSettings,
                     rng: random.Random) -> Mapping[str, Any] | None:
    """The function to call, or ``None`` for a text answer.

    Args:
        extra: the request's fields other than messages (``tools``, ``tool_choice``).
        messages: the conversation.
        settings: the scenario's :class:`ToolSettings`.
        rng: the seeded source of this request's tool decision.
    """
    functions = offered_functions(extra)
    choice = extra.get("tool_choice")
    if not functions or choice == "none":
        return None
    if isinstance(choice, Mapping):
        named = (choice.get("function") or {}).get("name") if choice.get("type") == "function" else None
        if isinstance(named, str):
            found = [f for f in functions if f["name"] == named]
            return found[0] if found else None  # the HTTP layer refuses a name that is not offered
        allowed = choice.get("allowed_tools") if choice.get("type") == "allowed_tools" else None
        if isinstance(allowed, Mapping):  # {"mode": "auto"|"required", "tools": [{"type": "function", "name"}]}
            names = {t.get("name") or (t.get("function") or {}).get("name")
                     for t in allowed.get("tools") or [] if isinstance(t, Mapping)}
            functions = [f for f in functions if f["name"] in names] or functions
            choice = allowed.get("mode", "auto")
        else:
            choice = "auto"  # a custom-tool choice: no custom tools are offered (function tools only)
    if choice == "required":
        return rng.choice(functions)
    if consecutive_tool_rounds(messages) >= settings.max_tool_rounds:
        return None
    p = settings.after_result_probability if _answered_own_call(messages, functions) else settings.call_probability
    return rng.choice(functions) if rng.random() < p else None


def _answered_own_call(messages: Sequence[Mapping[str, Any]], functions: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the last message is the result of a call of one of ``functions``.

    A result of a tool this request does not offer is a handoff (OpenAI Agents SDK: the previous
    agent's ``transfer_to_...`` call): for the new agent that is a fresh turn, not an answer to
    its own call. A result whose call cannot be found counts as the agent's own.
    """
    if not messages or messages[-1].get("role") not in ("tool", "function"):
        return False
    last = messages[-1]
    if last.get("role") == "function":
        name = last.get("name")
    else:
        call_id = last.get("tool_call_id")
        name = None
        for message in reversed(messages[:-1]):
            for call in message.get("tool_calls") or () if message.get("role") == "assistant" else ():
                if isinstance(call, Mapping) and call.get("id") == call_id:
                    name = (call.get("function") or {}).get("name")
            if name is not None:
                break
    return name is None or any(f["name"] == name for f in functions)


def draw_tool_call(function: Mapping[str, Any], rng: random.Random, words: Sequence[str] = ()) -> ToolCall:
    """A call of ``function`` with schema-valid arguments drawn from ``rng`` (strings from ``words``)."""
    call_id = "call_" + "".join(rng.choice(_ID_CHARS) for _ in range(24))
    params = function.get("parameters")
    schema = dict(params) if isinstance(params, Mapping) else {}
    schema.setdefault("type", "object")  # parameters always describe an object (OpenAI)
    value = schema_value(schema, rng, words)
    if not isinstance(value, dict):  # parameters are an object schema (checked by the HTTP layer)
        value = {}
    return ToolCall(call_id, function["name"], json.dumps(value, separators=(",", ":"), ensure_ascii=False))
