"""``kvflow``: KVFlow's workflow-aware eviction and next-step prefetch (KVFlow, NeurIPS 2025).

From the app's static agent graph (:meth:`Engine.set_app_graph`) each agent gets a
steps-to-execution value: the fewest graph edges from the current agent of any active workflow
of that app (0 for an agent running now, 1 for a possible next agent, unreachable = infinity).

Each agent's fixed prompt is the longest common block prefix of all its requests so far (its
system prompt and tool descriptions); an agent seen once has none yet (one prompt cannot tell
its fixed part from its dynamic part). The value is set on the fixed prompt's last node and
propagated to the ancestors with min (a shared prefix is as urgent as its most urgent agent).
Eviction order: dynamic suffixes, fixed prompts of agents no active workflow can reach, and all
cache when no step is known (no graph, no active workflow) first, in LRU order, so KVFlow falls
back to LRU where it cannot predict; then fixed-prompt nodes of reachable agents by descending
steps-to-execution, LRU as tie-break. On decode-only steps the host-tier parts of next-step
agents' fixed prompts are loaded into free device space.

The common prefix is found by binary search, which is exact for chained keys (equal key at
position i implies equal prefix up to i), as the engine's units are (:mod:`..pages`).

What it can and cannot gain: on static pipelines whose agents have large fixed prompts, kvflow
keeps the prompts of the next agents where LRU evicts exactly those (see the engine scenario
tests). On dynamic workflows whose reuse lies in each workflow's own growing history (task,
earlier outputs), that history is dynamic suffix by KVFlow's definition and leaves in LRU order,
while the fixed prompts are hot enough that LRU keeps them anyway: kvflow then orders almost
exactly like LRU.
"""

from __future__ import annotations

from collections import Counter, deque

from .base import Policy, register_policy
from .plan import ChainPlan

INF_STEPS = 1 << 30


