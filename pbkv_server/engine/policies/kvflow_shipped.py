"""``kvflow-shipped``: KVFlow as its authors ship it (PanZaifeng/KVFlow on SGLang 0.5.2rc1).

Source: the public fork's ``python/sglang/srt/managers/agent_manager.py`` (``AgentManager``),
``mem_cache/radix_cache.py`` (``_update_leaf_node_priority``, ``_update_agent_to_last_nodes``),
``mem_cache/hiradix_cache.py`` (``evict``, ``_evict_helper``, ``load_back``) and
``managers/scheduler_output_processor_mixin.py`` (``DispatchLoadTasks``); sglang PR #33674 ports
it upstream. It differs from the NeurIPS paper that the ``kvflow`` policy implements (fixed
prompt = common prefix of an agent's requests, steps order with LRU ties, next-step prefetch into
free space only); both are kept, under their own names, because the paper's tables and this
repository's earlier figures refer to the paper's rules, and the shipped code is a different
algorithm:

- **tags**: a request tags only the *last* node of its cached path with its agent; a node created
  by an insert copies its parent's agents first, so a workflow's history chain carries the agents
  of the turns it grew from; each agent keeps the frontier of its last nodes (a new last node
  replaces its nearest tagged ancestor in the frontier);
- **hold priority** of a node: the smallest steps-to-execution of its agents, capped at
  ``hold_step + 1`` (an agent the plan does not list counts ``hold_step + 1``, a node without
  agents ``hold_step + 2``), with ``hold_step`` = ``--evict-pri-level`` = 4;
- **eviction** (``--enable-holding``): passes over the device leaves, first those of hold priority
  >= 3, then >= 2, then >= 1, then all; inside a pass the leaves come in the tree's depth-first
  order, which takes the oldest branch first (modelled as node creation order: an upper part cut
  off a node keeps the node's place);
- **prefetch**: for steps 0, 1, 2 (``--load-ahead-step`` 2) in order, for each agent planned at
  that step, the host part of each of its frontier nodes' paths is loaded back whole, evicting to
  make room, and the round stops at the first load that does not fit.

Modelling choices: steps-to-execution come from the app's static graph and the active workflows'
positions, as for ``kvflow`` (the shipped server receives them from its client-side planner,
``/update_agent_timestep``). The shipped configuration leaves ``enable_holding`` off, which makes
eviction the bare depth-first order; this policy models KVFlow with holding on, its
workflow-aware eviction. The engine core runs prefetch on every decode-only stretch within the
PCIe budget of the stretch (the fork loads once per plan update, asynchronously); so that two
agents' prefixes cannot displace each other stretch after stretch, a load may evict only nodes
farther from execution (a higher hold priority) than the agent it loads for.
"""

from __future__ import annotations

import itertools

from .base import register_policy
from .kvflow import INF_STEPS, KVFlowPolicy
from .plan import ChainPlan

#: ``--evict-pri-level`` (the fork's ``hold_step``), default 4.
HOLD_STEP = 4
#: ``--load-ahead-step``, default 2: agents planned within this many steps are prefetched.
LOAD_AHEAD_STEP = 2
#: The group of a node no agent tagged.
_UNTAGGED: frozenset = frozenset()


