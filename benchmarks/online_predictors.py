"""Next-agent quality of the online predictors (``markov``, ``context``) replayed over real and synthetic traces.

Each trace is measured on its own, with a fresh predictor per spec. Its workflows are replayed one
after the other, in the order of their first call's ``t_start`` (ties: workflow id); at each call,
in step order, the predictor first ``observe``s the call's query, then ``predict``s from it
(``PredictionQuery(app, workflow_id, step=index of the call, history=agents of the earlier calls,
agent)``), and after the workflow's last call it learns ``workflow_ended``. So every workflow is
predicted before it is learned: what an online predictor in ``pbkv-server`` knows when it is asked.

Measures, per trace, predictor and k = 1..K (K = 3): over the calls whose (k-1)-th next call
exists (the workflow has not ended before the k-th next step; for k = 1 every call, whose next may
be END), with target the k-th next agent or END (``pbkv_contract.prediction.END_AGENT``):

* top-1 accuracy: the argmax of ``Prediction.dists[k-1]`` equals the target; ties go to the
  smallest name (``sorted``), so a run is deterministic;
* log-loss: the mean of ``-ln max(p_target, 1e-3)`` (:data:`FLOOR`: a target the predictor gives
  probability 0, as a Markov row without smoothing does, costs ``ln 1000``, not infinity).

Each ``dists[k-1]`` is conditional on the workflow still running at step k (PBKV Eq. 2), which is
why the calls whose workflow ended earlier are left out of step k. The script also prints the CPU
time of ``predict`` per call (``time.process_time`` around it alone, in microseconds): it depends
on the machine and its load, so it stays out of the ``--json`` file, which holds only the
deterministic measures (the same traces give the same file).

Usage::

    python benchmarks/online_predictors.py TRACE [TRACE ...] [--predictors markov,context] [--json OUT]

``--predictors`` takes any ``pbkv_server.predictors.make_predictor`` spec (``oracle`` reads the
trace's future: a ceiling row). The table of docs/predictor.md, "Online predictors", is rendered
from the committed ``--json`` by ``scripts/make_online_predictor_docs.py``, which names the command.
Bad input (a missing or unreadable trace, a trace without invocations, an unknown predictor, two
traces of one file name: the table names a trace by it) is one ``error:`` line and exit status 2;
nothing is written then.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _cli import OneLineParser, check_output, run_script, write_text  # noqa: E402

from pbkv_contract.prediction import END_AGENT, PredictionQuery  # noqa: E402
from pbkv_contract.trace import TraceFormatError, TraceRecord, group_workflows, read_trace  # noqa: E402
from pbkv_server.predictors import make_predictor  # noqa: E402

__all__ = ["FLOOR", "HORIZON", "DEFAULT_PREDICTORS", "workflows", "replay", "measure_trace", "main"]

#: Prediction horizon K: the measures cover the 1st to the K-th next call.
HORIZON = 3
#: Smallest probability a log-loss term uses: ``-ln max(p, FLOOR)``.
FLOOR = 1e-3
DEFAULT_PREDICTORS = "markov,context"


def workflows(records: Sequence[TraceRecord]) -> list[tuple[str | None, str, list[str]]]:
    """``(app, workflow id, agents in step order)`` per workflow, ordered by the first call's start
    time, ties by workflow id."""
    groups = group_workflows(records)
    order = sorted(groups.items(), key=lambda kv: (kv[1][0].t_start, kv[0]))
    return [(calls[0].app, wid, [c.agent for c in calls]) for wid, calls in order]


def _top1(dist: dict[str, float]) -> str | None:
    """The most likely name of ``dist``, the smallest name among equals (``None`` if empty)."""
    return min(dist.items(), key=lambda kv: (-kv[1], kv[0]))[0] if dist else None


def replay(predictor, flows: Sequence[tuple[str | None, str, list[str]]], horizon: int = HORIZON) -> dict:
    """Replay ``flows`` (:func:`workflows`) through ``predictor`` (module docstring).

    Returns:
        ``{"k": [{"n", "top1", "log_loss"} per k = 1..horizon], "calls", "cpu_s"}``; a step k that
        no call reaches has ``n`` 0 and ``None`` measures; ``cpu_s`` is the CPU time of ``predict``.
    """
    hits = [0] * horizon
    loss = [0.0] * horizon
    n = [0] * horizon
    calls, cpu = 0, 0.0
    for app, wid, agents in flows:
        for j, agent in enumerate(agents):
            query = PredictionQuery(app=app, workflow_id=wid, step=j, history=tuple(agents[:j]), agent=agent)
            predictor.observe(query)
            t0 = time.process_time()
            (pred,) = predictor.predict([query])
            cpu += time.process_time() - t0
            calls += 1
            future = agents[j + 1:j + 1 + horizon] + [END_AGENT] * horizon
            for k in range(horizon):
                if k > 0 and future[k - 1] == END_AGENT:
                    break  # the workflow ended before the k-th next step: dists[k] does not apply
                dist = pred.dists[k]
                n[k] += 1
                hits[k] += _top1(dist) == future[k]
                loss[k] -= math.log(max(dist.get(future[k], 0.0), FLOOR))
        predictor.workflow_ended(app, wid)
    steps = [{"n": n[k], "top1": hits[k] / n[k] if n[k] else None, "log_loss": loss[k] / n[k] if n[k] else None}
             for k in range(horizon)]
    return {"k": steps, "calls": calls, "cpu_s": cpu}


def measure_trace(path: str, specs: Sequence[str], horizon: int = HORIZON) -> dict:
    """Every predictor of ``specs`` on the trace at ``path``: ``{"label", "path", "workflows",
    "calls", "predictors": {spec: replay result}}`` (CPU times included; :func:`main` drops them
    from the JSON)."""
    try:
        records = read_trace(path)
    except TraceFormatError as exc:  # name the file: one of several traces may be the bad one
        raise TraceFormatError(str(exc) if str(path) in str(exc) else f"{path}: {exc}") from None
    predictors = {spec: make_predictor(spec, horizon, records) for spec in specs}  # a bad spec fails first
    flows = workflows(records)
    del records
    out = {"label": Path(path).name.removesuffix(".jsonl"), "path": str(path), "workflows": len(flows),
           "calls": sum(len(a) for _, _, a in flows), "predictors": {}}
    for spec, predictor in predictors.items():
        out["predictors"][spec] = replay(predictor, flows, horizon)
    return out


def _json_ready(result: dict) -> dict:
    """``result`` without CPU times, measures rounded to 6 decimals (the file is reproducible)."""
    def rounded(step: dict) -> dict:
        return {"n": step["n"], **{m: None if step[m] is None else round(step[m], 6) for m in ("top1", "log_loss")}}

    preds = {spec: {"k": [rounded(s) for s in r["k"]]} for spec, r in result["predictors"].items()}
    return {**{k: v for k, v in result.items() if k != "predictors"}, "predictors": preds}


def _fmt(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.3f}"


def main(argv: Optional[list[str]] = None) -> int:
    p = OneLineParser(description=__doc__.split("\n\n")[0])
    p.add_argument("traces", nargs="+", help="v1 trace files (JSONL), each measured on its own")
    p.add_argument("--predictors", default=DEFAULT_PREDICTORS,
                   help=f"comma-separated predictor specs (default {DEFAULT_PREDICTORS})")
    p.add_argument("--json", type=Path, default=None, help="write the measures (no CPU times) here")
    args = p.parse_args(argv)
    specs = [s.strip() for s in args.predictors.split(",") if s.strip()]
    if not specs:
        p.error("--predictors names no predictor")
    if len(set(specs)) != len(specs):
        p.error(f"--predictors names a predictor twice: {args.predictors}")
    check_output(p, args.json, args.traces)
    labels = [Path(path).name.removesuffix(".jsonl") for path in args.traces]
    twice = sorted({label for label in labels if labels.count(label) > 1})
    if twice:  # the table and the JSON name a trace by its file name
        raise ValueError(f"two traces named {twice[0]!r}: give each trace its own file name")
    for path in args.traces:  # one line, before any replay, for a file that is not there
        if not Path(path).exists():
            raise OSError(f"{path}: no such trace file")
        if not Path(path).is_file():
            raise OSError(f"{path}: not a file")
    for spec in specs:  # an unknown spec fails before any trace is read
        make_predictor(spec, HORIZON, [])
    results = []
    for path in args.traces:
        result = measure_trace(path, specs)
        results.append(result)
        print(f"{result['label']}: {result['workflows']} workflows, {result['calls']} calls")
        for spec, r in result["predictors"].items():
            steps = "  ".join(f"k{k + 1} top-1 {_fmt(s['top1'])} log-loss {_fmt(s['log_loss'])} (n {s['n']})"
                              for k, s in enumerate(r["k"]))
            cpu_us = 1e6 * r["cpu_s"] / r["calls"] if r["calls"] else 0.0
            print(f"  {spec:8s} {steps}  predict CPU {cpu_us:.0f} us/call")
    if args.json is not None:
        doc = {"horizon": HORIZON, "log_loss_floor": FLOOR, "predictors": specs,
               "traces": [_json_ready(r) for r in results]}
        write_text(args.json, json.dumps(doc, indent=1) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(run_script(main))
