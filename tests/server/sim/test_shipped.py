"""What the engines ship (``shipped_by``) and the ``advise`` verdict against it (issue 35, item 2).

A team on SGLang can switch on SGLang's session cache today: ``advise`` must compare PBKV with the
best rule the user's engine ships, say "ties ...: no reason to switch" when the gap is under the
no-difference rule, and say so when the trace was recorded against the simulator.
"""

from __future__ import annotations

import json

import pytest

from pbkv_contract.trace import InvocationRecord, WorkflowEndRecord, parse_line
from pbkv_server.engine.policies import Policy, policy_info, register_policy, unregister_policy
from pbkv_server.engine.policies.sglang_session import SGLangSessionPolicy
from pbkv_server.sim.advise import Advice, advice_lines, advised_policies, trace_origin, verdict_of
from pbkv_server.sim.capacity import WorkingSet
from pbkv_server.sim.measures import MIN_DIFFERENCE
from pbkv_server.sim.shipped import alternative_label, best_shipped, shipped_policies


class _ToyShipped(Policy):
    """Toy rule that SGLang ships."""

    shipped_by, shipped_as = frozenset({"sglang"}), "toy eviction"

    def priority(self, node) -> tuple:
        return (node.last_access,)


class _UndeclaredVariant(SGLangSessionPolicy):
    """A variant of a shipped rule: not what SGLang ships."""


@pytest.fixture
def toy():
    register_policy("toy-shipped")(_ToyShipped)
    register_policy("toy-variant")(_UndeclaredVariant)
    yield "toy-shipped"
    unregister_policy("toy-shipped")
    unregister_policy("toy-variant")


def test_the_registry_says_what_each_engine_ships(toy):
    assert policy_info("sglang-session").shipped_by == {"sglang"}
    assert {"sglang-session", "sglang-priority", "toy-shipped"} <= set(shipped_policies("sglang"))
    assert "toy-variant" not in shipped_policies("sglang")  # a subclass does not inherit the declaration
    assert shipped_policies("vllm") == []  # vLLM ships LRU, the baseline, and nothing else modelled here
    assert set(shipped_policies("dynamo")) >= {"spec-prefill", "ttl-pin"}
    # a new shipped policy is replayed by advise and can be the verdict's alternative, nothing else edited
    assert "toy-shipped" in advised_policies("sglang") and "toy-shipped" not in advised_policies("vllm")
    assert advised_policies("sglang")[-1] == "opt"
    assert best_shipped({"lru": 1.0, "sglang-session": 1.02, "toy-shipped": 1.04, "pbkv": 1.2}, "sglang") == "toy-shipped"
    assert best_shipped({"lru": 1.0, "sglang-session": 0.98}, "sglang") == "lru"  # none beats LRU
    assert alternative_label("toy-shipped", "sglang") == "SGLang's toy eviction"
    assert alternative_label("sglang-session", "sglang") == "SGLang's session cache"


def _advice(latency_s: dict[str, float], engine: str = "sglang", origin: str | None = None) -> Advice:
    ws = WorkingSet(10, 100, 10.0, 0, 50, 1000, 20, 500)
    a = Advice("a6000-qwen3-14b", 72, ws, 200.0, 100.0, 1000, 1000, "short", engine=engine, trace_origin=origin)
    a.latency_s = dict(latency_s)
    a.hit_rate = {p: 0.5 for p in latency_s}
    a.speedup = {p: latency_s["lru"] / lat for p, lat in latency_s.items()}
    a.alternative = best_shipped(a.speedup, engine)
    a.verdict = verdict_of(a)
    return a


def test_pbkv_tied_with_the_engines_session_cache_is_no_reason_to_switch():
    # issue 35: pbkv 274.21 s, lae/he/sglang-session 274.26 s, all 1.05x LRU: the verdict said
    # "deploy PBKV: 1.05x faster than LRU"; the two differ by 0.02 %, under the 0.5 % rule.
    lru = 1.05 * 274.26
    a = _advice({"lru": lru, "lae": 274.26, "he": 274.26, "pbkv": 274.21, "sglang-session": 274.26, "opt": 250.0})
    assert a.alternative == "sglang-session"
    assert a.verdict.startswith("ties SGLang's session cache: no reason to switch (both 1.05x faster than LRU; "
                                "they differ by 0.02%, under the 0.5% no-difference rule)"), a.verdict


