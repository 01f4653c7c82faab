"""GraphSAGE model: layer formula, transition matrix, masked loss, and that training fits."""

import numpy as np
import torch
from predictor_fixtures import write_workflows

from predictor.data import END, build_samples, build_vocab, load_workflows
from predictor.model import GraphSAGELayer, GraphSagePredictorNet, ModelConfig, count_parameters, masked_loss, transition_matrix
from predictor.train import TrainConfig, fit, predict_proba, top1_accuracy

torch.set_num_threads(1)


def test_graphsage_layer_matches_formula_computed_with_numpy():
    torch.manual_seed(0)
    layer = GraphSAGELayer(3, 2, activation=True)
    h = torch.randn(4, 3)
    adj = torch.tensor([[0, 1, 0, 0], [0.5, 0, 0.5, 0], [0, 0, 0, 0], [0.25, 0.25, 0.25, 0.25]])
    ws, bs = layer.lin_self.weight.detach().numpy(), layer.lin_self.bias.detach().numpy()
    wn = layer.lin_neigh.weight.detach().numpy()
    hn, an = h.numpy(), adj.numpy()
    expected = np.maximum(0, hn @ ws.T + bs + (an @ hn) @ wn.T)
    np.testing.assert_allclose(layer(h, adj).detach().numpy(), expected, rtol=1e-5, atol=1e-6)


def test_transition_matrix_is_row_normalised_counts_with_end(tmp_path):
    write_workflows(tmp_path / "t.jsonl", "app", [("w1", list("aba")), ("w2", list("ab"))])
    wfs = load_workflows([tmp_path / "t.jsonl"])
    vocab = build_vocab("app", wfs)
    a, b = vocab.encode("a"), vocab.encode("b")
    t = transition_matrix(wfs, vocab)
    # a->b twice, a->END once; b->a once, b->END once.
    np.testing.assert_allclose(t[a, [b, END]], [2 / 3, 1 / 3])
    np.testing.assert_allclose(t[b, [a, END]], [0.5, 0.5])
    np.testing.assert_allclose(t.sum(axis=1)[[a, b]], [1.0, 1.0])
    assert t[END].sum() == 0


def test_masked_loss_ignores_padding_after_end():
    logits = torch.zeros(1, 2, 4)
    logits[0, 0, 3] = 5.0
    targets = torch.tensor([[3, 1]])
    only_first = masked_loss(logits, targets, torch.tensor([[True, False]]))
    expected = -torch.log_softmax(logits[0, 0], -1)[3]
    assert torch.isclose(only_first, expected)
    assert masked_loss(logits, targets, torch.tensor([[False, False]])) == 0


def test_default_size_is_about_350k_parameters():
    net = GraphSagePredictorNet(ModelConfig(vocab_size=20), np.zeros((20, 20), dtype=np.float32))
    assert 300_000 <= count_parameters(net) <= 420_000


def test_model_overfits_a_tiny_deterministic_trace_to_full_accuracy(tmp_path):
    wfs_spec = [(f"w{i}", ["plan", "search", "read", "search", "read", "answer"]) for i in range(4)]
    write_workflows(tmp_path / "t.jsonl", "app", wfs_spec)
    wfs = load_workflows([tmp_path / "t.jsonl"])
    vocab = build_vocab("app", wfs)
    samples = build_samples(wfs, vocab, k=3)
    net = fit("graphsage", vocab, wfs, samples, None, seed=0, config=TrainConfig(epochs=40, batch_size=64, patience=40))
    acc = top1_accuracy(predict_proba(net, samples), samples)
    assert acc.tolist() == [1.0, 1.0, 1.0]
