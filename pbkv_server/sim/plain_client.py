"""A workload as a client without the SDK sends it: the traffic PBKV must serve as LRU does.

The do-no-harm question is what PBKV does to requests that carry nothing of ours: an app that
calls the engine's OpenAI-compatible API with a plain client (no ``pbkv_sdk``, no SGLang
``session_id``, no Dynamo ``nvext`` fields). :func:`without_hints` turns a replay workload into
that traffic. The trace's timing, prompts and replies, and the closed loop's order of workflows
and sessions stay as they are (the same users sending the same calls); what goes is what the
engine could learn from the client:

- PBKV's hints (workflow id, agent, step, app): the engine sees anonymous requests
  (:class:`~pbkv_server.engine.types.EngineRequest` ``hints=None``);
- SGLang's session id, the request priority, the cache TTL and the last-step mark.

The replay driver still sends a workflow's end and a session's close when the trace has them; for
an id the engine never saw, both are no-ops (:meth:`~pbkv_server.engine.engine.Engine.end_workflow`).
A speculative next-turn prefill (Dynamo's) is the engine's own guess, not the client's, and stays.
"""

from __future__ import annotations

from dataclasses import replace

from pbkv_server.engine.policies import policy_info
from pbkv_server.sim.simulator import Workload

__all__ = ["without_hints", "client_signal_note"]

def client_signal_note(policies: list[str]) -> str | None:
    """The note for a replay of ``policies`` without hints when some of them act only on what the
    client sends (``PolicyInfo.client_signal``), so that they replay as ``lru``; ``None`` otherwise.
    PBKV's own policies declare none: acting as ``lru`` on traffic without hints is what
    ``--no-hints`` measures (docs/do-no-harm.md)."""
    named = [f"{p} ({policy_info(p).client_signal})" for p in policies if policy_info(p).client_signal]
    if not named:
        return None
    verb, it = ("acts", "it replays") if len(named) == 1 else ("act", "they replay")
    return f"--no-hints: {', '.join(named)} {verb} on what the client sends, which --no-hints removes; {it} as lru here"


def without_hints(workload: Workload) -> Workload:
    """``workload`` with every request stripped of what a client sends beyond its prompt (module
    docstring). A new workload; ``workload`` is left as it is (its block keys are shared)."""
    units = [replace(unit, requests=[replace(r, hints=None, session_id=None, priority=None, cache_ttl_s=None,
                                             last_step=False) for r in unit.requests])
             for unit in workload.units]
    return Workload(units, workload.hash_collisions, path_keys=workload.path_keys)  # the same blocks

