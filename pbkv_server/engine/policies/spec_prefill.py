"""``spec-prefill``: LRU eviction plus Dynamo's speculative next-turn prefill.

Source: ai-dynamo/dynamo, ``nvext.agent_hints.speculative_prefill`` ("Agent Hints" and "SGLang
for Agentic Workloads" pages; ``lib/llm/src/preprocessor/speculative_prefill.rs``). Once an
assistant turn finishes, the frontend appends the reply to the conversation, renders the prompt
the next turn will start with, and sends it as a ``max_tokens=1`` request, so the worker's radix
cache holds the conversation and its reply when the next user message arrives. The worker (SGLang)
serves it as an ordinary request under its default LRU eviction. It spends GPU prefill compute (the
reply's tokens, plus whatever of the conversation was evicted meanwhile) to save the next turn's
prefill, where PBKV's prefetch spends idle PCIe time.

The engine core runs the prefill itself (:meth:`Engine._speculative_prefill`): a request carrying
:attr:`EngineRequest.speculative_next` is followed, when it finishes, by a one-token request for
that prefix, queued behind the waiting requests and costing prefill time in its iteration; its
prompt counts in ``speculative_prefill_tokens``, not in the hit rates.

Modelling choices: this policy declares ``speculative_prefill``, so every request of a replay (and
every chat request on ``pbkv-server``) carries its next-turn prefix, as a Dynamo user who sets the
hint on all agent turns; ``pbkv-server`` also honours the per-request hint under any policy. In
replay the prefix is rebuilt from the trace (``pbkv_server.sim.simulator.load_workload``): when
the unit's next request extends this prompt, its blocks covering this prompt plus the reply's
tokens; otherwise (the next request belongs to another agent with another prompt) the prompt plus
the reply as blocks no later request shares, since the frontend sends conversation + reply
whatever comes next.
"""

from __future__ import annotations

from .base import register_policy
from .lru import LRUPolicy


@register_policy("spec-prefill")
class SpeculativePrefillPolicy(LRUPolicy):
    """LRU order; each finished turn's conversation + reply is prefilled for the next turn."""

    summary = "Dynamo speculative prefill: LRU, and a 1-token prefill of each finished turn + reply"
    shipped_by, shipped_as = frozenset({"dynamo"}), "speculative prefill"
    speculative_prefill = True
