"""Synthetic workload generator: determinism, prompt-sharing structure, hidden-property signal."""

from __future__ import annotations

import random
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from pbkv_contract.trace import InvocationRecord, WorkflowEndRecord, group_workflows, read_trace
from pbkv_contract.blocks import prefix_hashes
from pbkv_server.sim.synth.agents import GRAPHS, generate, write_trace
from pbkv_server.sim.synth.common import CHARS_PER_TOKEN, segment_hashes


def invocations(records):
    return [r for r in records if isinstance(r, InvocationRecord)]


def common_prefix(a, b) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def test_same_seed_gives_identical_records_and_other_seed_differs():
    a = [r.to_json() for r in generate("codegen", 20, seed=5)]
    b = [r.to_json() for r in generate("codegen", 20, seed=5)]
    c = [r.to_json() for r in generate("codegen", 20, seed=6)]
    assert a == b
    assert a != c


def test_records_are_consistent_v1_invocations(tmp_path):
    path = tmp_path / "t.jsonl"
    n_wf, n_inv = write_trace(str(path), graph="mixed", workflows=12, seed=1, block_chars=128)
    records = read_trace(path)  # the v1 reader accepts every line
    invs = invocations(records)
    assert n_wf == 12 == sum(isinstance(r, WorkflowEndRecord) for r in records)
    assert n_inv == len(invs)
    for r in invs:
        assert r.block_chars == 128
        assert len(r.block_tokens) == len(r.prefix_hashes)
        assert sum(r.block_tokens) == r.prompt_tokens
        assert all(t == 128 // CHARS_PER_TOKEN for t in r.block_tokens[:-1])
        assert r.t_start < r.t_end and r.completion_tokens > 0
        assert abs(sum(v * v for v in r.features) - 1.0) < 1e-9  # unit-norm feature vector


def test_codegen_walks_the_call_graph_with_loops():
    walk = re.compile(r"^planner coder tester( analyzer coder tester)*$")
    lengths = set()
    for wid, invs in group_workflows(generate("codegen", 60, seed=2)).items():
        agents = " ".join(r.agent for r in invs)
        assert walk.match(agents), agents
        assert [r.step for r in invs] == list(range(len(invs)))
        lengths.add(len(invs))
    assert len(lengths) >= 3  # loops vary between workflows


def test_supervisor_repeats_the_planners_route_in_every_repair_round():
    # Routes: planner [X] coder tester ( analyzer [X] coder tester )*, X in {reproducer, searcher}
    # or absent, and the same X (or none) in every round of one workflow.
    walk = re.compile(r"^planner( reproducer| searcher)? coder tester( analyzer\1? coder tester)*$")
    routes, lengths = set(), set()
    for invs in group_workflows(generate("supervisor", 120, seed=2)).values():
        agents = " ".join(r.agent for r in invs)
        m = walk.match(agents)
        assert m, agents
        assert [r.step for r in invs] == list(range(len(invs)))
        routes.add(m.group(1))
        lengths.add(len(invs))
    assert routes == {None, " reproducer", " searcher"}
    assert {3, 4} <= lengths and max(lengths) >= 12  # routes and repair rounds both vary


def test_supervisor_route_depends_on_the_hidden_difficulty():
    # Hard tasks (min_loops 1: at least one repair round) pick "reproduce" with weight 0.6, easy
    # ones with 0.1, so workflows with repair rounds use the reproducer more often than the others.
    flows = list(group_workflows(generate("supervisor", 600, seed=9)).values())
    def share(group):
        return sum(invs[1].agent == "reproducer" for invs in group) / len(group)
    no_repair = [f for f in flows if len(f) <= 4]
    repaired = [f for f in flows if len(f) > 4]
    assert share(repaired) > share(no_repair) + 0.1


def test_routed_graph_leaves_the_other_graphs_traces_unchanged():
    # Routes are drawn only for routed graphs: a codegen walk still follows its fixed loop and the
    # generator's random stream is untouched (first workflow's agents and token counts below were
    # produced before routes existed, seed 3).
    first = next(iter(group_workflows(generate("codegen", 1, seed=3)).values()))
    assert [r.agent for r in first] == ["planner", "coder", "tester"] + ["analyzer", "coder", "tester"] * 8
    assert [r.prompt_tokens for r in first][:6] == [6611, 8016, 9321, 9432, 10422, 11165]


def test_prompt_sharing_structure():
    spec = GRAPHS["codegen"]
    block = 256
    preamble_blocks = spec.preamble_tokens * CHARS_PER_TOKEN // block
    flows = list(group_workflows(generate("codegen", 8, seed=3, block_chars=block)).values())
    first = flows[0][0].prefix_hashes
    for invs in flows:
        for r in invs:
            # Every prompt of the app starts with the shared preamble.
            assert r.prefix_hashes[:preamble_blocks] == first[:preamble_blocks]
        # Two different agents of one workflow share only the preamble's full blocks.
        planner, coder = invs[0], invs[1]
        assert common_prefix(planner.prefix_hashes, coder.prefix_hashes) == preamble_blocks
        # An agent's later call extends its earlier prompt: all earlier full blocks are kept.
        coders = [r for r in invs if r.agent == "coder"]
        for early, late in zip(coders, coders[1:]):
            assert late.prefix_hashes[: len(early.prefix_hashes) - 1] == early.prefix_hashes[:-1]
            assert late.prompt_tokens > early.prompt_tokens  # history accumulates
    # The same agent in two workflows shares preamble + role, and not the task.
    a, b = flows[0][1], flows[1][1]
    shared = common_prefix(a.prefix_hashes, b.prefix_hashes)
    role_chars = (spec.preamble_tokens + 1400) * CHARS_PER_TOKEN  # role prompt >= 1400 tokens
    assert role_chars // block <= shared < len(a.prefix_hashes) - 1


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 5), min_size=1, max_size=6),
    st.lists(st.integers(0, 5), min_size=1, max_size=6),
    st.integers(1, 40),
    st.sampled_from([4, 8, 16]),
)
def test_segment_hashes_share_exactly_like_hashing_the_text(ids_a, ids_b, scale, block):
    # Segment i has a fixed length and distinct random text; both hashings must agree on sharing.
    rng = random.Random(0)
    lengths = {i: scale * (i + 1) for i in range(6)}
    texts = {i: "".join(rng.choice("abcdefghij") for _ in range(lengths[i])) for i in range(6)}
    seg = lambda ids: [(f"s{i}", lengths[i]) for i in ids]
    txt = lambda ids: "".join(texts[i] for i in ids)
    ha, hb = segment_hashes(seg(ids_a), block), segment_hashes(seg(ids_b), block)
    ta, tb = prefix_hashes(txt(ids_a), block), prefix_hashes(txt(ids_b), block)
    assert len(ha) == len(ta) and len(hb) == len(tb)
    # Random text could share a few leading characters across segments by chance; segments never do.
    assert common_prefix(ha, hb) <= common_prefix(ta, tb)
    if ids_a == ids_b[: len(ids_a)] or ids_b == ids_a[: len(ids_b)]:
        assert common_prefix(ha, hb) == common_prefix(ta, tb)


