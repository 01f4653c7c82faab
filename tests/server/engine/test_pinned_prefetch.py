"""Regression case 5 for every registered policy: prefetch never moves a node pinned with
:meth:`PrefixCache.lock` (issue 27, item 12: ``kvflow`` and ``kvflow-shipped`` raised out of
``Engine.step`` where ``pbkv`` and ``pbkv-aggressive`` skipped the pinned node)."""

from __future__ import annotations

import pytest

from pbkv_contract.hints import Hints
from pbkv_server.engine.policies import available_policies, policy_info
from pbkv_server.engine.radix import HOST

from .engine_helpers import TablePredictor, chain, device_keys, make_engine, request, run

GRAPH = {"planner": ["coder"], "coder": ["tester"], "tester": ["planner"]}


def _warm_on_host(policy: str):
    """Graph planner -> coder -> tester. Two workflows call each agent once (prompt = the agent's 2
    system blocks + a workflow block), w1 stays at coder, predicted to call tester next (pbkv's
    prefetch value). Everything is then demoted to the host (1000 tokens each tier): every
    prefetching policy has a host candidate (kvflow: tester's fixed prompt, 1 step away;
    kvflow-shipped: the frontiers of coder, tester, planner, within 2 steps; pbkv: w1's nodes)."""
    predictor = TablePredictor({"w1": [{"tester": 1.0}] * 3, "w2": [{"tester": 1.0}] * 3})
    eng = make_engine(policy, device=1000, host=1000, predictor=predictor, rho=1.0)
    eng.set_app_graph("app", GRAPH)
    step = {"w1": 0, "w2": 0}
    for agent in ("planner", "tester", "coder"):
        for wf in ("w2", "w1"):
            labels = [f"{agent}-sys1", f"{agent}-sys2", f"{wf}-{agent}"]
            eng.submit(request(f"{wf}-{agent}", labels, hints=Hints(wf, agent, step[wf], "app")))
            step[wf] += 1
            run(eng)
    eng.cache.evict_device(10**6)
    # 3 x 20 system + 6 x 10 workflow tokens; a policy that holds nodes (ttl-pin, continuum) keeps some
    assert eng.cache.tree.device_tokens + eng.cache.tree.host_tokens == 120 and eng.cache.tree.host_tokens >= 60
    return eng


def _decode(eng) -> None:
    """A long anonymous decode: its decode-only steps run the policy's prefetch rounds."""
    eng.submit(request("long", ["z"], output=40))
    run(eng)


ONLINE = [p for p in available_policies() if not policy_info(p).offline]


def test_offline_policies_do_not_prefetch():
    """The offline bounds run only in replay with a future and never prefetch; an offline variant
    of an online policy (``pbkv-nextuse``) prefetches with that policy's own plan. So the engine
    cases below cover every prefetch plan that can move a node."""
    online_plans = {_registered(p).prefetch_plan for p in ONLINE}
    for p in available_policies():
        if policy_info(p).offline and policy_info(p).prefetches:
            assert _registered(p).prefetch_plan in online_plans, p
    assert {"pbkv", "pbkv-aggressive", "kvflow", "kvflow-shipped"} <= {p for p in ONLINE if policy_info(p).prefetches}


@pytest.mark.parametrize("policy", ONLINE)
def test_prefetch_never_moves_a_pinned_host_node(policy):
    """With every host node pinned, prefetch loads nothing and raises nothing; the nodes stay on
    the host. Unpinned, the same run prefetches under every prefetching policy (so the pins, not
    the scenario, are what stopped it)."""
    free = _warm_on_host(policy)
    _decode(free)
    assert (free.stats.prefetched_tokens > 0) == policy_info(policy).prefetches

    eng = _warm_on_host(policy)
    pinned = [n for n in eng.cache.tree.nodes() if n.tier == HOST]
    for node in pinned:
        eng.cache.lock(node)
    _decode(eng)
    assert eng.stats.prefetched_tokens == 0
    assert all(n.attached and n.tier == HOST for n in pinned)
    for node in pinned:
        eng.cache.unlock(node)
    assert all(n.lock == 0 for n in eng.cache.tree.nodes())


def test_shipped_kvflow_ends_its_round_at_a_pinned_node_like_at_any_failed_load():
    """kvflow-shipped loads frontiers in step order: coder (0), tester (1), planner (2). Pin the top
    of tester's prompt: coder's prompts come back (system + both workflow blocks), then tester's
    load is refused and the round ends there (the fork's ``to_break``), so planner stays too."""
    eng = _warm_on_host("kvflow-shipped")
    top = next(n for n in eng.cache.tree.nodes() if n.keys[0] == chain(["tester-sys1"])[0])
    eng.cache.lock(top)
    _decode(eng)
    coder = {k for wf in ("w1", "w2") for k in chain(["coder-sys1", "coder-sys2", f"{wf}-coder"])}
    assert device_keys(eng) - set(chain(["z"])) == coder
    assert top.attached and top.tier == HOST


def _registered(name: str) -> type:
    from pbkv_server.engine.policies.base import _class
    return _class(name)
