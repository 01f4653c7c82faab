"""``pbkv``'s one-reader fast path (:meth:`PBKVPolicy._priority_one`) ranks every node as the
general path of :meth:`PBKVPolicy.priority` does.

The fast path repeats the general path's rules (8, 2, the score with rule 7's part) for a node
whose one reader is a workflow of a growing app, without the dict of parts; it exists for speed
only (a coding agent's conversation: most nodes have one reader), so any difference is a bug.
The check: on a memory-short replay of synthetic coding-agent sessions with a host tier (growing
conversations, waiting requests, evictions to the host), every priority the cache asks is
computed both ways and compared exactly.
"""

from __future__ import annotations

import pytest

from pbkv_contract.trace import read_trace
from pbkv_server.engine.policies.pbkv import PBKVPolicy
from pbkv_server.hardware.profiles import get_profile
from pbkv_server.predictors import make_predictor
from pbkv_server.sim.simulator import ReplayConfig, ReplayOptions, load_workload, simulate
from pbkv_server.sim.synth.agents import write_trace


@pytest.fixture(scope="module")
def coding_sessions(tmp_path_factory):
    path = tmp_path_factory.mktemp("fast-path") / "coding.jsonl"
    write_trace(str(path), graph="coding-agent", workflows=12, seed=3)
    return read_trace(str(path))


def test_the_one_reader_fast_path_ranks_every_node_as_the_general_path(coding_sessions, monkeypatch):
    general = PBKVPolicy.priority
    fast_calls = []
    checked = []

    def count_fast(self, *args):
        fast_calls.append(1)
        return PBKVPolicy_priority_one(self, *args)

    def both_ways(self, node):
        fast = general(self, node)
        self.one_reader_fast_path = False  # instance attribute: the general path for this call
        try:
            slow = general(self, node)
        finally:
            del self.one_reader_fast_path
        assert fast == slow, f"fast path {fast} != general path {slow}"
        checked.append(1)
        return fast

    PBKVPolicy_priority_one = PBKVPolicy._priority_one
    monkeypatch.setattr(PBKVPolicy, "_priority_one", count_fast)
    monkeypatch.setattr(PBKVPolicy, "priority", both_ways)
    workload = load_workload(coding_sessions)
    profile = get_profile("h100-qwen2.5-32b")
    # a device of a few sessions' prompts, host 1x: evictions to the host and queued requests
    simulate(workload, ReplayConfig("pbkv", profile, device_tokens=300_000, host_tokens=300_000),
             ReplayOptions(concurrency=8, predictor=make_predictor("context", 3, coding_sessions)))
    # the fast path ran, and was compared with the general path every time
    assert len(fast_calls) > 100, len(fast_calls)
    assert len(checked) >= len(fast_calls)


def test_the_one_reader_host_order_ranks_every_node_as_the_general_path(coding_sessions, monkeypatch):
    """:meth:`PBKVPolicy.host_priority`'s one-reader path (the same sums as ``_parts_score`` and
    ``NextUse.estimate`` over one workflow) gives every host rank the general path gives."""
    general = PBKVPolicy.host_priority
    one_reader = []
    checked = []

    def both_ways(self, node):
        fast = general(self, node)
        self.one_reader_fast_path = False
        try:
            slow = general(self, node)
        finally:
            del self.one_reader_fast_path
        assert fast == slow, f"fast path {fast} != general path {slow}"
        checked.append(1)
        sc = node.sc
        if sc is not None and len(sc.access) == 1 and fast[0] == 1 and fast[1] != -float("inf"):
            one_reader.append(1)  # an active node of one reader with a finite next use
        return fast

    monkeypatch.setattr(PBKVPolicy, "host_priority", both_ways)
    workload = load_workload(coding_sessions)
    profile = get_profile("h100-qwen2.5-32b")
    simulate(workload, ReplayConfig("pbkv", profile, device_tokens=300_000, host_tokens=300_000),
             ReplayOptions(concurrency=8, predictor=make_predictor("context", 3, coding_sessions)))
    assert len(one_reader) > 100, len(one_reader)
    assert len(checked) >= len(one_reader)
