"""The KV-hint envelope (``kv_hints``) of vLLM RFC #53421 / SGLang RFC #36224 / Dynamo KvHint:
understood actions, ignored (counted) unknown ones, malformed envelopes."""

import pytest

from pbkv_contract.hints import parse_kv_hints


def _env(*actions, version="0.1"):
    return {"kv_hints": {"protocol_version": version, "message_id": "2f82414c", "actions": list(actions)}}


def _action(action_type, version="1.0", payload=None, action_id="a1"):
    return {"action_id": action_id, "action_type": action_type, "action_version": version,
            "payload": {} if payload is None else payload}


def test_known_actions_are_understood_with_their_trajectory():
    env, reason = parse_kv_hints(_env(
        _action("kv.retain", payload={"workflow_id": "wf-1", "ttl_s": 30}, action_id="keep"),
        _action("kv.pin", "1.2", payload={"session_id": "sess-7"}),
        _action("kv.demote", payload={"workflow_id": "wf-2"}),
        _action("kv.evict", payload={"session_id": "wf-3"}),
        _action("kv.fetch", payload={"block_hashes": ["ab", "cd"]}),
        _action("kv.prefetch"),
    ))
    assert reason is None and env.ignored == 0 and env.message_id == "2f82414c"
    assert [(a.kind, a.workflow_id) for a in env.actions] == [
        ("retain", "wf-1"), ("retain", "sess-7"), ("demote", "wf-2"), ("evict", "wf-3"), ("fetch", None),
        ("fetch", None)]
    assert env.actions[0].action_id == "keep" and env.actions[0].payload["ttl_s"] == 30
    assert env.actions[4].payload == {"block_hashes": ["ab", "cd"]}


def test_unknown_types_and_versions_are_ignored_and_counted_never_an_error():
    env, reason = parse_kv_hints(_env(
        _action("kv.share"),                  # a type PBKV does not act on
        _action("kv.fetch", version="2.0"),   # a major version it does not know
        _action("kv.demote", payload={"workflow_id": "wf-2"}),
    ))
    assert reason is None
    assert env.ignored == 2 and [a.kind for a in env.actions] == ["demote"]
    # a protocol version it does not know: the whole envelope is ignored, still not an error
    env, reason = parse_kv_hints(_env(_action("kv.fetch"), _action("kv.retain"), version="9.0"))
    assert reason is None and env.actions == () and env.ignored == 2


def test_no_envelope_is_no_hint():
    assert parse_kv_hints({"model": "m"}) == (None, None)
    assert parse_kv_hints({"kv_hints": None}) == (None, None)
    assert parse_kv_hints("not a body") == (None, None)


@pytest.mark.parametrize("envelope, why", [
    ("fetch please", "must be an object"),
    ({"message_id": "m", "actions": []}, "protocol_version"),
    ({"protocol_version": "0.1", "actions": []}, "message_id"),
    ({"protocol_version": "0.1", "message_id": "m", "actions": {}}, "actions must be a list"),
    ({"protocol_version": "0.1", "message_id": "m", "actions": ["kv.fetch"]}, "actions[0] must be an object"),
    ({"protocol_version": "0.1", "message_id": "m",
      "actions": [{"action_id": "a", "action_type": "kv.fetch", "action_version": "1.0", "payload": "bad"}]},
     "payload must be an object"),
    ({"protocol_version": "0.1", "message_id": "m",
      "actions": [{"action_id": "a", "action_type": 7, "action_version": "1.0", "payload": {}}]}, "action_type"),
    ({"protocol_version": "0.1", "message_id": "m",
      "actions": [_action("kv.evict", payload={"workflow_id": "bad id"})]}, "workflow_id"),
])
def test_malformed_envelopes_are_malformed_hints(envelope, why):
    env, reason = parse_kv_hints({"kv_hints": envelope})
    assert env is None
    assert reason.startswith("kv_hints: ") and why in reason


# The shapes the engines' public code sends (read with the search tools; payload field names as
# there): vLLM's block actions (fed by Dynamo's session policy), SGLang's KvHintManager, Dynamo's
# router message and its vLLM bridge.