@register_policy("kvflow-shipped")
class ShippedKVFlowPolicy(KVFlowPolicy):
    """``(pass, creation order)``: the pass of hold priority >= 3 first, then 2, then 1, then 0.

    Per-node state (kept here, keyed by node): its agents, its creation order; per agent, the
    frontier of its requests' last nodes.
    """

    summary = "KVFlow as shipped (PanZaifeng/KVFlow): last-node agent tags, hold passes, 2-step prefetch"

    def __init__(self, context) -> None:
        super().__init__(context)
        self._tags: dict = {}  # node -> set of (app, agent)
        self._group: dict = {}  # node -> frozenset of its tags (its group, see group())
        self._groups: dict = {}  # (app, agent) -> {group containing it: None}
        self._born: dict = {}  # node -> creation order
        self._frontier: dict = {}  # (app, agent) -> {node: None}
        self._order = itertools.count()
        # agents whose steps changed since the cache last read its heaps (insertion-ordered)
        self._pending: dict = {}
        # tagged nodes of creation order 0 (the first node, upper parts cut off it), which tie
        # with untagged nodes (order 0 by default): ranked alone and re-filed at once, see
        # _steps_changed; (app, agent) -> {such node: None} in tagging order
        self._zero: dict = {}
        self._zero_tagged: dict = {}

    def hold_priority(self, node) -> int:
        """The fork's ``get_node_hold_priority``: min over the node's agents of min(5, steps)."""
        return self._hold(self._tags.get(node))

    def _hold(self, tags) -> int:
        if not tags:
            return HOLD_STEP + 2
        steps = self._steps
        return min(min(HOLD_STEP + 1, steps.get(k, INF_STEPS)) for k in tags)

    def priority(self, node) -> tuple:
        """``(3 - min(hold priority, 3), creation order)``: the eviction passes, then depth-first order."""
        return (HOLD_STEP - 1 - min(self.hold_priority(node), HOLD_STEP - 1), self._born.get(node, 0))

    # The pass is the same for every node with the same agents: the node's group is its set of
    # agents, so a plan change re-ranks the few groups that hold the agent (context.regroup), not
    # its nodes (issue 35 item 8: re-filing every node of an agent cost O(n) in one eviction).
    # Nodes of creation order 0 tie with untagged ones and are ranked alone (see _steps_changed).
    def group(self, node):
        """The node's set of agents (a frozenset; untagged: the empty one), or ``None`` for a node
        of creation order 0 (ranked alone)."""
        if not self._born.get(node, 0):
            return None
        return self._group.get(node, _UNTAGGED)

    def group_rank(self, group) -> tuple:
        """``(pass,)``: ``3 - min(hold priority of the agents, 3)``."""
        return (HOLD_STEP - 1 - min(self._hold(group), HOLD_STEP - 1),)

    def node_key(self, node) -> tuple:
        """``(creation order,)``."""
        return (self._born.get(node, 0),)

    def frontier(self, app: str, agent: str) -> list:
        """The agent's frontier nodes (last nodes of its requests), oldest first."""
        return list(self._frontier.get((app, agent), ()))

    # ----------------------------------------------------------------- tags
    def on_admit(self, admission, path) -> None:
        """A new last node inherits its parent's agents; the request tags its last node."""
        if not path:
            return
        last = path[-1]
        if last not in self._born:  # inserted by this request
            self._born[last] = next(self._order)
            parent_tags = self._tags.get(last.parent)
            for key in parent_tags or ():
                self._tag(last, key)
        wf = admission.workflow
        if wf is None or wf.app is None:
            return
        key = (wf.app, admission.agent)
        self._tag(last, key)
        self.context.reorder(last)
        front = self._frontier.setdefault(key, {})
        node = last.parent
        while node is not None and node.parent is not None:
            if node in front:  # the new last node extends an older one: it replaces it
                del front[node]
                break
            node = node.parent
        if last.children and any(self._below(n, last) for n in front):
            return  # an older last node extends this one: the frontier already covers it
        front[last] = None

    def _tag(self, node, key) -> None:
        tags = self._tags.setdefault(node, set())
        if key not in tags:
            tags.add(key)
            group = self._group[node] = frozenset(tags)
            for k in group:
                self._groups.setdefault(k, {})[group] = None
            if self._born.get(node, 0) == 0:
                self._zero[node] = None
                self._zero_tagged.setdefault(key, {})[node] = None

    @staticmethod
    def _below(node, ancestor) -> bool:
        while node is not None:
            if node is ancestor:
                return True
            node = node.parent
        return False

    def _steps_changed(self, key) -> None:
        """Note that the nodes tagged with ``key`` need re-filing; :meth:`settle` does it.

        Every node inherits its parent's agents, so an agent is tagged on most of its workflows'
        nodes, and steps change at every invocation of a pipeline: re-filing them here cost
        O(tree) per invocation (quadratic while a tree fills). The fork pays for a plan update
        when it evicts (``get_node_hold_priority`` recomputes a stale node's priority as its
        eviction pass reaches it); deferring the re-filing to the next heap read does the same.

        Decisions are those of re-filing at once: a heap read sees every node filed under its
        current priority, and priorities ``(pass, creation order)`` are unique except for order
        0, which the tagged nodes of order 0 share with untagged ones (there the refresh sequence
        breaks the tie), so those few are still re-filed at once.
        """
        self._pending[key] = None
        refresh = self.context.reorder
        for node in self._zero:
            if key in self._tags[node]:
                refresh(node)

    def settle(self) -> None:
        """Re-rank the groups of every agent whose steps changed, and re-file its nodes of creation
        order 0, in the order the changes came: O(groups + those nodes), not O(its nodes)."""
        if not self._pending:
            return
        pending, self._pending = self._pending, {}
        reorder, regroup = self.context.reorder, self.context.regroup
        for key in pending:
            for group in self._groups.get(key, ()):
                regroup(group)
            for node in self._zero_tagged.get(key, ()):
                reorder(node)

    def on_split(self, top, bottom) -> None:
        """The upper part keeps the agents and the place of the node it was cut from."""
        self._born[top] = self._born.get(bottom, 0)
        for key in self._tags.get(bottom, ()):
            self._tag(top, key)

    def on_drop(self, node) -> None:
        """Forget the node, and take it out of the frontiers."""
        self._born.pop(node, None)
        self._group.pop(node, None)
        if self._zero.pop(node, 0) is None:
            for key in self._tags.get(node, ()):
                self._zero_tagged[key].pop(node, None)
        for key in self._tags.pop(node, ()):
            front = self._frontier.get(key)
            if front is not None:
                front.pop(node, None)

    # ----------------------------------------------------------------- prefetch
    def prefetch_plan(self, seconds: float) -> ChainPlan:
        """``DispatchLoadTasks``: agents planned at steps 0..2, in step order, load the host part of
        their frontier paths whole, evicting only cache farther from execution than the agent;
        the round stops at the first load that does not fit."""
        return ChainPlan(self._load_targets(), evicts=True)

    def _load_targets(self):
        planned = sorted((s, i, key) for i, (key, s) in enumerate(self._steps.items()) if s <= LOAD_AHEAD_STEP)
        for step, _, key in planned:
            def farther(victim, tokens, step=step) -> bool:
                return self.hold_priority(victim) > step

            for last in list(self._frontier.get(key, ())):
                yield last, farther
