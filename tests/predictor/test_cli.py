"""pbkv-predictor CLI: train writes a loadable model file, eval prints and writes the table."""

import json

from .predictor_fixtures import loop_workflows, write_workflows
from typer.testing import CliRunner

from pbkv_train.cli import app
from pbkv_train.store import load_model

runner = CliRunner()


def test_train_writes_a_model_file_for_the_traces_app(tmp_path):
    wfs, feats = loop_workflows(20, seed=2)
    write_workflows(tmp_path / "t.jsonl", "loopy", wfs, features=feats)
    result = runner.invoke(app, ["train", str(tmp_path / "t.jsonl"), "--out", str(tmp_path / "m.pt"), "--epochs", "2", "--threads", "1"])
    assert result.exit_code == 0, result.output
    loaded = load_model(tmp_path / "m.pt", app="loopy")
    assert loaded.vocab.tokens[3:] == ["answerer", "planner", "retriever", "summarizer", "verifier"]
    assert loaded.info["train_workflows"] == 18  # 90% of 20, rounded; the rest validates


def test_eval_reports_every_model_and_horizon_as_json(tmp_path):
    wfs, feats = loop_workflows(12, seed=3)
    write_workflows(tmp_path / "t.jsonl", "loopy", wfs, features=feats)
    out = tmp_path / "r.json"
    result = runner.invoke(app, ["eval", str(tmp_path / "t.jsonl"), "--models", "markov1,mlp", "--seeds", "2",
                                 "--epochs", "2", "--threads", "1", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "markov1" in result.output and "k=3" in result.output
    data = json.loads(out.read_text())
    assert set(data["results"]) == {"markov1", "mlp"}
    assert len(data["results"]["mlp"]["runs"]) == 2 and len(data["results"]["mlp"]["mean"]) == 3


def test_unknown_model_name_is_rejected(tmp_path):
    wfs, _ = loop_workflows(5)
    write_workflows(tmp_path / "t.jsonl", "loopy", wfs)
    result = runner.invoke(app, ["eval", str(tmp_path / "t.jsonl"), "--models", "markov1,gpt5"])
    assert result.exit_code != 0 and "gpt5" in result.output


def test_traces_mixing_apps_without_app_option_exit_with_an_error(tmp_path):
    write_workflows(tmp_path / "a.jsonl", "one", [("w1", ["a", "b"])])
    write_workflows(tmp_path / "b.jsonl", "two", [("w2", ["a", "b"])])
    result = runner.invoke(app, ["train", str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl"), "--out", str(tmp_path / "m.pt")])
    assert result.exit_code == 2 and "mix apps" in result.output


def test_curve_caps_training_workflows_per_size(tmp_path, monkeypatch):
    import pbkv_train.train as train_mod

    seen = []
    real_fit = train_mod.fit

    def spy(name, vocab, train_wfs, *args, **kwargs):
        seen.append(len(train_wfs))
        return real_fit(name, vocab, train_wfs, *args, **kwargs)

    monkeypatch.setattr(train_mod, "fit", spy)
    wfs, feats = loop_workflows(30, seed=4)
    write_workflows(tmp_path / "t.jsonl", "loopy", wfs, features=feats)
    out = tmp_path / "c.json"
    result = runner.invoke(app, ["curve", str(tmp_path / "t.jsonl"), "--sizes", "2,10", "--models", "markov1",
                                 "--seeds", "1", "--json", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert set(data["results"]) == {"markov1 @ 2", "markov1 @ 10"}
    assert seen == [2, 10]