def test_vllm_block_actions_with_protocol_1_0_are_understood():
    """Dynamo's session policy and vLLM's ``kv.retain`` / ``kv.evict`` parser use protocol "1.0"
    and payloads with ``execute_at``, ``include_current_request``, ``block_hashes``."""
    body = {"kv_hints": {"protocol_version": "1.0", "message_id": "sess-1-9-0", "actions": [
        {"action_id": "sess-1-9-0", "action_type": "kv.retain", "action_version": "1.0",
         "payload": {"priority": 3, "ttl_seconds": 2.5, "execute_at": "request_completion",
                     "include_current_request": True, "block_hashes": ["11"]}},
        {"action_id": "sess-1-9-1", "action_type": "kv.evict", "action_version": "1.0",
         "payload": {"execute_at": "request_completion", "include_current_request": True, "block_hashes": []}},
    ]}}
    env, reason = parse_kv_hints(body)
    assert reason is None and env.ignored == 0 and env.field == "kv_hints"
    assert [(a.kind, a.workflow_id) for a in env.actions] == [("retain", None), ("evict", None)]
    assert env.actions[0].payload["ttl_seconds"] == 2.5


def test_sglang_kv_hint_manager_actions_and_a_left_out_payload():
    """SGLang: ``kv.deref`` (the request's own session, empty payload), ``kv.demote`` of
    ``payload.session_id``, ``kv.prefetch`` with the payload left out (its struct defaults it)."""
    env, reason = parse_kv_hints({"kv_hints": {"protocol_version": "0.1", "message_id": "m", "actions": [
        {"action_id": "d0", "action_type": "kv.deref", "action_version": "1.0", "payload": {}},
        {"action_id": "demote-0", "action_type": "kv.demote", "action_version": "1.0",
         "payload": {"session_id": "agent-42", "session_generation": 3}},
        {"action_id": "p0", "action_type": "kv.prefetch", "action_version": "1.0"},
    ]}})
    assert reason is None
    assert [(a.kind, a.workflow_id, a.payload) for a in env.actions] == [
        ("evict", None, {}), ("demote", "agent-42", {"session_id": "agent-42", "session_generation": 3}),
        ("fetch", None, {})]


@pytest.mark.parametrize("where, body", [
    ("kv_hint", lambda e: {"kv_hint": e}),
    ("kv_transfer_params.kv_hint", lambda e: {"kv_transfer_params": {"do_remote_prefill": False, "kv_hint": e}}),
])
def test_dynamo_kv_hint_message_is_read_where_dynamo_puts_it(where, body):
    """Dynamo #13134: one ``kv_hint`` message with a ``kv.fetch@1.0`` action; its vLLM bridge
    passes it as ``kv_transfer_params.kv_hint``."""
    envelope = {"protocol_version": "0.1", "message_id": "message-1", "actions": [
        {"action_id": "action-1", "action_type": "kv.fetch", "action_version": "1.0",
         "payload": {"source_control_endpoint": "tcp://host-a:25000", "block_hashes": [17], "mode": "copy"}}]}
    env, reason = parse_kv_hints(body(envelope))
    assert reason is None and env.field == where and [a.kind for a in env.actions] == ["fetch"]
    bad, reason = parse_kv_hints(body({"protocol_version": "0.1", "actions": []}))
    assert bad is None and reason.startswith(where + ": ") and "message_id" in reason


def test_own_trajectory_end_waits_for_the_request_other_targets_do_not():
    env, _ = parse_kv_hints(_env(_action("kv.evict"), _action("kv.demote", payload={"session_id": "other"}),
                                 _action("kv.fetch")))
    evict, demote, fetch = env.actions
    assert evict.target("wf-own") == "wf-own" and evict.after_request("wf-own")
    assert demote.target("wf-own") == "other" and not demote.after_request("wf-own")
    assert not fetch.after_request("wf-own") and fetch.target(None) is None


def test_a_retain_or_fetch_keeps_another_workflow_active_never_its_own_or_an_end():
    """``keeps``: the rule pbkv-server and both backends apply (``WorkflowTable.keep``)."""
    env, _ = parse_kv_hints(_env(_action("kv.pin", payload={"workflow_id": "wf-tool"}),
                                 _action("kv.prefetch", payload={"session_id": "wf-tool"}),
                                 _action("kv.retain"), _action("kv.fetch", payload={"workflow_id": "wf-own"}),
                                 _action("kv.demote", payload={"workflow_id": "wf-tool"})))
    assert [a.keeps("wf-own") for a in env.actions] == ["wf-tool", "wf-tool", None, None, None]
    assert [a.keeps(None) for a in env.actions] == ["wf-tool", "wf-tool", None, "wf-own", None]
