"""The default scenario: deterministic, role-shaped, honours max_tokens, realistic lengths."""

from __future__ import annotations

import json
import random
import statistics

from pbkv_server.scenarios.base import ScenarioRequest
from pbkv_server.scenarios.default import MEDIAN_REPLY_TOKENS, DefaultScenario
from pbkv_server.scenarios.tokenizer import count_tokens

MESSAGES = [
    {"role": "system", "content": "You verify claims about films and their directors."},
    {"role": "user", "content": "Claim: The director of Jaws was born in Cincinnati, Ohio in 1946."},
]


def _req(agent="verifier", max_tokens=None, extra=None):
    return ScenarioRequest("hover", agent, "w1", 2, MESSAGES, max_tokens, extra or {})


def test_same_seed_same_reply_and_different_seed_differs():
    s = DefaultScenario()
    assert s.reply(_req(), random.Random(7)) == s.reply(_req(), random.Random(7))
    assert s.reply(_req(), random.Random(7)) != s.reply(_req(), random.Random(8))


def test_verifier_reply_starts_with_a_decision():
    text = DefaultScenario().reply(_req("verifier"), random.Random(1))
    assert text.split("\n")[0] in {"Decision: verified.", "Decision: needs more evidence.", "Decision: not supported."}


def test_max_tokens_caps_the_reply():
    for cap in (1, 5, 40):
        text = DefaultScenario().reply(_req(max_tokens=cap), random.Random(3))
        assert 0 < count_tokens(text) <= cap


def test_reply_lengths_have_the_documented_median():
    lengths = [count_tokens(DefaultScenario().reply(_req("writer"), random.Random(i))) for i in range(200)]
    # Log-normal with median 120 tokens clipped to [12, 600]: the sample median lies near 120.
    assert 0.75 * MEDIAN_REPLY_TOKENS <= statistics.median(lengths) <= 1.25 * MEDIAN_REPLY_TOKENS
    assert min(lengths) >= 10 and max(lengths) <= 600


def test_json_schema_response_format_gets_matching_json():
    schema = {"type": "object", "properties": {"verdict": {"type": "string"}, "score": {"type": "integer"},
                                                "ok": {"type": "boolean"}}}
    extra = {"response_format": {"type": "json_schema", "json_schema": {"name": "v", "schema": schema}}}
    data = json.loads(DefaultScenario().reply(_req(extra=extra), random.Random(0)))
    assert set(data) == {"verdict", "score", "ok"}
    assert isinstance(data["score"], int) and isinstance(data["ok"], bool) and isinstance(data["verdict"], str)


def test_speaker_selection_prompt_gets_one_listed_role():
    prompt = ("You are in a role play game. Read the conversation. Then select the next role from "
              "['planner', 'coder', 'tester'] to play. Only return the role.")
    req = ScenarioRequest("swe", "selector", "w", 1, [{"role": "user", "content": prompt}], None, {})
    picks = {DefaultScenario().reply(req, random.Random(i)) for i in range(30)}
    assert picks == {"planner", "coder", "tester"}


def test_react_prompt_gets_a_final_answer_line():
    system = "Use the format:\nThought: ...\nFinal Answer: the final answer to the original input question"
    req = ScenarioRequest("finance", "Financial Analyst", "w", 0,
                          [{"role": "system", "content": system}, {"role": "user", "content": "Revenue of 3M?"}], 50, {})
    text = DefaultScenario().reply(req, random.Random(0))
    assert text.startswith("Thought: I now can give a great answer\nFinal Answer: ") and count_tokens(text) <= 50


def _autogen_selector_prompt(participants: list[str], history: str) -> str:
    # SelectorGroupChat's own default template (autogen-agentchat 0.7.5), formatted as it does.
    import inspect

    from autogen_agentchat.teams import SelectorGroupChat

    template = inspect.signature(SelectorGroupChat.__init__).parameters["selector_prompt"].default
    roles = "\n".join(f"{n}: An agent that provides assistance." for n in ("planner", "coder", "tester"))
    return template.format(roles=roles, participants=str(participants), history=history)


def test_autogen_default_selector_prompt_gets_exactly_one_allowed_name_for_every_seed():
    from pbkv_server.scenarios.default import answers_selection

    # The previous speaker (planner) is left out of {participants}; the history names every agent.
    history = "user: fix bug 17\n\nplanner: coder should patch it, then tester runs the tests.\n\n"
    prompt = _autogen_selector_prompt(["coder", "tester"], history)
    seen = set()
    for seed in range(200):
        req = ScenarioRequest("swe", "speaker_selector", "w", seed, [{"role": "user", "content": prompt}], None, {})
        reply = DefaultScenario().reply(req, random.Random(seed))
        assert reply in ("coder", "tester")
        assert answers_selection(reply, ["coder", "tester"])
        seen.add(reply)
    assert seen == {"coder", "tester"}


def test_autogen_retry_feedback_restricts_the_answer_to_its_list():
    prompt = _autogen_selector_prompt(["planner", "coder", "tester"], "user: go\n\n")
    messages = [
        {"role": "user", "content": prompt},
        {"role": "assistant", "content": "coder"},
        {"role": "user", "content": "Repeated speaker is not allowed, please select a different name from: ['tester']."},
    ]
    for seed in range(20):
        req = ScenarioRequest("swe", "speaker_selector", "w", seed, messages, None, {})
        assert DefaultScenario().reply(req, random.Random(seed)) == "tester"


def test_answers_selection_accepts_one_bare_candidate_name_only():
    from pbkv_server.scenarios.default import answers_selection

    names = ["coder", "tester"]
    assert answers_selection("coder", names)
    assert answers_selection(" 'tester'.\n", names)
    # Prose naming one candidate is refused: AutoGen also counts the (excluded) previous speaker.
    assert not answers_selection("tester, since the planner is done", names)
    assert not answers_selection("planner", names)  # not a candidate (the previous speaker)
    assert not answers_selection("", names)
