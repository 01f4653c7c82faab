"""``scripts/make_chatdev_docs.py`` and ``scripts/split_trace.py``: the ChatDev regime table of
docs/chatdev-regime.md (issue 33) is rendered from four regime studies (one per predictor), and the trained
predictor's training split never shares a workflow with the evaluated one."""
from __future__ import annotations

import json

import pytest

from .scripts_loader import load_script


@pytest.fixture(scope="module")
def docs():
    return load_script("make_chatdev_docs")


@pytest.fixture(scope="module")
def split():
    return load_script("split_trace")


def _cell(f: float, latencies: dict[str, float], opt_gain: bool = False) -> dict:
    lru, opt = latencies["lru"], latencies["opt"]
    policies = {p: {"mean_latency_s": v, "latency_speedup": lru / v, "mean_ttft_s": v / 50,
                    "latency_capture": (lru - v) / (lru - opt) if lru != opt else float("nan")}
                for p, v in latencies.items()}
    return {"concurrency": 16, "device_fraction": f, "host_ratio": 0.0, "device_tokens": int(1000 * f),
            "host_tokens": 0, "live_tokens": 4000.0, "in_flight_tokens": 1000.0, "regime": "short",
            "opt_gain": opt_gain, "policies": policies}


def _study(pbkv: tuple[float, float]) -> dict:
    cells = [_cell(0.25, {"lru": 100.0, "pbkv": pbkv[0], "tlru": 95.0, "opt": 80.0}, True),
             _cell(1.0, {"lru": 100.0, "pbkv": pbkv[1], "tlru": 100.0, "opt": 99.6})]
    return {"working_set": {"workflows": 28}, "cells": cells}


def test_block_columns_capture_and_criteria(docs):
    studies = {"context": _study((90.0, 100.0)), "markov": _study((96.0, 100.1)), "trained": _study((92.0, 100.0)),
               "oracle": _study((84.0, 100.0))}
    text = docs.block(studies)
    rows = [line for line in text.split("Mean TTFT")[0].splitlines() if line.startswith("| 0.25 ")]
    # columns: pbkv (context, the base study) 100/90, tlru 100/95, then pbkv markov 100/96, trained
    # 100/92, oracle 100/84, opt 100/80; capture (s - 1) / 0.25: (1/9) / 0.25, (1/24) / 0.25,
    # (2/23) / 0.25, (4/21) / 0.25
    assert rows == ["| 0.25 | 0x | 250 | short | 1.111x | 1.053x | 1.042x | 1.087x | 1.190x | 1.250x | "
                    "0.44 / 0.17 / 0.35 / 0.76 |"]
    # opt 100/99.6 gains under 0.5 %: starred; markov (100/100.1 - 1) / (100/99.6 - 1) = -0.2488
    assert ("| 1 | 0x | 1,000 | short | 1.000x | 1.000x | 0.999x | 1.000x | 1.000x | 1.004x | "
            "0.00* / -0.25* / 0.00* / 0.00* |") in text
    # TTFT is latency / 50 in every row here, so its speedups are the latency speedups
    ttft = text.split("Mean TTFT")[1]
    assert "| 0.25 | 0x | 1.111x | 1.053x | 1.042x | 1.087x | 1.190x | 1.250x | 0.44 / 0.17 / 0.35 / 0.76 |" in ttft
    assert "- pbkv (context) worst cell: 1.000x lru at f=1, host 0x (meets 0.999x)." in text
    assert "- Online policies faster than pbkv (context): none." in text
    assert "- pbkv (markov) worst cell: 0.999x lru at f=1, host 0x (meets 0.999x)." in text
    assert "- Online policies faster than pbkv (markov): tlru at f=0.25 host 0x (pbkv 1.053% slower); " \
           "tlru at f=1 host 0x (pbkv 0.100% slower)." in text
    assert "- Online policies faster than pbkv (oracle): none." in text


def test_block_refuses_studies_of_different_grids(docs):
    other = _study((96.0, 100.0))
    other["cells"][1]["device_tokens"] += 1
    with pytest.raises(ValueError, match="another grid"):
        docs.block({"context": _study((96.0, 100.0)), "markov": _study((96.0, 100.0)), "trained": other,
                    "oracle": _study((96.0, 100.0))})


def _trace(ids: list[str]) -> list[str]:
    lines = [json.dumps({"type": "meta", "v": 1}) + "\n"]
    for step in range(2):
        lines += [json.dumps({"type": "invocation", "workflow_id": w, "step": step}) + "\n" for w in ids]
    return lines + [json.dumps({"type": "workflow_end", "workflow_id": w}) + "\n" for w in ids]


def test_split_by_workflow_disjoint_and_complete(split):
    ids = [f"w{i}" for i in range(10)]
    train, held, train_ids, eval_ids = split.split_lines(_trace(ids), seed=3, train_fraction=0.3)
    assert len(train_ids) == 3 and sorted(train_ids + eval_ids) == sorted(ids)
    for lines, own in ((train, train_ids), (held, eval_ids)):
        recs = [json.loads(line) for line in lines]
        assert recs[0]["type"] == "meta"  # a meta line goes to both parts
        assert {r["workflow_id"] for r in recs[1:]} == set(own)
        assert len(recs) == 1 + 3 * len(own)  # two invocations and the end of each workflow
    again = split.split_lines(_trace(ids), seed=3, train_fraction=0.3)
    assert again[2] == train_ids  # seeded


def test_split_bad_input_is_one_line(split, tmp_path, capsys):
    bad = tmp_path / "t.jsonl"
    bad.write_text("[1]\n", encoding="utf-8")
    assert split.main([str(bad), "--train", str(tmp_path / "a"), "--eval", str(tmp_path / "b")]) == 2
    assert capsys.readouterr().err.strip() == "split_trace: line 1: not a JSON object"
    one = tmp_path / "one.jsonl"
    one.write_text("".join(_trace(["w0"])), encoding="utf-8")
    assert split.main([str(one), "--train", str(tmp_path / "a"), "--eval", str(tmp_path / "b")]) == 2
    assert "leave a part empty" in capsys.readouterr().err
