"""Paired live rounds against the simulator (issue 34, item 4): the pieces ``benchmarks/live_paired.py`` runs.

* :func:`prompt_heavy_records`: a trace whose requests are long prompts with a few output tokens,
  so that what a cache policy saves (prefill) is most of a request's time and the effect exceeds
  the machine's noise;
* :func:`group_cpu_seconds`: the CPU time a server's process group has used, from ``/proc``,
  so a round reports the server's CPU as well as wall time (on a shared machine wall time also
  counts other programs' load; CPU time counts only the server's own work);
* :func:`speedups`: per-round ratios of the baseline's figure to a policy's (>1 = the policy is
  faster, the convention of :mod:`pbkv_server.sim.measures`), summarised as median and min-max.

Units: tokens and seconds.
"""

from __future__ import annotations

import os
import random
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from pbkv_contract.trace import InvocationRecord, TraceRecord, WorkflowEndRecord
from pbkv_server.sim.synth.common import CHARS_PER_TOKEN, segment_hashes

__all__ = ["prompt_heavy_records", "group_cpu_seconds", "Spread", "speedups"]

#: Characters per block of the generated traces: 16 tokens, so prompts share whole blocks.
BLOCK_TOKENS = 16


def prompt_heavy_records(workflows: int = 12, seed: int = 0, output_tokens: int = 2,
                         preamble: int = 256) -> list[TraceRecord]:
    """Workflows of plan -> (code -> test) x 1..3 whose prompts are an app preamble
    (``preamble`` tokens, shared by all), the agent's role (96-192 tokens, shared by its calls),
    the workflow's task (64-256) and the workflow's history so far (48-160 tokens more per step),
    each call generating ``output_tokens``: the shape of ``benchmarks/sglang_plugin_overhead.py``'s
    workload with the outputs cut short. Block hashes as :func:`pbkv_server.sim.synth.common.segment_hashes`
    with 16-token blocks; gaps 0; the same seed gives the same trace.

    Raises:
        ValueError: a count below 1 (``preamble`` may be 0).
    """
    if min(workflows, output_tokens) < 1 or preamble < 0:
        raise ValueError("workflows and output tokens must be >= 1, preamble >= 0")
    rng = random.Random(seed)
    chars = BLOCK_TOKENS * CHARS_PER_TOKEN
    roles = {a: rng.randint(96, 192) for a in ("plan", "code", "test")}
    records: list[TraceRecord] = []
    t = 0.0
    for w in range(workflows):
        wid = f"wf{w}"
        task = rng.randint(64, 256)
        agents = ["plan"] + ["code", "test"] * rng.choice((1, 1, 2, 3))
        history: list[tuple[str, int]] = []
        for step, agent in enumerate(agents):
            segments = ([("preamble", preamble)] if preamble else []) + [(f"role/{agent}", roles[agent]),
                                                                          (f"{wid}/task", task), *history]
            tokens = sum(n for _, n in segments)
            hashes = segment_hashes([(name, n * CHARS_PER_TOKEN) for name, n in segments], chars)
            per_block = [BLOCK_TOKENS] * len(hashes)
            per_block[-1] = tokens - BLOCK_TOKENS * (len(hashes) - 1)
            records.append(InvocationRecord(app="prompt-heavy", workflow_id=wid, step=step, agent=agent, t_start=t,
                                            t_end=t, prompt_tokens=tokens, completion_tokens=output_tokens,
                                            prefix_hashes=hashes, block_chars=chars, block_tokens=per_block))
            history.append((f"{wid}/h{step}", rng.randint(48, 160)))
        records.append(WorkflowEndRecord(app="prompt-heavy", workflow_id=wid, t=t))
    return records


def group_cpu_seconds(pgid: int, proc: Path = Path("/proc")) -> float:
    """User + system CPU seconds of the live processes whose process group is ``pgid``, children
    they have waited for included (``/proc/PID/stat`` fields utime, stime, cutime, cstime).
    Processes that exit during a measurement take their time with them: measure a server whose
    processes live throughout (SGLang's do)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # exited meanwhile
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) ": state is fields[0]
        if int(fields[2]) == pgid:  # pgrp
            total += sum(int(v) for v in fields[11:15])  # utime stime cutime cstime
    return total / tick


@dataclass(frozen=True)
class Spread:
    """Median and range of per-round figures."""

    median: float
    low: float
    high: float

    def __str__(self) -> str:
        return f"{self.median:.3f} ({self.low:.3f}-{self.high:.3f})"


def speedups(rounds: Sequence[Mapping[str, float]], base: str) -> dict[str, Spread]:
    """Per policy, the spread over rounds of ``round[base] / round[policy]`` (a time of the baseline
    over the policy's: >1 = faster).

    Raises:
        ValueError: no rounds, a round without the baseline, or a time that is not > 0.
    """
    if not rounds or any(base not in r for r in rounds):
        raise ValueError(f"every round needs the baseline {base!r}")
    out = {}
    for policy in rounds[0]:
        ratios = []
        for r in rounds:
            if r[policy] <= 0 or r[base] <= 0:
                raise ValueError(f"times must be > 0 (round with {policy}: {r[policy]}, {base}: {r[base]})")
            ratios.append(r[base] / r[policy])
        out[policy] = Spread(statistics.median(ratios), min(ratios), max(ratios))
    return out
