"""``synth --graph coding-agent``: its trace's marginals against the published Copilot figures.

The marginals are measured from the written trace (token counts, block hashes and block tokens,
times) by :func:`pbkv_contract.marginals.trace_marginals`, which knows nothing of the generator;
that function is itself checked on a hand-built trace whose figures are counted by hand.
"""

from __future__ import annotations

import pytest

from pbkv_contract.marginals import trace_marginals
from pbkv_contract.trace import InvocationRecord, WorkflowEndRecord, read_trace
from pbkv_server.sim.synth.agents import write_trace

#: Published figures (Azure/AzurePublicDataset analysis/GitHubCopilotCodingAgents/DATASET_CARD.md,
#: "Dataset Statistics"), restated from the raw sums so this test does not read the generator's table.
SESSIONS, TURNS, CALLS, BATCHES = 301_026, 1_189_581, 9_310_255, 7_767_261
PROMPT, COMPLETION, CACHED = 631_401_670_144, 4_914_633_421, 540_950_119_440
TARGETS = {
    "prompt_tokens_per_call": PROMPT / CALLS,
    "repeated_prefix_share": CACHED / PROMPT,
    "completion_tokens_per_call": COMPLETION / CALLS,
    "calls_per_turn": CALLS / TURNS,
    "turns_per_session": TURNS / SESSIONS,
    "tool_batches_per_turn": BATCHES / TURNS,
}


@pytest.fixture(scope="module")
def coding_trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("ghcp") / "coding.jsonl"
    write_trace(str(path), graph="coding-agent", workflows=300, seed=0)
    return read_trace(path)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(TARGETS))
def test_coding_agent_marginals_within_ten_percent(coding_trace, name):
    measured = trace_marginals(coding_trace)[name]
    assert measured == pytest.approx(TARGETS[name], rel=0.10), (name, measured, TARGETS[name])


@pytest.fixture(scope="module")
def small_coding_trace(tmp_path_factory):
    """40 sessions (the marginals need 300, about 9 CPU seconds: too many for the fast lane)."""
    path = tmp_path_factory.mktemp("ghcp-small") / "coding.jsonl"
    write_trace(str(path), graph="coding-agent", workflows=40, seed=0)
    return read_trace(path)


def test_coding_agent_calls_extend_the_previous_prompt(small_coding_trace):
    """Within a turn, without compaction, a call's blocks start with every full block of the previous call."""
    coding_trace = small_coding_trace
    by_turn: dict[str, list[InvocationRecord]] = {}
    for rec in coding_trace:
        if isinstance(rec, InvocationRecord):
            by_turn.setdefault(rec.workflow_id, []).append(rec)
    extended = grown = 0
    for calls in by_turn.values():
        for a, b in zip(calls, calls[1:]):
            if b.prompt_tokens > a.prompt_tokens:
                grown += 1
                extended += b.prefix_hashes[: len(a.prefix_hashes) - 1] == a.prefix_hashes[:-1]
    assert grown > 1000 and extended == grown
    # every session's turns share its session id, and each turn is its own workflow
    assert all(r.session_id and r.workflow_id.startswith(r.session_id) for r in coding_trace if isinstance(r, InvocationRecord))


def _call(wid, step, t0, t1, hashes, tokens, sid="s", completion=10):
    return InvocationRecord(app="a", workflow_id=wid, step=step, agent="x", t_start=t0, t_end=t1,
                            prompt_tokens=sum(tokens), completion_tokens=completion, prefix_hashes=hashes,
                            block_tokens=tokens, session_id=sid)


def test_marginals_of_a_hand_built_trace():
    # session s: turn t0 = calls (A), (A B), then after a 0 s gap (A B C); turn t1 = (A X) after idle.
    # session s2: one call (Q). Shared with the previous call: 0, 100, 150, 100, 0 (Q: first call).
    recs = [
        _call("t0", 0, 0.0, 1.0, ["A"], [100]),
        _call("t0", 1, 3.0, 4.0, ["A", "B"], [100, 50]),      # 2 s tool batch before it
        _call("t0", 2, 4.0, 5.0, ["A", "B", "C"], [100, 50, 30]),  # no batch (0 s gap)
        WorkflowEndRecord(app="a", workflow_id="t0", t=5.0),
        _call("t1", 0, 60.0, 61.0, ["A", "X"], [100, 20]),
        _call("u0", 0, 0.5, 1.5, ["Q"], [40], sid="s2", completion=30),
    ]
    m = trace_marginals(recs)
    prompt = 100 + 150 + 180 + 120 + 40
    assert m["repeated_prefix_share"] == pytest.approx((100 + 150 + 100) / prompt)
    assert m["prompt_tokens_per_call"] == pytest.approx(prompt / 5)
    assert m["completion_tokens_per_call"] == pytest.approx(70 / 5)
    assert m["calls_per_turn"] == pytest.approx(5 / 3)
    assert m["turns_per_session"] == pytest.approx(3 / 2)
    assert m["tool_batches_per_turn"] == pytest.approx(1 / 3)
    assert m["tool_batch_s_mean"] == pytest.approx(2.0)


@pytest.mark.slow  # its fixture's trace takes about 8 CPU-s
def test_the_docs_table_is_this_trace(coding_trace):
    # docs/coding-agent-workload.md's generated block (scripts/make_coding_agent_docs.py) is
    # rendered from this very trace: a changed generator must be followed by the script (issue 32).
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    spec = importlib.util.spec_from_file_location("make_coding_agent_docs", root / "scripts" / "make_coding_agent_docs.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert (script.WORKFLOWS, script.SEED) == (300, 0)  # the fixture's trace
    page = script.PAGE.read_text(encoding="utf-8")
    assert script.render(page, script.block(trace_marginals(coding_trace))) == page, \
        "docs/coding-agent-workload.md is stale: run scripts/make_coding_agent_docs.py"
