"""The backends' workflow book feeds a policy's lifecycle hooks as the embedded engine does
(``pbkv_server/backends/lifecycle.py``), without SGLang or vLLM."""

from __future__ import annotations

import logging

import pytest

from pbkv_contract.hints import Hints
from pbkv_contract.prediction import Prediction, Predictor
from pbkv_server.backends.book import WorkflowBook
from pbkv_server.backends.lifecycle import BackendContext
from pbkv_server.engine.policies import make_policy
from pbkv_server.engine.policies.base import Policy
from pbkv_server.engine.radix import DEVICE
from pbkv_server.engine.scoring import ScoreBoard
from pbkv_server.engine.types import EngineRequest


def _context() -> BackendContext:
    """A backend context as a strategy or runtime builds one, before a book attaches it."""
    return BackendContext(ScoreBoard(0.7, 3), lambda: 0.0, 3)


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class _Node:
    """A backend node as the policies read it."""

    def __init__(self, last_access: float) -> None:
        self.sc = None
        self.last_access = last_access
        self.tokens = 1
        self.tier = DEVICE


class _Recorder(Policy):
    """Records every hook call (name and the fields a policy reads)."""

    def __init__(self, cache) -> None:
        super().__init__(cache)
        self.calls: list[tuple] = []

    def priority(self, node) -> tuple:
        return (node.last_access,)

    def on_invocation(self, wf, previous_agent) -> None:
        self.calls.append(("invocation", wf.workflow_id, wf.agent, previous_agent))

    def on_admit(self, admission, path) -> None:
        wf = admission.workflow
        rid = admission.request.request_id if admission.request is not None else None
        self.calls.append(("admit", admission.index, wf.workflow_id if wf else None, admission.agent, rid, len(path)))

    def on_prompt_cached(self, request, wf, path) -> None:
        self.calls.append(("cached", request.request_id, wf.workflow_id if wf else None, list(path)))

    def on_finish(self, request, wf, end) -> None:
        self.calls.append(("finish", request.request_id, wf.workflow_id if wf else None, end))

    def on_workflow_end(self, wf) -> None:
        self.calls.append(("end", wf.workflow_id))

    def on_session_close(self, session_id) -> None:
        self.calls.append(("close", session_id))

    def on_split(self, top, bottom) -> None:
        self.calls.append(("split",))

    def on_drop(self, node) -> None:
        self.calls.append(("drop", node.sc is not None))


class _PlanNext(Predictor):
    """Every workflow's next agent is ``plan`` (so plan's cache scores 1 + 0.7 + 0.49)."""

    horizon = 3

    def predict(self, queries):
        return [Prediction([{"plan": 1.0}] * 3) for _ in queries]


def _req(rid: str, hints: Hints | None) -> EngineRequest:
    return EngineRequest(rid, (), (), 1, hints)


def test_hooks_come_in_the_engines_order_with_the_engine_cores_types():
    clock = _Clock()
    policy = _Recorder(_context())
    book = WorkflowBook(0.7, 3, None, idle_retire_s=10.0, clock=clock, policy=policy)
    assert isinstance(policy.context, BackendContext) and policy.context.board is book.board
    a0, a1 = Hints("wfA", "plan", 0), Hints("wfA", "code", 1)
    book.request(a0, None, request=_req("r0", a0))
    book.request(None, None, request=_req("r1", None))  # anonymous: admitted and finished, no invocation
    book.admitted("r0", ["n1", "n2"])
    book.admitted("r0", ["n1", "n2"])  # a preempted request admitted again: reported once
    book.finished("r1")  # never reported admitted: its admission is implied first
    book.finished("r0", "end-node")
    book.finished("r0", "end-node")  # idempotent
    book.request(a1, None, request=_req("r2", a1))
    book.end_workflow("wfA")
    book.request(Hints("wfB", "plan", 0), None)  # no request named: admitted at once
    clock.t = 11.0
    book.retire_idle()  # wfB idle for 11 s > 10 s
    book.close_session("s1")
    assert policy.calls == [
        ("invocation", "wfA", "plan", None),
        ("admit", 0, "wfA", "plan", "r0", 2),
        ("admit", 1, None, None, "r1", 0),
        ("finish", "r1", None, None),
        ("finish", "r0", "wfA", "end-node"),
        ("invocation", "wfA", "code", "plan"),
        ("end", "wfA"),
        ("invocation", "wfB", "plan", None),
        ("admit", 3, "wfB", "plan", None, 0),
        ("end", "wfB"),
        ("close", "s1"),
    ]
    assert policy.context.now == 11.0


def test_splits_and_drops_reach_the_policy_while_the_node_keeps_its_record():
    policy = _Recorder(_context())
    book = WorkflowBook(0.7, 3, None, policy=policy)
    hints = Hints("wfA", "plan", 0)
    book.invocation(hints)
    top, bottom = _Node(1.0), _Node(1.0)
    book.touch([bottom], hints)
    book.split(top, bottom)
    book.forget(bottom)
    assert policy.calls[-2:] == [("split",), ("drop", True)] and bottom.sc is None and top.sc is not None


