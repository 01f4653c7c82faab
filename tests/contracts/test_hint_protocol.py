"""Hint protocol v1 (docs/architecture.md, "Hint protocol"): parsing, encoding and fail-safe behaviour."""

import pytest

from pbkv_contract.hints import (
    HEADER_AGENT,
    HEADER_APP,
    HEADER_INTERNAL,
    HEADER_STEP,
    HEADER_WORKFLOW_ID,
    HintError,
    Hints,
    decode_name,
    encode_name,
    hint_name_problem,
    name_problem,
    parse_hints,
    validate_workflow_id,
    workflow_id_from,
)


def test_headers_round_trip_including_non_ascii_agent():
    hints = Hints(workflow_id="wf-1:a.b_c", agent="Ré viewer/α 100%", step=7, app="hover")
    headers = hints.to_headers()
    # Every header value must be printable ASCII, or HTTP clients reject it.
    assert all(v.isascii() and v.isprintable() for v in headers.values())
    assert headers[HEADER_AGENT] == "R%C3%A9 viewer/%CE%B1 100%25"
    parsed, error = parse_hints(headers)
    assert error is None and parsed == hints


def test_header_lookup_is_case_insensitive():
    parsed, error = parse_hints({"x-pbkv-workflow-id": "w", "x-pbkv-agent": "coder", "x-pbkv-step": "3"})
    assert error is None and parsed == Hints("w", "coder", 3, None)


def test_body_custom_params_used_when_headers_absent():
    body = {"model": "m", "custom_params": {"pbkv": {"workflow_id": "w9", "agent": "tester", "step": 2, "app": "swe"}}}
    parsed, error = parse_hints({}, body)
    assert error is None and parsed == Hints("w9", "tester", 2, "swe")


def test_headers_win_over_body():
    body = {"custom_params": {"pbkv": {"workflow_id": "body", "agent": "a", "step": 1}}}
    parsed, _ = parse_hints({HEADER_WORKFLOW_ID: "head", HEADER_AGENT: "b", HEADER_STEP: "4"}, body)
    assert parsed == Hints("head", "b", 4, None)


def test_no_hints_is_anonymous_not_an_error():
    assert parse_hints({"content-type": "application/json"}, {"messages": []}) == (None, None)


@pytest.mark.parametrize(
    "headers, fragment",
    [
        ({HEADER_WORKFLOW_ID: "bad id!", HEADER_AGENT: "a", HEADER_STEP: "0"}, "workflow id"),
        ({HEADER_WORKFLOW_ID: "x" * 129, HEADER_AGENT: "a", HEADER_STEP: "0"}, "workflow id"),
        ({HEADER_WORKFLOW_ID: "w", HEADER_AGENT: "a", HEADER_STEP: "-1"}, "step"),
        ({HEADER_WORKFLOW_ID: "w", HEADER_AGENT: "a", HEADER_STEP: "1e3"}, "step"),
        ({HEADER_WORKFLOW_ID: "w", HEADER_AGENT: "a", HEADER_STEP: str(2**31)}, "step"),
        ({HEADER_WORKFLOW_ID: "w", HEADER_STEP: "0"}, "required"),
        ({HEADER_WORKFLOW_ID: "w", HEADER_AGENT: "", HEADER_STEP: "0"}, "name"),
        ({HEADER_WORKFLOW_ID: "w", HEADER_AGENT: "caf\u00e9", HEADER_STEP: "0"}, "printable"),
        ({HEADER_AGENT: "a", HEADER_STEP: "0"}, "missing"),
        ({HEADER_WORKFLOW_ID: "w", HEADER_AGENT: "a", HEADER_STEP: "0", HEADER_APP: "%ZZ" + "a" * 200}, "name"),
    ],
)
def test_malformed_header_hints_return_reason_and_never_raise(headers, fragment):
    parsed, error = parse_hints(headers)
    assert parsed is None
    assert fragment in error


@pytest.mark.parametrize(
    "pbkv",
    [
        "not an object",
        {"workflow_id": "w", "agent": "a", "step": True},
        {"workflow_id": "w", "agent": 5, "step": 0},
        {"workflow_id": None, "agent": "a", "step": 0},
        {"workflow_id": "w", "agent": "a", "step": 0, "app": ""},
    ],
)
def test_malformed_body_hints_return_reason(pbkv):
    parsed, error = parse_hints({}, {"custom_params": {"pbkv": pbkv}})
    assert parsed is None and error


def test_the_internal_flag_travels_in_headers_and_body_and_is_sent_only_when_true():
    plain, internal = Hints("w", "speaker_selector", 3, "swe"), Hints("w", "speaker_selector", 3, "swe", internal=True)
    assert HEADER_INTERNAL not in plain.to_headers() and "internal" not in plain.to_body()
    assert internal.to_headers()[HEADER_INTERNAL] == "1" and internal.to_body()["internal"] is True
    assert parse_hints(internal.to_headers()) == (internal, None)
    assert parse_hints({}, {"custom_params": {"pbkv": internal.to_body()}}) == (internal, None)
    assert parse_hints({**plain.to_headers(), HEADER_INTERNAL: "0"}) == (plain, None)
    assert parse_hints(plain.to_headers()) == (plain, None)  # absent: an agent step


