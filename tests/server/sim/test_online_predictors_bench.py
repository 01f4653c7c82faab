"""``benchmarks/online_predictors.py``: top-1 and log-loss of the k-th next agent, replayed online,
checked by hand on a tiny trace; bad input is one ``error:`` line and exit status 2."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from pbkv_contract.trace import read_trace

from .sim_fixtures import load_benchmark, make_end, make_inv


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("online_predictors")


def _write(path: Path, records) -> Path:
    path.write_text("".join(json.dumps(r.to_json()) + "\n" for r in records), encoding="utf-8")
    return path


@pytest.fixture
def twice(tmp_path) -> Path:
    """Two identical workflows a -> b -> END; w2 is written first but starts later, so w1 is replayed
    first and w2 is predicted from it."""
    return _write(tmp_path / "twice.jsonl", [
        make_inv("w2", 0, "a", ["x"], [4], t_start=10.0, t_end=11.0),
        make_inv("w2", 1, "b", ["x"], [4], t_start=12.0, t_end=13.0),
        make_end("w2", 13.0),
        make_inv("w1", 0, "a", ["x"], [4], t_start=0.0, t_end=1.0),
        make_inv("w1", 1, "b", ["x"], [4], t_start=2.0, t_end=3.0),
        make_end("w1", 3.0),
    ])


def test_workflows_are_replayed_by_start_then_id(bench, twice, tmp_path):
    assert [w for _, w, _ in bench.workflows(read_trace(twice))] == ["w1", "w2"]
    tie = _write(tmp_path / "tie.jsonl", [make_inv("b", 0, "x", ["x"], [4]), make_inv("a", 0, "y", ["x"], [4])])
    assert bench.workflows(read_trace(tie)) == [("app", "a", ["y"]), ("app", "b", ["x"])]


def _steps(result: dict, spec: str) -> list[tuple]:
    return [(s["n"], s["top1"], s["log_loss"]) for s in result["predictors"][spec]["k"]]


def test_markov_by_hand(bench, twice):
    # K = 3. k counts a call when the (k-1)-th next is not END: k=1 all 4 calls, k=2 the two a's, k=3 none.
    # w1 call a: nothing learned, b not seen yet: T[a] uniform over {<END>, a}, 1/2 each.
    #   k=1 target b: p 0 -> floored, ln 1000; argmax tie <END>/a -> "<END>" (sorted first): miss.
    #   k=2 (the chain goes on from a, T[a] again) target END: p 1/2 -> ln 2; argmax "<END>": hit.
    # w1 call b: T[b] has no counts: uniform over {<END>, a, b}; k=1 target END: ln 3, "<END>" first: hit.
    # w2 call a: T[a] = {b: 1}: k=1 b, p 1, hit, loss 0; k=2 T[b] = {END: 1}: hit, loss 0.
    # w2 call b: T[b] = {END: 1}: hit, loss 0.
    result = bench.measure_trace(str(twice), ["markov", "context"])
    assert (result["label"], result["workflows"], result["calls"]) == ("twice", 2, 4)
    (n1, top1, ll1), (n2, top2, ll2), k3 = _steps(result, "markov")
    assert (n1, top1, ll1) == (4, 3 / 4, pytest.approx((math.log(1000) + math.log(3)) / 4))
    assert (n2, top2, ll2) == (2, 1.0, pytest.approx(math.log(2) / 2))
    assert k3 == (0, None, None)


def test_context_by_hand(bench, twice):
    # w1 as for markov (no counts: uniform over the agents seen + END): k=1 ln 1000 (miss) and ln 3 (hit),
    # k=2 from a: ln 2 (hit).
    # w2 call a, state (a, {a}, 1): its three contexts each saw b once (n 1, t 1); base 1/3 over {<END>, a, b};
    #   Witten-Bell, shortest first: b = (1 + 1/3)/2 = 2/3 -> (1 + 2/3)/2 = 5/6 -> (1 + 5/6)/2 = 11/12;
    #   a = END = 1/24. k=1 target b: ln(12/11), hit.
    #   k=2 target END: after b (11/12) the state (a b) whose four contexts saw END once:
    #   END = 1 - (2/3)/16 = 23/24; after a (1/24) the state (a a), whose only seen context is "last a"
    #   (b once): END = 1/6. Renormalised over the running states (23/24): END = 22/23 * 23/24 +
    #   1/23 * 1/6 = 85/92: ln(92/85), hit.
    # w2 call b, state (a b): END = 23/24 as above: ln(24/23), hit.
    result = bench.measure_trace(str(twice), ["context"])
    (n1, top1, ll1), (n2, top2, ll2), k3 = _steps(result, "context")
    assert (n1, top1) == (4, 3 / 4)
    assert ll1 == pytest.approx((math.log(1000) + math.log(3) + math.log(12 / 11) + math.log(24 / 23)) / 4)
    assert (n2, top2, ll2) == (2, 1.0, pytest.approx((math.log(2) + math.log(92 / 85)) / 2))
    assert k3 == (0, None, None)


def test_json_has_the_measures_and_no_cpu_time(bench, twice, tmp_path, capsys):
    out = tmp_path / "out" / "online.json"
    assert bench.run_script(bench.main, [str(twice), "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "twice: 2 workflows, 4 calls" in printed and "us/call" in printed
    data = json.loads(out.read_text())
    assert (data["horizon"], data["log_loss_floor"], data["predictors"]) == (3, 1e-3, ["markov", "context"])
    (trace,) = data["traces"]
    assert trace["predictors"]["markov"]["k"][1] == {"n": 2, "top1": 1.0, "log_loss": round(math.log(2) / 2, 6)}
    assert "cpu" not in out.read_text()
    first = out.read_text()
    assert bench.main([str(twice), "--json", str(out)]) == 0
    assert out.read_text() == first  # the same trace writes the same file


@pytest.mark.parametrize("case, expected", [
    ("missing", "error: {tmp}/nope.jsonl: no such trace file"),
    ("spec", "error: unknown predictor 'markof'"),
    ("empty", "error: {tmp}/empty.jsonl: trace holds no invocation records"),
    ("same name", "error: two traces named 'twice': give each trace its own file name"),
])
def test_bad_input_is_one_line_and_exit_2(bench, twice, tmp_path, capsys, case, expected):
    out = tmp_path / "o.json"
    args = {"missing": [str(twice), str(tmp_path / "nope.jsonl")],
            "spec": [str(twice), "--predictors", "markov,markof"],
            "empty": [str(_write(tmp_path / "empty.jsonl", [make_end("w1", 1.0)]))],
            "same name": [str(twice), str(twice)]}[case]
    assert bench.run_script(bench.main, [*args, "--json", str(out)]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(expected.format(tmp=tmp_path))
    assert captured.out == "" and not out.exists()  # checked before any replay, nothing written
