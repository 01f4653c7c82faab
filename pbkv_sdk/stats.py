"""Summaries and line-by-line validation of trace v1 files (used by ``pbkv-sdk stats/validate/record``)."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable

from pbkv_contract.hints import END_AGENT
from pbkv_contract.trace import (
    TraceFormatError,
    TraceMeta,
    TraceRecord,
    WorkflowEndRecord,
    group_workflows,
    parse_line,
)


@dataclass
class TraceSummary:
    """Counts over a trace.

    Attributes:
        workflows: distinct workflow ids with at least one invocation.
        invocations: invocation records.
        ended: workflows with a ``workflow_end`` record, by status.
        agents: invocations per agent.
        apps: invocations per app.
        transitions: ``(agent, next agent)`` counts within workflows in step order; the last
            agent of an ended workflow transitions to ``<END>``. Internal invocations (the
            framework's own calls, e.g. AutoGen's speaker selection) are left out: control passes
            from agent to agent around them, as the predictor's training targets see it.
        internal: invocations flagged ``internal`` (counted in ``agents`` and tokens too).
        prompt_tokens, completion_tokens: totals, tokens.
        cached_tokens: total over the invocations that recorded it (``cached_known`` of them),
            tokens; ``None`` when none did (trace format v1: unknown is not 0).
        mean_ttft_s: mean time to first token over the invocations that recorded it
            (``ttft_known`` of them), seconds; ``None`` when none did.
        steps_per_workflow: mean invocations per workflow.
    """

    workflows: int = 0
    invocations: int = 0
    ended: Counter = field(default_factory=Counter)
    agents: Counter = field(default_factory=Counter)
    apps: Counter = field(default_factory=Counter)
    transitions: Counter = field(default_factory=Counter)
    internal: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int | None = None
    cached_known: int = 0
    mean_ttft_s: float | None = None
    ttft_known: int = 0
    steps_per_workflow: float = 0.0

    def to_json(self) -> dict:
        """JSON-friendly dict (transitions as ``"a -> b"`` keys; unknown figures as ``null``, with
        ``cached_tokens_known`` / ``ttft_known`` invocations that report them)."""
        return {
            "workflows": self.workflows,
            "invocations": self.invocations,
            "ended": dict(self.ended),
            "agents": dict(self.agents),
            "apps": dict(self.apps),
            "transitions": {f"{a} -> {b}": n for (a, b), n in self.transitions.most_common()},
            "internal_invocations": self.internal,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cached_tokens": self.cached_tokens,
            "cached_tokens_known": self.cached_known,
            "mean_ttft_s": self.mean_ttft_s,
            "ttft_known": self.ttft_known,
            "steps_per_workflow": self.steps_per_workflow,
        }


def summarize(records: Iterable[TraceRecord]) -> TraceSummary:
    """Summarise trace records (any order; workflows are ordered by step)."""
    records = list(records)
    summary = TraceSummary()
    ends = {r.workflow_id: r.status for r in records if isinstance(r, WorkflowEndRecord)}
    workflows = group_workflows(records)
    ttft_total, cached_total = 0.0, 0
    for wid, invs in workflows.items():
        for inv in invs:
            summary.agents[inv.agent] += 1
            summary.apps[inv.app] += 1
            summary.prompt_tokens += inv.prompt_tokens
            summary.completion_tokens += inv.completion_tokens
            if inv.cached_tokens is not None:  # None: unknown (trace format v1), left out
                cached_total += inv.cached_tokens
                summary.cached_known += 1
            if inv.ttft_s is not None:
                ttft_total += inv.ttft_s
                summary.ttft_known += 1
        steps = [inv for inv in invs if not inv.internal]  # agent steps only
        summary.internal += len(invs) - len(steps)
        for a, b in zip(steps, steps[1:]):
            summary.transitions[(a.agent, b.agent)] += 1
        if wid in ends and steps:
            summary.transitions[(steps[-1].agent, END_AGENT)] += 1
    summary.workflows = len(workflows)
    summary.invocations = sum(len(v) for v in workflows.values())
    summary.ended = Counter(status for wid, status in ends.items() if wid in workflows)
    summary.cached_tokens = cached_total if summary.cached_known else None
    summary.mean_ttft_s = ttft_total / summary.ttft_known if summary.ttft_known else None
    summary.steps_per_workflow = summary.invocations / summary.workflows if summary.workflows else 0.0
    return summary


@dataclass
class ValidationReport:
    """Result of :func:`validate_file`: valid line count and ``(line number, reason)`` of bad ones;
    ``records`` the workload's records, ``meta`` the first ``meta`` line (a valid line, not a record)."""

    valid: int = 0
    invalid: list[tuple[int, str]] = field(default_factory=list)
    records: list[TraceRecord] = field(default_factory=list)
    meta: TraceMeta | None = None

    @property
    def ok(self) -> bool:
        """No invalid line."""
        return not self.invalid


def validate_file(path: str | os.PathLike[str]) -> ValidationReport:
    """Check every non-blank line of a trace: JSON object, version 1, valid record fields.

    A line is valid exactly when replay and training read it (the same
    :func:`pbkv_contract.trace.parse_line`); unlike :func:`pbkv_contract.trace.iter_trace`, each bad
    line (truncated, malformed, unknown type or version) is reported with its 1-based number.

    Raises:
        OSError: the file cannot be opened.
    """
    report = ValidationReport()
    with open(path, encoding="utf-8", errors="replace") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                record = parse_line(line)
            except (ValueError, TraceFormatError) as exc:  # JSONDecodeError is a ValueError
                report.invalid.append((lineno, str(exc)))
                continue
            report.valid += 1
            if isinstance(record, TraceMeta):  # how the trace was made: valid, not a workload record
                report.meta = report.meta or record
                continue
            report.records.append(record)
    return report
