"""Hint protocol v1 (docs/architecture.md, "Hint protocol"): parsing, encoding and fail-safe behaviour."""

import pytest

from pbkv_contract.hints import (
    HEADER_AGENT,
    HEADER_APP,
    HEADER_STEP,
    HEADER_WORKFLOW_ID,
    HintError,
    Hints,
    decode_name,
    encode_name,
    parse_hints,
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


def test_encode_name_rejects_too_long_after_encoding():
    # 50 two-byte characters encode to 300 chars (%XX%XX each): over the 128 limit.
    with pytest.raises(HintError):
        encode_name("\u00e9" * 50)
    assert decode_name(encode_name("a b%c")) == "a b%c"