@pytest.mark.parametrize("value", ["true", "yes", "2", ""])
def test_a_malformed_internal_flag_is_a_malformed_hint(value):
    headers = {**Hints("w", "a", 0).to_headers(), HEADER_INTERNAL: value}
    parsed, error = parse_hints(headers)
    assert parsed is None and HEADER_INTERNAL in error
    parsed, error = parse_hints({}, {"custom_params": {"pbkv": {"workflow_id": "w", "agent": "a", "step": 0, "internal": value}}})
    assert parsed is None and "internal" in error


def test_an_internal_flag_without_a_workflow_id_or_sent_twice_is_malformed():
    assert "missing" in parse_hints({HEADER_INTERNAL: "1"})[1]
    twice = list(Hints("w", "a", 0).to_headers().items()) + [(HEADER_INTERNAL, "1"), (HEADER_INTERNAL.lower(), "1")]

    class Multi(dict):  # a multi-dict's items() lists a repeated header twice, as Starlette's does
        def items(self):
            return twice

    assert "sent 2 times" in parse_hints(Multi(twice))[1]


def test_encode_name_rejects_too_long_after_encoding():
    # 50 two-byte characters encode to 300 chars (%XX%XX each): over the 128 limit.
    with pytest.raises(HintError):
        encode_name("\u00e9" * 50)
    assert decode_name(encode_name("a b%c")) == "a b%c"


def test_the_sdk_sends_exactly_the_contracts_header_encoding():
    """One encoder: the SDK's stamping hot path writes Hints.to_headers(), so both always agree."""
    import httpx

    import pbkv_sdk
    from pbkv_contract.hints import fit_name

    seen: list[httpx.Request] = []
    transport = pbkv_sdk.PBKVTransport(httpx.MockTransport(lambda r: seen.append(r) or httpx.Response(200, json={})))
    name = "Analyste financière / 审核员 100%"
    with httpx.Client(transport=transport) as client:
        with pbkv_sdk.workflow(app="appé", workflow_id="wf-9", server_url="http://127.0.0.1:9"), pbkv_sdk.agent(name):
            client.post("http://llm/v1/chat/completions", json={"messages": []})
    expected = Hints("wf-9", fit_name(name), 0, "appé").to_headers()
    assert {k: seen[0].headers[k] for k in expected} == expected
    assert expected[HEADER_AGENT] == "Analyste financi%C3%A8re / %E5%AE%A1%E6%A0%B8%E5%91%98 100%25"


def test_fit_name_shortens_to_the_header_limit_and_refuses_empty_names():
    from pbkv_contract.hints import MAX_FIELD_CHARS, fit_name

    assert fit_name("é" * 100) == "é" * 21  # 21 * 6 = 126 <= 128 < 22 * 6 encoded chars
    assert fit_name("a" * 300) == "a" * MAX_FIELD_CHARS
    with pytest.raises(HintError):
        fit_name("")
    with pytest.raises(HintError):
        encode_name("é" * 22)


@pytest.mark.parametrize("name, problem", [
    ("planner", None), ("Ré viewer/α 100%", None), ("x" * 128, None),
    ("", "is empty"), (7, "is not a string (int)"),
    ("αβ\tγ\n", "contains the control character U+0009 at index 2"),  # by characters: byte 4, encoded 12
    ("ok\x85", "contains the control character U+0085 at index 2"),  # C1
    ("\udc80x", "contains the lone surrogate U+DC80 at index 0"),
    ("é" * 22, "encodes to 132 chars, over 128"),  # 6 encoded chars each
])
def test_name_problem_says_what_breaks_the_rule_and_where(name, problem):
    assert name_problem(name) == problem


def test_a_header_name_is_checked_decoded_and_the_index_is_its_decoded_position():
    # "R%C3%A9%09x" is "Ré\tx": the tab is character 2 (byte 3, encoded position 7); the parser
    # refuses it, so every server and plugin that parses hints serves the request anonymously
    hints, error = parse_hints({HEADER_WORKFLOW_ID: "w", HEADER_AGENT: "R%C3%A9%09x", HEADER_STEP: "0", HEADER_APP: "a%7F"})
    assert hints is None and error == "agent name contains the control character U+0009 at index 2"
    assert hint_name_problem(Hints("w", "Ré\tx", 0, None)) == "agent name contains the control character U+0009 at index 2"
    assert hint_name_problem(Hints("w", "fine", 0, "a\x7f")) == "app name contains the control character U+007F at index 1"
    assert hint_name_problem(Hints("w", "fine", 0, None)) is None


def test_a_body_name_with_a_control_character_is_refused_by_the_parser():
    body = {"custom_params": {"pbkv": {"workflow_id": "w", "agent": "ok", "step": 1, "app": "x\x01y"}}}
    assert parse_hints({}, body) == (None, "app name contains the control character U+0001 at index 1")
    body["custom_params"]["pbkv"]["app"] = "xy"
    hints, error = parse_hints({}, body)
    assert error is None and (hints.agent, hints.app) == ("ok", "xy")


def test_workflow_id_from_any_text_replaces_other_characters_and_cuts_to_the_limit():
    assert workflow_id_from("HoVer claim #12 (é)") == "HoVer_claim__12____"
    assert workflow_id_from("") == "workflow" and workflow_id_from("", empty="log") == "log"
    long = workflow_id_from("a" * 300)
    assert long == "a" * 128 and validate_workflow_id(long) == long
    assert workflow_id_from("x" * 300, max_chars=120) == "x" * 120
    with pytest.raises(ValueError):
        workflow_id_from("x", max_chars=129)
