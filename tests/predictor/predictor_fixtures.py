"""Small trace fixtures for the predictor tests, built in code (no data files).

:func:`loop_workflows` is a tiny stand-in for ``pbkv-bench synth``: each workflow has a hidden
property ``h`` (1..3) that sets how many retrieve/summarise/verify loops it runs and also shapes
its request features, so only a predictor that reads the features can know when the loop ends.
"""

from __future__ import annotations

import numpy as np

from pbkv_contract.trace import InvocationRecord, TraceWriter, WorkflowEndRecord
from pbkv_contract.features import FEATURE_DIM


def invocation(app: str, wid: str, step: int, agent: str, features=()) -> InvocationRecord:
    """A minimal invocation record (times from the step, 10 prompt tokens, one hash)."""
    return InvocationRecord(
        app=app, workflow_id=wid, step=step, agent=agent, t_start=float(step), t_end=step + 0.5,
        prompt_tokens=10, completion_tokens=2, prefix_hashes=["00"], features=list(features),
    )


def write_workflows(path, app: str, workflows: list[tuple[str, list[str]]], ended: bool = True, features=None) -> None:
    """Write ``[(workflow_id, agents)]`` as a v1 trace file (with workflow_end when ``ended``)."""
    with TraceWriter(path) as w:
        for n, (wid, agents) in enumerate(workflows):
            for step, agent in enumerate(agents):
                feats = features[n][step] if features is not None else ()
                w.write(invocation(app, wid, step, agent, feats))
            if ended:
                w.write(WorkflowEndRecord(app=app, workflow_id=wid, t=float(len(agents))))


def loop_workflows(n: int, seed: int = 0, noise: float = 0.3):
    """``n`` workflows ``planner, (retriever, summarizer, verifier) x h, answerer`` with h in 1..3.

    Every request's features are a unit vector around a direction fixed per ``h`` (plus Gaussian
    noise of scale ``noise``), so the features carry the hidden loop count.

    Returns:
        (workflows as ``[(id, agents)]``, features as ``[[vector per step]]``).
    """
    rng = np.random.default_rng(seed)
    dirs = np.random.default_rng(1234).normal(size=(4, FEATURE_DIM))
    wfs, feats = [], []
    for i in range(n):
        h = int(rng.integers(1, 4))
        agents = ["planner"] + ["retriever", "summarizer", "verifier"] * h + ["answerer"]
        vecs = []
        for _ in agents:
            v = dirs[h] + noise * rng.normal(size=FEATURE_DIM)
            vecs.append((v / np.linalg.norm(v)).tolist())
        wfs.append((f"wf-{i}", agents))
        feats.append(vecs)
    return wfs, feats
