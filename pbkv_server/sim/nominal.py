"""Nominal, seeded timing of traces: the one timing rule of synthetic traces and of re-timed recordings.

A replay takes two things from a trace's clock (:mod:`pbkv_server.sim.simulator`): the gap between
one call's end and the workflow's next call (tool and framework time, replayed as recorded), and
each call's duration (the order of the offline references' future). A recording made through the
SDK carries wall-clock times, so its gaps and durations grow with the load of the machine that ran
the app, and two recordings of the same seeded app replay differently. :func:`retime` replaces
them by this module's model, so the re-timed trace depends only on the seed and on what the calls
were (agents, steps, token counts), never on the machine:

* a call started at ``t`` has ``(ttft, t_end) = nominal_times(t, prompt_tokens, completion_tokens)``
  (the rule the synthetic traces of :mod:`pbkv_server.sim.synth.agents` are written with);
* the next call of the workflow starts ``gap`` seconds after ``t_end``, with ``gap`` drawn uniformly
  from the range of the tool that runs after the call (``tool_gaps[agent]``), else from
  :data:`HANDOFF_GAP_S`, by a generator keyed by ``(seed, workflow id, step, agent)``
  (:func:`nominal_gap`): a call's gap never depends on the other workflows or on file order;
* the workflow's end record follows its last call after that call's gap;
* workflows start :data:`MEAN_INTERARRIVAL_S` apart on average (exponential, keyed by the workflow
  id), from :data:`EPOCH`; the workflows of one session (``session_id``) follow each other.

Replay recomputes every call's own timing from the cost model; only the gaps and the order of the
offline references come from these times.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import replace
from typing import Iterable, Mapping

from pbkv_contract.trace import InvocationRecord, TraceRecord, WorkflowEndRecord

__all__ = ["EPOCH", "HANDOFF_GAP_S", "SEARCH_TOOL_GAP_S", "MEAN_INTERARRIVAL_S", "nominal_times", "keyed_rng",
           "nominal_gap", "retime"]

#: Unix time of the first workflow of a nominal trace (fixed so traces are byte-identical per seed).
EPOCH = 1_767_225_600.0
#: Seconds between two LLM calls of a workflow with no tool between them (the framework's hand-off:
#: state update, callbacks, building the next prompt), drawn uniformly. The lower end is the order of
#: the per-call overhead MAFBench measured for agent frameworks over a direct model call
#: (github.com/CoDS-GCS/MAFBench, single_agent/framework_overhead/README.md: CrewAI and LangGraph
#: add some 30-40 ms at the median on a trivial prompt); the upper end allows for long contexts and
#: callback work, an assumption of this model rather than a measurement.
HANDOFF_GAP_S = (0.05, 0.3)
#: Seconds of a search-tool call between two LLM calls (a remote web or Wikipedia search: network
#: round trip plus ranking), drawn uniformly; the synthetic research and supervisor apps'
#: retriever/searcher use it too. An assumed range: this repository holds no measurement of it.
SEARCH_TOOL_GAP_S = (0.5, 3.0)
#: Mean seconds between workflow starts (exponential gaps).
MEAN_INTERARRIVAL_S = 2.0


def nominal_times(t: float, prompt_tokens: int, output_tokens: int) -> tuple[float, float]:
    """Recorded ``(ttft_s, t_end)`` of a call started at ``t`` (seconds): a nominal 0.1 s + 4,000
    prompt tokens/s prefill and 25 ms per output token. Replay recomputes timing from the cost
    model; these only make the trace look like a recording."""
    ttft = 0.1 + prompt_tokens / 4000.0
    return ttft, t + ttft + output_tokens * 0.025


def keyed_rng(seed: int, *key: object) -> random.Random:
    """A generator that is a pure function of ``(seed, *key)`` (SHA-256 of their ``str`` forms):
    the same key gives the same draws in every process, whatever else was drawn before."""
    text = "\x1f".join(str(part) for part in (seed, *key))
    return random.Random(int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little"))


def nominal_gap(seed: int, workflow_id: str, step: int, agent: str,
                tool_gaps: Mapping[str, tuple[float, float]] | None = None) -> float:
    """Seconds from the end of call ``(workflow_id, step, agent)`` to the workflow's next call (or
    its end): uniform over ``tool_gaps[agent]`` when a tool runs after that agent's calls, else over
    :data:`HANDOFF_GAP_S`."""
    low, high = (tool_gaps or {}).get(agent, HANDOFF_GAP_S)
    return keyed_rng(seed, "gap", workflow_id, step, agent).uniform(low, high)


def retime(records: Iterable[TraceRecord], seed: int,
           tool_gaps: Mapping[str, tuple[float, float]] | None = None) -> list[TraceRecord]:
    """The records with nominal, seeded times (module docstring), in the same order.

    Changed per invocation: ``t_start``, ``t_end``, ``ttft_s`` (milliseconds, like synthetic
    traces) and ``cached_tokens``, set to unknown: what the recording server's cache reused depends
    on how the concurrent workflows interleaved on the recording machine, which the nominal trace
    does not describe. Per workflow end: ``t``. Everything else is kept. A workflow's calls are
    timed in ``(step, t_start)`` order, the order replay sends them in.

    Args:
        records: a trace's records (invocations and workflow ends, any order).
        seed: the run's seed.
        tool_gaps: per agent, the ``(low, high)`` seconds of the tool that runs after its calls.
    """
    records = list(records)
    calls: dict[str, list[InvocationRecord]] = {}
    for rec in records:
        if isinstance(rec, InvocationRecord):
            calls.setdefault(rec.workflow_id, []).append(rec)
    for invs in calls.values():
        invs.sort(key=lambda r: (r.step, r.t_start))
    new: dict[int, TraceRecord] = {}
    end_of: dict[str, float] = {}  # workflow id -> its nominal end
    session_free: dict[str, float] = {}  # session id -> when its latest workflow ended
    arrival = EPOCH
    for wid in _first_appearance(records):
        invs = calls.get(wid, [])
        arrival += keyed_rng(seed, "arrival", wid).expovariate(1.0 / MEAN_INTERARRIVAL_S)
        session = invs[0].session_id if invs else None
        t = max(arrival, session_free.get(session, arrival)) if session else arrival
        for rec in invs:
            ttft, t_end = nominal_times(t, rec.prompt_tokens, rec.completion_tokens)
            new[id(rec)] = replace(rec, t_start=round(t, 3), t_end=round(t_end, 3), ttft_s=round(ttft, 3),
                                   cached_tokens=None)
            t = t_end + nominal_gap(seed, wid, rec.step, rec.agent, tool_gaps)
        end_of[wid] = t
        if session:
            session_free[session] = t
    out: list[TraceRecord] = []
    for rec in records:
        if isinstance(rec, WorkflowEndRecord):
            out.append(replace(rec, t=round(end_of[rec.workflow_id], 3)))
        else:
            out.append(new[id(rec)])
    return out


def _first_appearance(records: list[TraceRecord]) -> list[str]:
    """Workflow ids in the order the records first name them (invocation or end record)."""
    seen: dict[str, None] = {}
    for rec in records:
        seen.setdefault(rec.workflow_id, None)
    return list(seen)