def _centroid_accuracy(xs, ys) -> float:
    half = len(xs) // 2
    cents = {}
    for x, y in zip(xs[:half], ys[:half]):
        c = cents.setdefault(y, [0.0] * len(x) + [0])
        for i, v in enumerate(x):
            c[i] += v
        c[-1] += 1
    cents = {y: [v / c[-1] for v in c[:-1]] for y, c in cents.items()}
    hits = 0
    for x, y in zip(xs[half:], ys[half:]):
        guess = max(cents, key=lambda k: sum(a * b for a, b in zip(x, cents[k])))
        hits += guess == y
    return hits / (len(xs) - half)


def test_hidden_difficulty_makes_loop_count_learnable_from_features():
    flows = list(group_workflows(generate("codegen", 400, seed=4)).values())
    xs = [invs[0].features for invs in flows]  # the task message only
    ys = [len(invs) > 6 for invs in flows]     # two or more repair loops
    majority = max(sum(ys), len(ys) - sum(ys)) / len(ys)
    assert _centroid_accuracy(xs, ys) > majority + 0.1


def test_signal_agent_output_tells_whether_another_round_follows():
    xs, ys = [], []
    for invs in group_workflows(generate("codegen", 300, seed=7)).values():
        for r, nxt in zip(invs, invs[1:] + [None]):
            if r.agent == "tester":
                xs.append(r.features)
                ys.append(nxt is None)
    assert _centroid_accuracy(xs, ys) > 0.8
