"""pbkv-predictor CLI: bad options and unusable inputs are one clear line on stderr and exit 2.

Every case here used to be a traceback (exit 1) or was silently accepted (exit 0). The checks
run before any training: tests that must not train replace ``fit`` with a function that fails.
"""

from __future__ import annotations

import pytest
from .predictor_fixtures import loop_workflows, write_workflows
from typer.testing import CliRunner

import pbkv_train.cli as cli
from pbkv_train.cli import app

runner = CliRunner()


@pytest.fixture
def trace(tmp_path):
    """A 12-workflow trace of app ``loopy``."""
    wfs, feats = loop_workflows(12, seed=5)
    path = tmp_path / "t.jsonl"
    write_workflows(path, "loopy", wfs, features=feats)
    return path


@pytest.fixture
def no_training(monkeypatch):
    """Fail the test if any model is trained (the error must come before the work)."""

    def refuse(*_args, **_kwargs):
        raise AssertionError("a model was trained although the command should have stopped first")

    monkeypatch.setattr(cli, "fit_workflows", refuse)
    monkeypatch.setattr("pbkv_train.backbones.fit", refuse)
    monkeypatch.setattr("pbkv_train.train.fit", refuse)


def _error_line(result) -> str:
    """The single ``error: ...`` line of a failed command (asserts exit 2 and no traceback)."""
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


@pytest.mark.parametrize("command", ["eval", "curve"])
@pytest.mark.parametrize("n", [1, 2])
def test_eval_and_curve_need_three_workflows_to_split(tmp_path, no_training, command, n):
    wfs, feats = loop_workflows(n, seed=1)
    write_workflows(tmp_path / "few.jsonl", "loopy", wfs, features=feats)
    extra = ["--sizes", "1"] if command == "curve" else []
    line = _error_line(runner.invoke(app, [command, str(tmp_path / "few.jsonl"), "--models", "markov1", *extra]))
    assert "need at least 3 workflows" in line and f"hold {n}" in line


@pytest.mark.parametrize(
    ("args", "flag", "value"),
    [
        (["eval", "--seeds", "0"], "--seeds", "0"),
        (["curve", "--seeds", "-1"], "--seeds", "-1"),
        (["eval", "--k", "0"], "--k", "0"),
        (["eval", "--k", "-2"], "--k", "-2"),
        (["curve", "--k", "0"], "--k", "0"),
        (["train", "--k", "0"], "--k", "0"),
        (["train", "--k", "-2"], "--k", "-2"),
        (["train", "--epochs", "0"], "--epochs", "0"),
        (["train", "--epochs", "-1"], "--epochs", "-1"),
        (["eval", "--epochs", "0"], "--epochs", "0"),
        (["eval", "--train-size", "0"], "--train-size", "0"),
        (["eval", "--train-size", "-5"], "--train-size", "-5"),
        (["train", "--threads", "0"], "--threads", "0"),
    ],
)
def test_options_below_one_are_rejected_naming_the_flag(trace, tmp_path, no_training, args, flag, value):
    command, *options = args
    out = ["--out", str(tmp_path / "m.pt")] if command == "train" else ["--models", "markov1"]
    line = _error_line(runner.invoke(app, [command, str(trace), *out, *options]))
    assert line == f"error: {flag} must be at least 1, got {value}"
    assert not (tmp_path / "m.pt").exists()  # train --epochs 0 used to save an untrained model


@pytest.mark.parametrize("command", ["train", "eval", "curve"])
@pytest.mark.parametrize("k", ["65", "100000000000"])
def test_a_horizon_beyond_the_shared_bound_is_one_line(trace, tmp_path, no_training, command, k):
    """``--k 100000000000`` died with a MemoryError traceback allocating K target columns per row."""
    out = ["--out", str(tmp_path / "m.pt")] if command == "train" else ["--models", "markov1"]
    line = _error_line(runner.invoke(app, [command, str(trace), *out, "--k", k]))
    assert line.startswith(f"error: --k must be in 1..64 ") and line.endswith(f"got {k}")