def test_pbkv_sees_workflow_ages_and_waiting_requests_through_the_book():
    """Both nodes score alike and the younger workflow's is the more recent: LRU (and
    ``pbkv-paper``) would evict the older one first, ``pbkv`` with a host tier evicts the younger
    workflow's cache first, and ranks a waiting request's cache above both, as in the engine core.
    Until the backend reports a host tier the book's cache has none, and ``pbkv`` ranks by score,
    then LRU (its rule 6)."""
    policy = make_policy("pbkv", _context())
    book = WorkflowBook(0.7, 3, _PlanNext(), policy=policy)
    assert policy.context.host_capacity == 0
    old, young = _Node(1.0), _Node(2.0)
    a, b = Hints("wfA", "plan", 0), Hints("wfB", "plan", 0)
    book.request(a, None, request=_req("ra", a))
    book.admitted("ra")
    book.touch([old], a)
    book.request(b, None, request=_req("rb", b))
    book.admitted("rb")
    book.touch([young], b)
    assert old.sc.score == young.sc.score == 1.0 + 0.7 + 0.49
    assert policy.priority(young) == (1, 0.0, young.sc.score, 2.0)  # no host tier: score, then LRU
    assert policy.priority(old) == (1, 0.0, old.sc.score, 1.0)
    policy.context.host_capacity = 1000  # as the SGLang and vLLM backends set it when a host tier exists
    assert policy.priority(young) == (1, -1, young.sc.score, 2.0)  # wfB's age: 1
    assert policy.priority(old) == (1, 0, old.sc.score, 1.0)  # wfA's age: 0
    a1 = Hints("wfA", "plan", 1)
    book.request(a1, None, request=_req("ra1", a1))  # waiting: wfA's plan cache ranks above all
    assert policy.priority(old) == (2, 0, old.sc.score, 1.0)
    book.admitted("ra1")
    assert policy.priority(old)[0] == 1
    book.end_workflow("wfB")  # a single-step workflow ended: its cache ranks as unhinted (LRU)
    assert policy.priority(young) == (1, float("-inf"), 0.0, 2.0)


def test_a_failing_hook_is_logged_once_and_never_raises(caplog):
    class Broken(_Recorder):
        def on_invocation(self, wf, previous_agent) -> None:
            raise KeyError("needs the engine's cache")

    book = WorkflowBook(0.7, 3, None, policy=Broken(_context()))
    with caplog.at_level(logging.ERROR):
        for step in range(3):
            book.invocation(Hints("wfA", "plan", step))
    assert sum("policy hook on_invocation failed" in r.getMessage() for r in caplog.records) == 1
    assert len(book.workflows["wfA"].history) == 3


def test_a_policy_without_hooks_gets_no_feed_but_reads_the_books_board():
    policy = make_policy("he", _context())
    book = WorkflowBook(0.7, 3, None, policy=policy)
    assert book.feed is None and policy.context.board is book.board


def test_a_prompt_cached_after_its_admission_reaches_the_policy_between_admission_and_finish():
    """SGLang inserts a prompt after admitting it: the deeper path reaches ``on_prompt_cached``,
    only while the request is admitted and not finished."""
    policy = _Recorder(_context())
    book = WorkflowBook(0.7, 3, None, policy=policy)
    a0 = Hints("wfA", "plan", 0)
    book.request(a0, None, request=_req("r0", a0))
    book.cached("r0", ["n1"])  # a match of the waiting request: no insert yet, ignored
    book.admitted("r0", ["n1"])
    book.cached("r0", ["n1", "n2"])
    book.finished("r0", "n2")
    book.cached("r0", ["n1", "n2", "n3"])  # after its finish: ignored
    assert [c for c in policy.calls if c[0] != "invocation"] == [
        ("admit", 0, "wfA", "plan", "r0", 1), ("cached", "r0", "wfA", ["n1", "n2"]), ("finish", "r0", "wfA", "n2")]


def test_prefix_keys_identify_whole_prefixes():
    from array import array

    from pbkv_server.backends.lifecycle import PrefixKeys

    a, b = PrefixKeys(array("q", [5, 6, 7, 8])), PrefixKeys([5, 6, 9, 8, 4])
    assert len(a) == 4 and len(b) == 5
    assert a[0] == b[0] and a[1] == b[1]  # same first two tokens
    assert a[2] != b[2] and a[3] != b[3]  # token 2 differs, so every later prefix does too
    assert a[-1] == a[3] == PrefixKeys((5, 6, 7, 8))[3]
    assert a[1:3] == [a[1], a[2]]
    with pytest.raises(IndexError):
        a[4]
