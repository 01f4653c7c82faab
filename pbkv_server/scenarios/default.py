"""The default scenario: a plausible reply for any app, agent and prompt (``docs/architecture.md``, "Live server").

Used when no scenario is registered for the request's app and none was given with
``--scenario``. It knows nothing about the task, so it writes a reply that is shaped like what
the agent's role suggests (a verdict for verifiers/critics, a plan for planners, code for coders,
JSON when ``response_format`` asks for it) from words of the prompt, with a realistic length.
It also speaks the two protocols frameworks parse: a speaker-selection prompt ("select the next
role from [a, b]") gets one listed role, and a ReAct prompt (one that mentions ``Final Answer:``,
as CrewAI's do) gets a ``Thought: ... Final Answer: ...`` reply. Native tool calls (a request
that offers ``tools``) are decided before any of this, by :meth:`Scenario.tool_call`
(:mod:`pbkv_server.scenarios.tool_calls`).

Lengths: agent replies in the multi-agent traces of the PBKV and KVFlow evaluations are a few
tens to a few hundred tokens; we draw ``exp(N(ln 120, 0.6))`` tokens, clipped to [12, 600], and
never more than the request's ``max_tokens``.
"""

from __future__ import annotations

import json
import math
import random
import re

from pbkv_server.scenarios.base import Scenario, ScenarioRequest
from pbkv_server.scenarios.tokenizer import count_tokens, truncate_to_tokens
from pbkv_contract.blocks import message_text

__all__ = ["DefaultScenario", "MEDIAN_REPLY_TOKENS", "selection_candidates", "answers_selection", "prompt_words"]

#: Median reply length in tokens of the log-normal draw.
MEDIAN_REPLY_TOKENS = 120
_SIGMA = 0.6
_MIN_TOKENS, _MAX_TOKENS = 12, 600

_WORD_RE = re.compile(r"[A-Za-z][A-Za-z'-]{2,}")
_FILLER = (
    "the evidence suggests that this step is consistent with the request and the previous findings "
    "we should check the remaining details before moving on because one source may be incomplete "
    "overall the answer follows from the context above and the next agent can build on it"
).split()

# Role keyword -> reply style; the first match in the agent name wins.
_ROLES = (
    (("verif", "judge", "critic", "review", "check", "eval"), "verdict"),
    (("plan", "manager", "orchestr", "router", "supervis"), "plan"),
    (("code", "coder", "engineer", "develop", "program", "fix"), "code"),
    (("test", "qa"), "test"),
    (("summar", "writer", "report", "analy", "answer"), "summary"),
)
# "... select the next role from ['planner', 'coder'] to play" (AutoGen's selector prompt shape),
# and the feedback AutoGen sends after an invalid answer ("Please select from: [...]", "select only
# one from: [...]", "select a different name from: [...]"): the newest such list is the candidates.
_SELECT_RE = re.compile(
    r"select (?:the next (?:role|speaker|agent) |only one |a different name )?from:? \[([^\]]*)\]", re.IGNORECASE
)
_REACT_PREFIX = "Thought: I now can give a great answer\nFinal Answer: "
_VERDICTS = ("verified", "needs more evidence", "not supported")
_TEST_RESULTS = ("all tests passed", "tests failed")


class DefaultScenario(Scenario):
    """Role-shaped, prompt-flavoured replies of log-normal length; deterministic given ``rng``."""

    def reply(self, request: ScenarioRequest, rng: random.Random) -> str:
        """Return the reply text, at most ``request.max_tokens`` tokens (when given)."""
        roles = selection_candidates(request.messages)
        if roles:  # a speaker-selection call (e.g. AutoGen SelectorGroupChat): name one role
            return rng.choice(roles)
        target = _draw_length(rng)
        if request.max_tokens is not None:
            target = min(target, max(1, request.max_tokens))
        words = prompt_words(request) or _FILLER
        if _wants_react(request):
            # ReAct-style agents (CrewAI without native tools) parse a "Final Answer:" line; text-format
            # "Action:" tool calls are never written (native ones come from Scenario.tool_call).
            text = _REACT_PREFIX + _text_reply(_role(request.agent), words, target, rng)
            cap = target + count_tokens(_REACT_PREFIX)
            if request.max_tokens is not None:
                cap = min(cap, max(1, request.max_tokens))
        elif _wants_json(request):
            # JSON is not cut to the drawn length (a cut object is useless); only max_tokens cuts it.
            text = _json_reply(request, words, target, rng)
            cap = request.max_tokens
        else:
            text = _text_reply(_role(request.agent), words, target, rng)
            cap = target
        return truncate_to_tokens(text, max(1, cap))[0] if cap is not None else text


