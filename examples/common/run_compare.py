"""Whether two runs of an example gave the same figures (``scripts/compare_example_runs.py``, tests).

With nominal trace timing (the default, :mod:`pbkv_server.sim.nominal`) a run's figures are a
function of its seed and options, so two runs with the same ones must agree exactly. Compared: the
replayed figures of every policy (hit rates, evictions, evicted and prefetched tokens, simulated
latencies and TTFTs, their breakdowns, the hit-rate timeline), the comparisons with LRU and the
reference, the capacities and working set, the app's outcomes, and the SHA-256 of the recorded
traces when their files are there. Left out: wall-clock measurements of the machine (``timings_s``,
the policies' decision latencies ``extra.latency_ms``) and paths.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any, Mapping

__all__ = ["figures", "differences", "trace_digests"]

#: Summary keys that hold figures of the run (everything else is paths, timings or options).
_TOP = ("example", "app", "quick", "profile", "seed", "timing", "setup", "messages", "replay_concurrency",
        "train_tasks", "test_tasks", "working_set", "device_tokens", "host_tokens", "host_ratio", "pressure",
        "app_outcomes", "comparison")
#: Per-policy ``extra`` keys that are wall-clock measurements, not replay figures.
_WALL_CLOCK_EXTRA = ("latency_ms",)


def figures(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The part of an example's ``--json`` summary that two runs with the same seed must share."""
    out = {k: summary.get(k) for k in _TOP}
    policies = {}
    for name, result in (summary.get("policies") or {}).items():
        result = dict(result)
        result["extra"] = {k: v for k, v in (result.get("extra") or {}).items() if k not in _WALL_CLOCK_EXTRA}
        policies[name] = result
    out["policies"] = policies
    return out


def trace_digests(summary: Mapping[str, Any]) -> dict[str, str | None]:
    """SHA-256 of each trace file the summary names (``None``: the file is gone)."""
    out: dict[str, str | None] = {}
    for split, path in sorted((summary.get("traces") or {}).items()):
        p = Path(path)
        out[split] = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None
    return out


def differences(a: Mapping[str, Any], b: Mapping[str, Any], traces: bool = True) -> list[str]:
    """Every difference between two summaries' figures, one line each (``path: A != B``); empty
    when they agree. ``traces``: also compare the trace files' digests where both are on disk."""
    found: list[str] = []
    _diff(figures(a), figures(b), "", found)
    if traces:
        da, db = trace_digests(a), trace_digests(b)
        for split in sorted(set(da) & set(db)):
            if da[split] is not None and db[split] is not None and da[split] != db[split]:
                found.append(f"traces.{split}: file contents differ ({da[split][:12]} != {db[split][:12]})")
    return found


def _diff(x: Any, y: Any, path: str, found: list[str]) -> None:
    if isinstance(x, Mapping) and isinstance(y, Mapping):
        for key in sorted(set(x) | set(y), key=str):
            sub = f"{path}.{key}" if path else str(key)
            if key not in x or key not in y:
                found.append(f"{sub}: only in {'the second' if key not in x else 'the first'} run")
            else:
                _diff(x[key], y[key], sub, found)
    elif isinstance(x, (list, tuple)) and isinstance(y, (list, tuple)):
        if len(x) != len(y):
            found.append(f"{path}: {len(x)} entries != {len(y)}")
            return
        for i, (u, v) in enumerate(zip(x, y)):
            _diff(u, v, f"{path}[{i}]", found)
    elif not _same(x, y):
        found.append(f"{path}: {json.dumps(x)} != {json.dumps(y)}")


def _same(x: Any, y: Any) -> bool:
    """Exact equality; NaN equals NaN (JSON writes it as null either way)."""
    if isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y):
        return True
    return x == y