def test_pbkv_ahead_of_the_alternative_says_by_how_much_against_both():
    a = _advice({"lru": 330.0, "pbkv": 300.0, "sglang-session": 315.0, "sglang-priority": 330.0, "opt": 290.0})
    # 330 / 300 = 1.10x LRU; 315 / 300 = 1.05x the session cache (> 1 + MIN_DIFFERENCE)
    assert a.verdict.startswith("deploy PBKV: 1.10x faster than LRU and 1.05x faster than SGLang's session cache"), \
        a.verdict


def test_the_gap_threshold_is_the_no_difference_rule():
    just_under = 300.0 * (1 + 0.9 * MIN_DIFFERENCE)
    just_over = 300.0 * (1 + 1.1 * MIN_DIFFERENCE)
    assert _advice({"lru": 330.0, "pbkv": 300.0, "sglang-session": just_under}).verdict.startswith("ties ")
    assert _advice({"lru": 330.0, "pbkv": 300.0, "sglang-session": just_over}).verdict.startswith("deploy PBKV")


def test_a_faster_shipped_alternative_is_kept():
    a = _advice({"lru": 330.0, "pbkv": 300.0, "sglang-session": 280.0, "opt": 270.0})
    assert a.verdict.startswith("keep SGLang's session cache: 1.18x faster than LRU, PBKV 1.10x"), a.verdict
    a = _advice({"lru": 330.0, "pbkv": 329.0, "sglang-session": 300.0, "opt": 270.0})
    assert a.verdict == "no gain from PBKV: 1.00x LRU; keep SGLang's session cache (1.10x faster than LRU)"


def test_an_engine_that_ships_only_lru_compares_with_lru():
    a = _advice({"lru": 330.0, "pbkv": 300.0, "sglang-session": 280.0, "opt": 270.0}, engine="vllm")
    assert a.alternative == "lru"  # SGLang's session cache is no option on vLLM
    assert a.verdict.startswith("deploy PBKV: 1.10x faster than LRU, the best of what vLLM ships here"), a.verdict


def test_a_simulator_trace_is_named_in_the_report():
    a = _advice({"lru": 330.0, "pbkv": 300.0, "opt": 290.0}, origin="simulator")
    lines = advice_lines(a)
    assert any(line.startswith("trace: recorded against pbkv-server's simulator") for line in lines)
    assert lines[-1].startswith("verdict (simulator trace): deploy PBKV")
    plain = advice_lines(_advice({"lru": 330.0, "pbkv": 300.0, "opt": 290.0}))
    assert not any("simulator" in line for line in plain) and plain[-1].startswith("verdict: deploy PBKV")


def _call(i: int, served_by: str | None) -> InvocationRecord:
    return InvocationRecord("app", f"w{i}", 0, "a", 1.0, 2.0, 10, 5, ["h"], served_by=served_by)


def test_trace_origin_reads_served_by_and_old_traces_as_unknown():
    assert trace_origin([_call(0, "sim"), _call(1, "sim"), WorkflowEndRecord("app", "w0", 3.0)]) == "simulator"
    assert trace_origin([_call(0, "sim"), _call(1, None)]) == "partly simulator"
    assert trace_origin([_call(0, None), _call(1, "sglang")]) is None
    old = parse_line('{"type":"invocation","v":1,"app":"a","workflow_id":"w","step":0,"agent":"x","t_start":1,'
                     '"t_end":2,"prompt_tokens":3,"completion_tokens":1,"prefix_hashes":["h"]}')
    assert old.served_by is None  # a trace written before the field: unknown
    assert parse_line(json.dumps(_call(0, "sim").to_json())).served_by == "sim"
    assert "served_by" not in _call(0, None).to_json()  # unknown stays out of the file
