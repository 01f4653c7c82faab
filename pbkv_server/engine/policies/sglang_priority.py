"""``sglang-priority``: SGLang's priority eviction (``--radix-eviction-policy priority``).

Source: sgl-project/sglang ``python/sglang/srt/mem_cache/evict_policy.py`` (``PriorityStrategy``:
``(node.priority, node.last_access_time)``, lower values evicted first, LRU among equals) and
``radix_cache.py`` (inserting a request's KV sets ``node.priority = max(node.priority,
request priority)`` on every node of its path, a missing priority counting as 0, and a split node's
upper part takes the priority of the node it was cut from). Dynamo forwards
``nvext.agent_hints.priority`` into the request's ``priority`` (ai-dynamo/dynamo, "SGLang for
Agentic Workloads": ``--radix-eviction-policy priority``). A node's priority never decreases:
cache that a high-priority request touched once keeps that priority until it is evicted.

Modelling choices: the request's priority is :attr:`EngineRequest.priority` (``pbkv-server``:
the body's ``priority``, else ``nvext.agent_hints.priority``). A trace records no priority unless
its writer knew one (optional ``priority`` field); replaying a trace without it, the simulator
plays a user who follows Dynamo's agents guide: every request of an agent app (an app whose
workflows make two or more LLM calls) gets the guide's example priority 10, and other traffic
(chat turns) keeps SGLang's default 0 (``pbkv_server.sim.simulator.REPLAY_AGENT_PRIORITY``). So
on a trace of one app every node has the same priority and the order is exactly LRU; on mixed
traffic agent cache outlives chat cache.
"""

from __future__ import annotations

from .base import Policy, register_policy


@register_policy("sglang-priority")
class SGLangPriorityPolicy(Policy):
    """``(priority, last_access)``: lowest request priority first, LRU among equals.

    Per-node state (kept here, keyed by node): the highest priority of the requests that used it.
    """

    summary = "SGLang priority eviction: lowest request priority first (max over users), LRU among equals"
    #: what the client sends that this rule reads (--no-hints removes it: the rule replays as lru)
    client_signal = "request priority"
    shipped_by, shipped_as = frozenset({"sglang", "dynamo"}), "priority eviction"  # Dynamo forwards agent_hints.priority

    def __init__(self, context) -> None:
        super().__init__(context)
        self._priority: dict = {}  # node -> max priority of the requests that used it (absent: 0)

    def priority(self, node) -> tuple:
        """``(node priority, last_access)``."""
        return (self._priority.get(node, 0), node.last_access)

    def node_priority(self, node) -> int:
        """The node's priority (0 when no request with a priority used it)."""
        return self._priority.get(node, 0)

    def on_admit(self, admission, path) -> None:
        """Raise every node of the path to the request's priority (``None`` counts as 0; a node
        starts at 0, so a negative priority changes nothing)."""
        request = admission.request
        p = (request.priority if request is not None else None) or 0
        table = self._priority
        for node in path:
            if p > table.get(node, 0):
                table[node] = p
                self.context.reorder(node)

    def on_split(self, top, bottom) -> None:
        """The upper part keeps the priority of the node it was cut from."""
        if bottom in self._priority:
            self._priority[top] = self._priority[bottom]

    def on_drop(self, node) -> None:
        """Forget the node."""
        self._priority.pop(node, None)
