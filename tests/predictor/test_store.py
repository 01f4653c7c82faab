"""Model files and the serving interface: round trip, version/app errors, distributions."""

import numpy as np
import pytest
import torch
from .predictor_fixtures import loop_workflows, write_workflows

from pbkv_contract.hints import END_AGENT
from pbkv_contract.prediction import PredictionQuery
from pbkv_train.data import build_samples, build_vocab, load_workflows
from pbkv_train.serving import load_predictor
from pbkv_train.store import FORMAT_VERSION, ModelFileError, load_model, save_model
from pbkv_train.train import TrainConfig, fit, predict_proba

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("model")
    wfs_spec, feats = loop_workflows(30, seed=1)
    write_workflows(tmp / "t.jsonl", "loopy", wfs_spec, features=feats)
    wfs = load_workflows([tmp / "t.jsonl"])
    vocab = build_vocab("loopy", wfs)
    samples = build_samples(wfs, vocab)
    net = fit("graphsage", vocab, wfs, samples, None, seed=0, config=TrainConfig(epochs=3))
    path = tmp / "m.pt"
    save_model(path, net, vocab, {"note": "test"})
    return path, net, vocab, samples


def test_save_load_round_trip_gives_identical_outputs(trained):
    path, net, vocab, samples = trained
    loaded = load_model(path, app="loopy")
    assert loaded.vocab.tokens == vocab.tokens and loaded.info == {"note": "test"}
    assert loaded.net.config == net.config
    np.testing.assert_array_equal(predict_proba(loaded.net, samples), predict_proba(net, samples))


def test_other_format_version_is_a_clear_error(trained, tmp_path):
    path = trained[0]
    payload = torch.load(path, weights_only=True)
    payload["version"] = FORMAT_VERSION + 1
    torch.save(payload, tmp_path / "v2.pt")
    with pytest.raises(ModelFileError, match=f"format version {FORMAT_VERSION + 1}.*reads version {FORMAT_VERSION}"):
        load_model(tmp_path / "v2.pt")


@pytest.mark.parametrize(
    "damage",
    [
        lambda p: p["config"].update(heads=3),  # 128 does not split into 3 heads
        lambda p: p["config"].update(dim=64),  # weights of width 128 in a width-64 network
        lambda p: p["state_dict"].pop("heads.weight"),
        lambda p: p.pop("vocab"),
        lambda p: p.pop("state_dict"),
        lambda p: p.update(config={}),
        lambda p: p.update(vocab=p["vocab"][:-1]),  # one agent short: predictions would be mislabelled
        lambda p: p["state_dict"].update(adj=p["state_dict"]["adj"][:1]),  # would broadcast silently
        lambda p: p["state_dict"].update(adj=[[1.0]]),
        lambda p: p.update(info=7),
    ],
    ids=["heads", "dim", "missing-weight", "missing-vocab", "missing-state", "empty-config", "short-vocab",
         "adj-shape", "adj-not-tensor", "info-not-dict"],
)
def test_damaged_contents_are_one_clear_error(trained, tmp_path, damage):
    payload = torch.load(trained[0], weights_only=True)
    damage(payload)
    torch.save(payload, tmp_path / "bad.pt")
    with pytest.raises(ModelFileError, match="damaged PBKV predictor model file"):
        load_model(tmp_path / "bad.pt")


@pytest.mark.parametrize(
    "version, message",
    [
        (FORMAT_VERSION + 1, f"format version {FORMAT_VERSION + 1}, this code reads version {FORMAT_VERSION}; it was written by a newer PBKV"),
        (FORMAT_VERSION - 1, f"format version {FORMAT_VERSION - 1}, this code reads version {FORMAT_VERSION}; retrain"),
        (str(FORMAT_VERSION), f"format version '{FORMAT_VERSION}', this code reads version {FORMAT_VERSION}; retrain"),
    ],
)
def test_version_errors_say_which_side_to_fix(trained, tmp_path, version, message):
    payload = torch.load(trained[0], weights_only=True)
    payload["version"] = version
    torch.save(payload, tmp_path / "v.pt")
    with pytest.raises(ModelFileError) as err:
        load_model(tmp_path / "v.pt")
    assert message in str(err.value)


def test_other_app_is_a_clear_error(trained):
    with pytest.raises(ModelFileError, match="trained for app 'loopy', not 'hover'"):
        load_predictor(trained[0], app="hover")


def test_a_file_that_is_not_a_model_is_a_clear_error(tmp_path):
    (tmp_path / "x.pt").write_text("hello")
    with pytest.raises(ModelFileError, match="not a PBKV predictor"):
        load_model(tmp_path / "x.pt")


def test_serving_returns_k_distributions_over_agents_and_end_matching_the_network(trained):
    path, net, vocab, samples = trained
    pred = load_predictor(path)
    q = PredictionQuery("loopy", "w", 2, ("planner", "retriever"), "summarizer", tuple(np.ones(64) / 8))
    unknown = PredictionQuery("loopy", "w", 1, ("planner",), "brand-new-agent", ())
    out = pred.predict([q, unknown])
    assert len(out) == 2 and all(p.horizon == 3 for p in out)
    names = {"planner", "retriever", "summarizer", "verifier", "answerer", END_AGENT}
    for p in out:
        for dist in p.dists:
            assert set(dist) == names
            assert abs(sum(dist.values()) - 1.0) < 1e-9
    # Same numbers as the network itself, renormalised without PAD/UNK.
    x = [torch.tensor(v) for v in ([[0] * 14 + [vocab.encode("planner"), vocab.encode("retriever")]], [2], [2], [vocab.encode("summarizer")])]
    with torch.no_grad():
        logits = net(*x, torch.tensor([q.features], dtype=torch.float32))
    probs = torch.softmax(logits.double(), -1)[0, 0, 2:]
    probs = probs / probs.sum()
    assert abs(out[0].dists[0]["verifier"] - float(probs[vocab.encode("verifier") - 2])) < 1e-6


def test_query_for_another_app_gets_uniform_distributions(trained):
    pred = load_predictor(trained[0])
    (p,) = pred.predict([PredictionQuery("other", "w", 0, (), "x", ())])
    assert all(abs(v - 1 / 6) < 1e-12 for v in p.dists[0].values())


def test_odd_queries_never_raise_long_history_big_step_bad_features(trained):
    pred = load_predictor(trained[0])
    long_hist = tuple(["retriever", "summarizer", "verifier"] * 30)
    queries = [
        PredictionQuery("loopy", "w", 90, long_hist, "retriever", (0.5, 0.5)),  # features of the wrong length
        PredictionQuery(None, "w", 0, (), "planner", ()),  # no app: served by this model
        PredictionQuery("loopy", "w", 10_000, ("x", "y"), "z", tuple([float("nan")] * 0)),
    ]
    out = pred.predict(queries)
    assert [p.horizon for p in out] == [3, 3, 3]
    assert all(abs(sum(d.values()) - 1) < 1e-9 for p in out for d in p.dists)
    assert pred.predict([]) == []