def selection_candidates(messages: list[dict]) -> list[str]:
    """The participant names a speaker-selection prompt asks to choose from; ``[]`` if it is none.

    Recognises AutoGen ``SelectorGroupChat``'s default prompt ("select the next role from
    ['a', 'b']") and its retry feedback; the newest message with such a list wins (the feedback
    after a repeated speaker lists the allowed names only).
    """
    for message in reversed(messages):
        text = message_text(message)
        found = list(_SELECT_RE.finditer(text))
        if found:  # the prompt repeats the list; the last occurrence is the one answered
            names = (n.strip().strip("'\"") for n in found[-1].group(1).split(","))
            return [n for n in names if n]
    return []


def answers_selection(text: str, candidates: list[str]) -> bool:
    """Whether ``text`` is a usable answer to a speaker-selection prompt: one candidate name alone.

    Surrounding whitespace, quotes and a final period are allowed. Anything longer is refused even
    if it names one candidate: AutoGen counts mentions of *every* participant (also the previous
    speaker, who is not a candidate), so prose that names two agents makes it retry and give up.
    """
    return text.strip(" \t\r\n'\"`.") in candidates


def _wants_react(request: ScenarioRequest) -> bool:
    return any("Final Answer:" in message_text(m) for m in request.messages)


def _draw_length(rng: random.Random) -> int:
    tokens = math.exp(rng.gauss(math.log(MEDIAN_REPLY_TOKENS), _SIGMA))
    return int(min(_MAX_TOKENS, max(_MIN_TOKENS, round(tokens))))


def _role(agent: str | None) -> str:
    name = (agent or "").lower()
    for keys, role in _ROLES:
        if any(k in name for k in keys):
            return role
    return "generic"


def prompt_words(request: ScenarioRequest) -> list[str]:
    """Words (3+ letters) of the newest non-system message, at most 400."""
    # The newest non-system message is what the agent is answering; keep a bounded vocabulary.
    for message in reversed(request.messages):
        if message.get("role") != "system":
            return _WORD_RE.findall(message_text(message))[:400]
    return []


def _wants_json(request: ScenarioRequest) -> bool:
    fmt = request.extra.get("response_format")
    return isinstance(fmt, dict) and fmt.get("type") in ("json_object", "json_schema")


def _opening(role: str, rng: random.Random) -> str:
    if role == "verdict":
        return f"Decision: {rng.choice(_VERDICTS)}.\n"
    if role == "plan":
        return "Plan:\n1. "
    if role == "code":
        return "Proposed change:\n```python\ndef apply_fix(value):\n    return value\n```\n"
    if role == "test":
        return f"Result: {rng.choice(_TEST_RESULTS)}.\n"
    if role == "summary":
        return "Summary: "
    return ""


def _text_reply(role: str, words: list[str], target: int, rng: random.Random) -> str:
    """Sentences of prompt and filler words until about ``target`` tokens; the caller cuts to size."""
    parts = [_opening(role, rng)]
    sentence: list[str] = []
    # Counting the whole text after each word would be quadratic: estimate one token per word
    # (words average slightly more, so the text overshoots and the caller's cut is exact).
    estimate = count_tokens(parts[0])
    # Few distinct prompt words would repeat too often: lean on the filler then.
    p_prompt = min(0.6, len(set(words)) / 50)
    while estimate < target:
        sentence.append(rng.choice(words) if rng.random() < p_prompt else rng.choice(_FILLER))
        estimate += 1
        if len(sentence) >= rng.randint(8, 16):
            parts.append(" ".join(sentence).capitalize() + ". ")
            sentence = []
    if sentence:
        parts.append(" ".join(sentence).capitalize() + ".")
    return "".join(parts).strip()


def _json_reply(request: ScenarioRequest, words: list[str], target: int, rng: random.Random) -> str:
    fmt = request.extra.get("response_format") or {}
    schema = (fmt.get("json_schema") or {}).get("schema") if isinstance(fmt, dict) else None
    props = schema.get("properties") if isinstance(schema, dict) else None
    body_text = _text_reply("generic", words, max(8, target - 10), rng)
    if not isinstance(props, dict) or not props:
        return json.dumps({"answer": body_text})
    out: dict[str, object] = {}
    for name, spec in props.items():
        kind = spec.get("type") if isinstance(spec, dict) else None
        if kind in ("integer", "number"):
            out[name] = rng.randint(0, 10)
        elif kind == "boolean":
            out[name] = rng.random() < 0.5
        elif kind == "array":
            out[name] = [rng.choice(words) for _ in range(3)]
        elif kind == "object":
            out[name] = {}
        else:
            out[name] = body_text
    return json.dumps(out)