@pytest.mark.parametrize(
    ("sizes", "message"),
    [
        ("0,-3", "--sizes must all be at least 1, got 0"),
        ("5,-3", "--sizes must all be at least 1, got -3"),
        ("5,x", "--sizes must be comma-separated whole numbers of workflows, got 'x'"),
        ("5,5", "--sizes lists 5 twice"),
        (",", "--sizes names no training-set size"),
    ],
)
def test_curve_rejects_bad_sizes(trace, no_training, sizes, message):
    line = _error_line(runner.invoke(app, ["curve", str(trace), "--models", "markov1", "--sizes", sizes]))
    assert line == f"error: {message}"


def test_train_out_that_is_a_directory_fails_before_training(trace, tmp_path, no_training):
    (tmp_path / "models").mkdir()
    line = _error_line(runner.invoke(app, ["train", str(trace), "--out", str(tmp_path / "models")]))
    assert "is a directory" in line and "--out" in line


def test_train_out_under_a_file_or_an_uncreatable_place_fails_before_training(trace, tmp_path, no_training):
    (tmp_path / "afile").write_text("x")
    under_file = _error_line(runner.invoke(app, ["train", str(trace), "--out", str(tmp_path / "afile" / "m.pt")]))
    assert "is not a directory" in under_file
    # /proc refuses new files even to root (chmod-based checks would not fail when run as root).
    in_proc = _error_line(runner.invoke(app, ["train", str(trace), "--out", "/proc/pbkv-nope/m.pt"]))
    assert "cannot be created" in in_proc and "/proc is not writable" in in_proc
    assert not list(tmp_path.glob(".pbkv-probe-*"))


def test_a_model_file_that_cannot_be_saved_after_training_is_a_clear_error(trace, tmp_path, monkeypatch):
    def broken_save(path, *_args, **_kwargs):
        raise RuntimeError(f"File {path} cannot be opened.")  # what torch.save raises

    monkeypatch.setattr(cli, "save_model", broken_save)
    result = runner.invoke(app, ["train", str(trace), "--out", str(tmp_path / "m.pt"), "--epochs", "1"])
    assert result.exit_code == 2 and not isinstance(result.exception, RuntimeError)
    assert "error: cannot write the model to" in result.output.strip().splitlines()[-1]


def test_eval_json_that_is_a_directory_fails_before_evaluating(trace, tmp_path, no_training):
    (tmp_path / "results").mkdir()
    line = _error_line(runner.invoke(app, ["eval", str(trace), "--models", "mlp", "--json", str(tmp_path / "results")]))
    assert "--json" in line and "is a directory" in line


