"""GraphSAGE model: layer formula, transition matrix, masked loss, and that training fits."""

import numpy as np
import pytest
import torch
from .predictor_fixtures import write_workflows

from pbkv_train.data import END, build_samples, build_vocab, load_workflows
from pbkv_train.model import GraphSAGELayer, GraphSagePredictorNet, ModelConfig, count_parameters, masked_loss, transition_matrix
from pbkv_train.train import TrainConfig, fit, predict_proba, top1_accuracy

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


@pytest.mark.slow
def test_model_overfits_a_tiny_deterministic_trace_to_full_accuracy(tmp_path):
    wfs_spec = [(f"w{i}", ["plan", "search", "read", "search", "read", "answer"]) for i in range(4)]
    write_workflows(tmp_path / "t.jsonl", "app", wfs_spec)
    wfs = load_workflows([tmp_path / "t.jsonl"])
    vocab = build_vocab("app", wfs)
    samples = build_samples(wfs, vocab, k=3)
    net = fit("graphsage", vocab, wfs, samples, None, seed=0, config=TrainConfig(epochs=40, batch_size=64, patience=40))
    acc = top1_accuracy(predict_proba(net, samples), samples)
    assert acc.tolist() == [1.0, 1.0, 1.0]


def _reference_forward(net: GraphSagePredictorNet, prefix, prefix_len, step, current, features) -> torch.Tensor:
    """Appendix B forward pass written sample by sample and head by head, without the module's
    batched gathers: refined embeddings g = E + SAGE2(SAGE1(E)) (Eq. 3), then for each head h
    softmax(q_h . k_{h,j} / sqrt(d/H)) over the real prefix agents and the current agent (Eq. 4)."""
    c = net.config
    e = net.embed.weight
    g = e + net.sage2(net.sage1(e, net.adj), net.adj)
    dh = c.dim // c.heads
    out = []
    for b in range(prefix.shape[0]):
        n = int(prefix_len[b])
        agents = [int(a) for a in prefix[b, prefix.shape[1] - n :]] + [int(current[b])]
        recency = list(range(n, -1, -1))
        q = net.q(g[int(current[b])])
        ctx = []
        for h in range(c.heads):
            sl = slice(h * dh, (h + 1) * dh)
            ks = torch.stack([net.k(g[a] + net.pos.weight[r])[sl] for a, r in zip(agents, recency)])
            vs = torch.stack([net.v(g[a] + net.pos.weight[r])[sl] for a, r in zip(agents, recency)])
            w = torch.softmax(ks @ q[sl] / dh**0.5, dim=0)
            ctx.append(w @ vs)
        parts = [g[int(current[b])], torch.cat(ctx), net.step_embed.weight[min(int(step[b]), 63)],
                 torch.relu(net.txt(features[b]))]
        out.append(net.heads(net.mlp(torch.cat(parts))).view(c.k, c.vocab_size))
    logits = torch.stack(out)
    logits[:, :, 0] = -1e9  # PAD is never a target
    return logits


def test_forward_matches_a_sample_by_sample_reference_of_eq3_and_eq4():
    torch.manual_seed(3)
    v, length = 9, 6
    adj = torch.softmax(torch.randn(v, v), dim=1).numpy()
    net = GraphSagePredictorNet(ModelConfig(vocab_size=v, max_prefix=length, feature_dim=5, dim=16, hidden=24, heads=4), adj).eval()
    prefix = torch.tensor([[0, 0, 0, 0, 3, 4], [5, 6, 7, 8, 3, 4], [0, 0, 0, 0, 0, 0]])
    prefix_len = torch.tensor([2, 6, 0])
    step, current = torch.tensor([2, 70, 0]), torch.tensor([5, 3, 4])
    features = torch.randn(3, 5)
    with torch.no_grad():
        got = net(prefix, prefix_len, step, current, features)
        want = _reference_forward(net, prefix, prefix_len, step, current, features)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_attention_width_must_split_into_heads():
    import pytest

    with pytest.raises(ValueError, match="multiple of heads"):
        ModelConfig(vocab_size=5, dim=10, heads=4)


def _random_batch(config: ModelConfig, b: int, generator: torch.Generator):
    v, length = config.vocab_size, config.max_prefix
    return (torch.randint(0, v, (b, length), generator=generator), torch.randint(0, length + 1, (b,), generator=generator),
            torch.randint(0, 30, (b,), generator=generator), torch.randint(3, v, (b,), generator=generator),
            torch.randn(b, config.feature_dim, generator=generator))


def test_inference_cache_of_agent_embeddings_is_bit_identical_and_dropped_when_weights_may_change():
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=12, dim=16, hidden=32, feature_dim=8, max_prefix=5)
    net = GraphSagePredictorNet(config, np.full((12, 12), 1 / 12, dtype=np.float32)).eval()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for b in (1, 3, 7):
            batch = _random_batch(config, b, gen)
            cached = net(*batch)
            assert net._frozen is not None  # eval + no grad: the agent projections were kept
            net._frozen = None
            assert torch.equal(cached, net(*batch))  # same bits as computing them afresh
    # New weights (load_state_dict) and training mode both drop the cache, so no stale embedding serves.
    other = GraphSagePredictorNet(config, np.full((12, 12), 1 / 12, dtype=np.float32)).eval()
    net.load_state_dict(other.state_dict())
    assert net._frozen is None
    with torch.no_grad():
        batch = _random_batch(config, 4, gen)
        assert torch.equal(net(*batch), other(*batch))
    net.train()
    assert net._frozen is None
    net(*batch)  # training forward (grad enabled) never fills the cache
    assert net._frozen is None
