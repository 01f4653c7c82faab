"""``Conversations.path`` (and ``path_nodes``) give the live path as kept, without a filter on
``live_of``: every node of a kept path is in ``live_of`` (each change keeps both).

The check: a memory-short replay of synthetic coding-agent sessions with ``pbkv`` and a host
tier (paths set at every admission, nodes cut, dropped from the host, conversations ended), in
which every call of ``path`` and ``path_nodes`` is compared with the path filtered on ``live_of``, and every kept
path's nodes are checked to be in ``live_of`` after each change.
"""

from __future__ import annotations

import pytest

from pbkv_contract.trace import read_trace
from pbkv_server.engine.policies.conversation import Conversations
from pbkv_server.hardware.profiles import get_profile
from pbkv_server.predictors import make_predictor
from pbkv_server.sim.simulator import ReplayConfig, ReplayOptions, load_workload, simulate
from pbkv_server.sim.synth.agents import write_trace


@pytest.fixture(scope="module")
def coding_sessions(tmp_path_factory):
    path = tmp_path_factory.mktemp("conversation-path") / "coding.jsonl"
    write_trace(str(path), graph="coding-agent", workflows=12, seed=3)
    return read_trace(str(path))


def _kept_in_live_of(conversations: Conversations) -> None:
    for conv, nodes in conversations._path.items():
        for node in nodes:
            assert conv in conversations.live_of.get(node, ()), (conv, node)


def test_every_node_of_a_live_path_is_in_live_of(coding_sessions, monkeypatch):
    path, path_nodes = Conversations.path, Conversations.path_nodes
    calls, changes = [], []

    def checked_path(self, conversation):
        got = path(self, conversation)
        assert got == [n for n in self._path.get(conversation, ()) if n in self.live_of]
        calls.append(len(got))
        return got

    def checked_nodes(self, conversation):
        got = path_nodes(self, conversation)
        assert list(got) == [n for n in self._path.get(conversation, ()) if n in self.live_of]
        calls.append(len(got))
        return got

    def after(name):
        change = getattr(Conversations, name)

        def checked(self, *args):
            change(self, *args)
            _kept_in_live_of(self)
            changes.append(name)

        return checked

    monkeypatch.setattr(Conversations, "path", checked_path)
    monkeypatch.setattr(Conversations, "path_nodes", checked_nodes)
    for name in ("_set_path", "split", "drop", "ended"):
        monkeypatch.setattr(Conversations, name, after(name))
    simulate(load_workload(coding_sessions),
             ReplayConfig("pbkv", get_profile("h100-qwen2.5-32b"), device_tokens=300_000, host_tokens=300_000),
             ReplayOptions(concurrency=8, predictor=make_predictor("context", 3, coding_sessions)))
    assert len(calls) > 500 and sum(calls) > 5 * len(calls), (len(calls), sum(calls))
    for name in ("_set_path", "split", "drop", "ended"):
        assert changes.count(name) > 10, (name, changes.count(name))
