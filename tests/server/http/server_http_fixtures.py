"""Helpers of the HTTP server tests: prompt builders, chat calls, Prometheus sample lookup."""

from __future__ import annotations

import random
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from pbkv_contract.hints import Hints
from pbkv_server.scenarios.base import Scenario, ScenarioRequest
from pbkv_server.scenarios.default import DefaultScenario
from pbkv_server.scenarios.tool_calls import ToolSettings
from pbkv_server.scenarios.tokenizer import count_tokens


def text_of_tokens(n: int, topic: str) -> str:
    """Deterministic prose of at least ``n`` tokens (pbkv tokenizer), starting with ``topic``."""
    words = [topic]
    i = 0
    while True:
        words.append(f"{topic}{i % 89} detail of section {i % 13}.")
        i += 1
        if i % 25 == 0 and count_tokens(" ".join(words)) >= n:
            return " ".join(words)


def chat(client: httpx.Client, messages: list[dict], hints: Hints | None = None, **body: Any) -> httpx.Response:
    """POST /v1/chat/completions with optional hint headers."""
    headers = hints.to_headers() if hints else {}
    return client.post("/v1/chat/completions", json={"model": "test", "messages": messages, **body}, headers=headers)


def metric(text: str, name: str, labels: dict[str, str] | None = None) -> float:
    """Value of sample ``name`` (with ``labels``) in a Prometheus exposition; KeyError if absent."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in (labels or {}).items()):
                return sample.value
    raise KeyError(name)


class EchoScenario(Scenario):
    """Test scenario: replies ``echo <agent> step <step>`` (loaded with ``--scenario``)."""

    def reply(self, request: ScenarioRequest, rng: random.Random) -> str:
        return f"echo {request.agent} step {request.step}"


class CallOnceScenario(DefaultScenario):
    """Test scenario: ``tool_choice: "auto"`` always calls a tool on a fresh turn and always answers
    in text after a tool result (one tool round per turn), so framework loops are deterministic."""

    tool_settings = ToolSettings(call_probability=1.0, after_result_probability=0.0)


class DeclineToolsScenario(DefaultScenario):
    """Test scenario: never writes a tool call itself (an app scenario written before tool calls)."""

    def tool_call(self, request: ScenarioRequest, rng: random.Random) -> None:
        return None
