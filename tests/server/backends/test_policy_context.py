"""Every engine hands its policies a whole :class:`PolicyContext` (issue 32): the embedded engine's
cache, the SGLang plugin's strategy and the vLLM runtime, checked against the protocol's members,
and no policy module reads anything else of the engine."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from pbkv_server.backends.book import WorkflowBook
from pbkv_server.backends.lifecycle import BackendContext
from pbkv_server.engine import Engine, EngineConfig
from pbkv_server.engine.context import EngineContext
from pbkv_server.engine.policies import available_policies, make_policy, policy_info
from pbkv_server.engine.policies.base import PolicyContext
from pbkv_server.engine.scoring import ScoreBoard
from pbkv_server.hardware.profiles import get_profile

POLICIES = Path(__file__).resolve().parents[3] / "pbkv_server" / "engine" / "policies"

#: The protocol's members, read from the protocol itself (properties and methods).
MEMBERS = sorted(name for name, value in vars(PolicyContext).items()
                 if not name.startswith("_") and (isinstance(value, property) or inspect.isfunction(value)))


def _members_of(context: object) -> list[str]:
    return sorted(name for name in MEMBERS if hasattr(context, name))


def test_the_protocol_names_what_a_policy_may_read():
    assert MEMBERS == ["app_graphs", "board", "device_capacity", "future", "horizon", "host_capacity", "now",
                       "prefill_tokens_per_s", "regroup", "reorder", "rho", "split"]


def test_the_embedded_engine_hands_every_policy_an_engine_context():
    engine = Engine(EngineConfig(profile=get_profile("h100-qwen2.5-32b"), policy="pbkv", device_tokens=1000,
                                 host_tokens=1000))
    context = engine.cache.policy.context
    assert isinstance(context, EngineContext) and isinstance(context, PolicyContext)
    assert _members_of(context) == MEMBERS
    assert context.board is engine.board and context.host_capacity == 1000 and context.device_capacity == 1000
    engine.cache.now = 4.5
    assert context.now == 4.5  # the cache's clock is the context's


def test_a_backend_context_implements_the_protocol_and_reads_its_book():
    context = BackendContext(ScoreBoard(0.7, 3), lambda: 0.0, 3)
    assert isinstance(context, PolicyContext) and _members_of(context) == MEMBERS
    policy = make_policy("pbkv", context)
    book = WorkflowBook(0.7, 3, None, clock=lambda: 7.0, policy=policy)
    assert policy.context is context and context.board is book.board and context.now == 7.0
    node = object()
    assert context.split(node, 1) is node and context.reorder(node) is None


@pytest.mark.parametrize("policy", [p for p in available_policies() if not policy_info(p).offline])
def test_every_online_policy_builds_on_a_backend_context(policy):
    assert make_policy(policy, BackendContext(ScoreBoard(0.7, 3), lambda: 0.0, 3)).context is not None


def test_no_policy_module_reads_the_cache_or_branches_on_a_missing_context():
    """A policy reaches the engine through ``self.context`` only: no name ``cache`` is read, and
    no ``context is None`` branch exists (every engine hands one)."""
    offenders = []
    for path in sorted(POLICIES.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Name) and node.id == "cache":
                offenders.append(f"{path.name}:{node.lineno} reads 'cache'")
            if isinstance(node, ast.Attribute) and node.attr == "cache":
                offenders.append(f"{path.name}:{node.lineno} reads '.cache'")
            if (isinstance(node, ast.Compare) and any(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops)
                    and isinstance(node.left, (ast.Name, ast.Attribute))
                    and getattr(node.left, "attr", getattr(node.left, "id", "")) == "context"):
                offenders.append(f"{path.name}:{node.lineno} tests the context against None")
    assert offenders == []


def test_the_protocol_check_catches_a_context_that_lacks_a_member():
    class Partial:
        now = 0.0

        def reorder(self, node) -> None: ...

    assert not isinstance(Partial(), PolicyContext)  # runtime-checkable: a missing member is seen