@register_policy("kvflow")
class KVFlowPolicy(Policy):
    """See module docstring. Per-node state (kept here, keyed by node): the set of ``(app, agent)``
    whose fixed prompt contains the node (no entry or an empty set = dynamic suffix)."""

    summary = "KVFlow: steps-to-execution from the static agent graph, next-step prefetch"
    uses_app_graph = True

    def __init__(self, context) -> None:
        super().__init__(context)
        self._marks: dict = {}  # node -> set of (app, agent) whose fixed prompt contains it
        self._dist: dict[str, dict[str, dict[str, int]]] = {}
        self._at: dict[str, Counter] = {}
        self._steps: dict[tuple[str, str], int] = {}
        self._ref: dict[tuple[str, str], list] = {}
        self._lcp: dict[tuple[str, str], int] = {}
        self._fixed: dict[tuple[str, str], object] = {}
        # app -> agents in first-seen order (a dict, not a set: _recompute re-files nodes in this
        # order, which decides heap tie-breaks; a set of strings iterates in per-process hash order)
        self._agents: dict[str, dict[str, None]] = {}

    def steps(self, app: str, agent: str) -> int:
        """Steps-to-execution of ``agent`` in ``app`` (:data:`INF_STEPS` if unreachable)."""
        return self._steps.get((app, agent), INF_STEPS)

    def priority(self, node) -> tuple:
        """``(1, -steps, last_access)`` for a node of a fixed prompt whose agent some active
        workflow can reach (``steps`` = its smallest steps-to-execution); ``(0, 0, last_access)``
        for everything else: dynamic suffixes, fixed prompts of unreachable agents, and all cache
        when no step is known (no graph, no active workflow), which is LRU."""
        keys = self._marks.get(node)
        if not keys:
            return (0, 0, node.last_access)
        steps = self._steps
        nearest = min(steps.get(k, INF_STEPS) for k in keys)
        if nearest >= INF_STEPS:
            return (0, 0, node.last_access)
        return (1, -nearest, node.last_access)

    # ----------------------------------------------------------------- graph and workflow state
    def on_graph(self, app: str) -> None:
        """Precompute graph distances of ``app`` (BFS from every agent) and refresh steps."""
        graph = self.context.app_graphs[app]
        nodes = dict.fromkeys([*graph, *(b for nexts in graph.values() for b in nexts)])
        dist: dict[str, dict[str, int]] = {}
        for src in nodes:  # BFS from every agent; graphs have tens of agents
            d = {src: 0}
            queue = deque([src])
            while queue:
                a = queue.popleft()
                for b in graph.get(a, ()):
                    if b not in d:
                        d[b] = d[a] + 1
                        queue.append(b)
            dist[src] = d
        self._dist[app] = dist
        self._agents.setdefault(app, {}).update(nodes)
        self._recompute(app)

    def on_invocation(self, wf, previous_agent) -> None:
        """Move the workflow's position from ``previous_agent`` to ``wf.agent``; refresh steps."""
        if wf.app is None:
            return
        at = self._at.setdefault(wf.app, Counter())
        if previous_agent is not None:
            at[previous_agent] -= 1
        at[wf.agent] += 1
        self._agents.setdefault(wf.app, {})[wf.agent] = None
        self._recompute(wf.app)

    def on_workflow_end(self, wf) -> None:
        """The workflow no longer sits at its last agent; refresh steps."""
        if wf.app is None or wf.agent is None:
            return
        self._at[wf.app][wf.agent] -= 1
        self._recompute(wf.app)

    def _recompute(self, app: str) -> None:
        dist = self._dist.get(app, {})
        current = [a for a, n in self._at.get(app, {}).items() if n > 0]
        for agent in self._agents.get(app, ()):
            best = INF_STEPS
            for src in current:
                d = 0 if src == agent else dist.get(src, {}).get(agent, INF_STEPS)
                best = min(best, d)
            key = (app, agent)
            if self._steps.get(key, INF_STEPS) != best:
                self._steps[key] = best
                self._steps_changed(key)

    def _steps_changed(self, key: tuple[str, str]) -> None:
        """Re-file the nodes whose priority reads the steps of ``key`` (its fixed prompt)."""
        self._refresh_path(self._fixed.get(key))

    def _refresh_path(self, node) -> None:
        while node is not None and node.parent is not None:
            self.context.reorder(node)
            node = node.parent

    # ----------------------------------------------------------------- fixed prompts
    def on_admit(self, admission, path) -> None:
        """Shrink the agent's fixed prompt to the common prefix with this request and re-mark its
        nodes (the fixed prompt's last node is split off where the prefix ends inside a node)."""
        wf = admission.workflow
        if wf is None or wf.app is None or not path:
            return
        key = (wf.app, admission.agent)
        blocks = admission.blocks
        ref = self._ref.get(key)
        if ref is None:  # seen once: nothing tells its fixed prompt from its dynamic part yet
            self._ref[key] = blocks
            self._lcp[key] = len(blocks)
            return
        else:
            lo, hi = 0, min(self._lcp[key], len(blocks))
            while lo < hi:  # largest m with ref[:m] == blocks[:m] (chained keys: test the last one)
                mid = (lo + hi + 1) // 2
                if ref[mid - 1] == blocks[mid - 1]:
                    lo = mid
                else:
                    hi = mid - 1
            lcp = lo
        self._lcp[key] = lcp
        fixed = None
        depth = 0
        for node in path:
            width = len(node.keys)
            if depth + width >= lcp:
                if lcp > depth:
                    fixed = node if depth + width == lcp else self.context.split(node, lcp - depth)
                break
            depth += width
        old = self._fixed.get(key)
        if fixed is old:
            return
        marks = self._marks
        node = old
        while node is not None and node.parent is not None:
            if marks.get(node):
                marks[node].discard(key)
            self.context.reorder(node)
            node = node.parent
        if fixed is None:
            self._fixed.pop(key, None)
            return
        self._fixed[key] = fixed
        node = fixed
        while node.parent is not None:
            marks.setdefault(node, set()).add(key)
            self.context.reorder(node)
            node = node.parent

    def on_split(self, top, bottom) -> None:
        """The upper part lies in every fixed prompt the lower part lies in."""
        if self._marks.get(bottom):
            self._marks[top] = set(self._marks[bottom])

    def on_drop(self, node) -> None:
        """A dropped fixed-prompt end moves the fixed prompt's end to its parent."""
        for key in self._marks.pop(node, ()):
            if self._fixed.get(key) is node:  # the fixed prompt now ends at the parent
                parent = node.parent
                if parent is None or parent.parent is None:
                    self._fixed.pop(key, None)
                else:
                    self._fixed[key] = parent

    # ----------------------------------------------------------------- prefetch
    def prefetch_plan(self, seconds: float) -> ChainPlan:
        """Load the host-tier parts of next-step agents' fixed prompts into free device space."""
        return ChainPlan(((self._fixed.get(key), None) for key, steps in self._steps.items() if steps == 1))
