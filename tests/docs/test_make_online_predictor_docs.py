"""``scripts/make_online_predictor_docs.py``: docs/predictor.md's table of the online predictors is
rendered from ``benchmarks/online_predictors.py --json``, for the traces and command the page names."""
from __future__ import annotations

import pytest

from .scripts_loader import load_script


@pytest.fixture(scope="module")
def docs():
    return load_script("make_online_predictor_docs")


def _data(docs) -> dict:
    step = [{"n": 1000, "top1": 0.5, "log_loss": 1.25}, {"n": 990, "top1": 0.25, "log_loss": 2.0},
            {"n": 980, "top1": None, "log_loss": None}]
    traces = [{"label": label, "path": path, "workflows": 10, "calls": 1000,
               "predictors": {"markov": {"k": step}, "context": {"k": step}}}
              for label, (path, _) in docs.TRACES.items()]
    return {"horizon": 3, "log_loss_floor": 0.001, "predictors": ["markov", "context"], "traces": traces}


def test_rows_command_and_traces(docs):
    body = docs.block(_data(docs))
    assert f"the JSON of `{docs.COMMAND}`" in body and "max(p_true, 0.001)" in body
    # one row per trace and predictor; an undefined measure (no call reaches step k) prints "-"
    assert "| chatdev | 10 | 1,000 | markov | 0.500 | 1.250 | 0.250 | 2.000 | - | - | 1,000 / 990 / 980 |" in body
    assert body.count("| context |") == len(docs.TRACES)
    for label, (path, how) in docs.TRACES.items():
        assert f"- `{label}`: {how}." in body and path in docs.COMMAND
    page = "intro\n<!-- online-predictors:begin -->\nold\n<!-- online-predictors:end -->\ntail\n"
    out = docs.render(page, body)
    assert "old" not in out and body in out and out.endswith("tail\n")
    assert docs.render(out, body) == out  # rerunning changes nothing


def test_json_of_other_traces_or_not_the_benchmarks_is_refused(docs):
    data = _data(docs)
    data["traces"] = data["traces"][1:]
    with pytest.raises(docs.InputError, match="are not"):
        docs.block(data)
    with pytest.raises(docs.InputError, match="not the JSON of benchmarks/online_predictors.py"):
        docs.block({"cells": []})


def test_the_command_writes_the_committed_json(docs):
    assert docs.COMMAND.startswith(".venv/bin/python benchmarks/online_predictors.py runs/chatdev.jsonl ")
    assert docs.COMMAND.endswith(" --json docs/study/predictors/online.json")


def test_committed_block_is_what_the_committed_json_renders(docs):
    assert docs.main(["--check"]) == 0