def test_mixed_apps_error_names_the_cli_flag(tmp_path, no_training):
    write_workflows(tmp_path / "a.jsonl", "one", [("w1", ["a", "b"])])
    write_workflows(tmp_path / "b.jsonl", "two", [("w2", ["a", "b"])])
    for command in (["train", "--out", str(tmp_path / "m.pt")], ["eval"]):
        line = _error_line(runner.invoke(app, [command[0], str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl"), *command[1:]]))
        assert line == "error: traces mix apps ['one', 'two']; choose one with --app"


def test_an_app_not_in_the_traces_lists_the_apps_there(trace, tmp_path, no_training):
    line = _error_line(runner.invoke(app, ["train", str(trace), "--app", "nope", "--out", str(tmp_path / "m.pt")]))
    assert line == "error: no workflows of app 'nope'; the traces hold ['loopy']"



@pytest.mark.parametrize("command", ["eval", "curve"])
def test_an_empty_model_list_is_rejected(trace, no_training, command):
    assert _error_line(runner.invoke(app, [command, str(trace), "--models", " , "])) == "error: --models names no model"


def test_absurd_thread_count_is_refused_before_torch_sees_it(trace, tmp_path, no_training):
    line = _error_line(runner.invoke(app, ["train", str(trace), "--out", str(tmp_path / "m.pt"), "--threads", "100000"]))
    assert f"--threads must be at most {cli.MAX_THREADS}, got 100000" in line


def test_negative_training_seed_is_a_usage_error(trace, tmp_path, no_training):
    result = runner.invoke(app, ["train", str(trace), "--out", str(tmp_path / "m.pt"), "--seed", "-1"])
    assert result.exit_code == 2 and "--seed" in result.output and "Traceback" not in result.output


def test_curve_size_above_the_training_split_is_refused(trace, no_training):
    # 12 workflows -> round(0.7 * 12) = 8 in the training split; a row "@ 9" would train on 8.
    line = _error_line(runner.invoke(app, ["curve", str(trace), "--models", "markov1", "--sizes", "4,9"]))
    assert line == "error: --sizes 9 is more than the 8 training workflows of this trace (12 workflows, 70% train)"


def test_a_fifo_out_or_json_and_a_non_json_json_are_refused_before_training(trace, tmp_path, no_training):
    import os
    import stat

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    log = tmp_path / "run.log"
    log.write_text("epoch 1 loss 0.5\n")
    fifo_problem = "is a named pipe (fifo), not a regular file; writing it would replace it (give a regular file path)"
    assert _error_line(runner.invoke(app, ["train", str(trace), "--out", str(fifo)])) == (
        f"error: --out {fifo} {fifo_problem}")
    for command in ("eval", "curve"):
        args = [command, str(trace), "--models", "markov1", "--sizes", "4"][: 4 if command == "eval" else 6]
        assert _error_line(runner.invoke(app, [*args, "--json", str(fifo)])) == f"error: --json {fifo} {fifo_problem}"
        assert _error_line(runner.invoke(app, [*args, "--json", str(log)])) == (
            f"error: --json {log} is a file that is not JSON; writing the results would destroy it (give another path)")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and log.read_text() == "epoch 1 loss 0.5\n"


def test_a_save_that_fails_midway_keeps_the_previous_model_file_whole(trace, tmp_path, monkeypatch):
    """The model file was written in place by ``torch.save``: a save stopped midway (disk full,
    Ctrl-C) left half a file where the previous model was. It is written aside and renamed."""
    import os
    import stat

    import torch

    from pbkv_train.store import load_model

    model = tmp_path / "m.pt"
    assert runner.invoke(app, ["train", str(trace), "--out", str(model), "--epochs", "1"]).exit_code == 0
    os.chmod(model, 0o640)
    before = model.read_bytes()
    real_save = torch.save

    def half_save(obj, path, *args, **kwargs):
        with open(path, "wb") as fh:
            fh.write(b"PK\x03\x04 half a model")
        raise RuntimeError(f"File {path} cannot be written: disk full")

    monkeypatch.setattr(torch, "save", half_save)
    line = runner.invoke(app, ["train", str(trace), "--out", str(model), "--epochs", "1"]).output.strip().splitlines()[-1]
    assert line.startswith(f"error: cannot write the model to {model}: File ") and line.endswith("disk full")
    assert model.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["m.pt", "t.jsonl"]
    monkeypatch.setattr(torch, "save", real_save)
    inode = os.stat(model).st_ino
    assert runner.invoke(app, ["train", str(trace), "--out", str(model), "--epochs", "1", "--seed", "1"]).exit_code == 0
    assert os.stat(model).st_ino != inode and stat.S_IMODE(os.stat(model).st_mode) == 0o640
    assert load_model(model, app="loopy").vocab.app == "loopy"


def test_eval_json_is_written_aside_and_renamed(trace, tmp_path):
    import json
    import os

    out = tmp_path / "r.json"
    out.write_text('{"earlier": 1}')
    inode = os.stat(out).st_ino
    result = runner.invoke(app, ["eval", str(trace), "--models", "markov1", "--seeds", "1", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert os.stat(out).st_ino != inode and set(json.loads(out.read_text())["results"]) == {"markov1"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json", "t.jsonl"]
