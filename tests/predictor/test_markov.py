"""Markov baselines: counts and back-off against hand computation."""

import numpy as np
from .predictor_fixtures import write_workflows

from pbkv_train.baselines import MarkovPredictor
from pbkv_train.data import END, build_samples, build_vocab, load_workflows


def _samples(tmp_path, workflows, k=2):
    write_workflows(tmp_path / "t.jsonl", "app", workflows)
    wfs = load_workflows([tmp_path / "t.jsonl"])
    vocab = build_vocab("app", wfs)
    return vocab, build_samples(wfs, vocab, k=k, max_prefix=4)


def test_order1_counts_match_hand_computation(tmp_path):
    # By hand, (next agent, agent after it) from each step:
    # w1 = a b c : from a: next1 b, next2 c ; from b: c, END ; from c: END
    # w2 = a b   : from a: b, END ; from b: END
    # w3 = a c   : from a: c, END ; from c: END
    vocab, s = _samples(tmp_path, [("w1", list("abc")), ("w2", list("ab")), ("w3", list("ac"))])
    a, b, c = (vocab.encode(x) for x in "abc")
    m = MarkovPredictor(1, 2, len(vocab)).fit(s)
    assert dict(m.counts[0][1][(a,)]) == {b: 2, c: 1}
    assert dict(m.counts[1][1][(a,)]) == {c: 1, END: 2}
    assert dict(m.counts[0][1][(b,)]) == {c: 1, END: 1}
    assert dict(m.counts[0][0][()]) == {b: 2, c: 2, END: 3}
    probs = m.predict_proba(s)
    row_a = int(np.flatnonzero(s.current == a)[0])
    np.testing.assert_allclose(probs[row_a, 0, [b, c]], [2 / 3, 1 / 3])
    np.testing.assert_allclose(probs[row_a, 1, [c, END]], [1 / 3, 2 / 3])


def test_order2_uses_the_workflow_start_as_context_and_backs_off_when_unseen(tmp_path):
    # After (start, a) comes b; after (c, a) comes c. An unseen context (b, a) backs off to order 1.
    vocab, s = _samples(tmp_path, [("w1", list("ab")), ("w2", list("cac"))], k=1)
    a, b, c = (vocab.encode(x) for x in "abc")
    m = MarkovPredictor(2, 1, len(vocab)).fit(s)
    assert dict(m.counts[0][2][(0, a)]) == {b: 1}
    assert dict(m.counts[0][2][(c, a)]) == {c: 1}
    np.testing.assert_allclose(m._dist(0, (b, a))[[b, c]], [0.5, 0.5])  # order-1 counts after a
    np.testing.assert_allclose(m._dist(0, (c, a))[c], 1.0)
