"""Any backbone trained on traces, scored, and served behind the prediction interface (Figure 5b)."""

from __future__ import annotations

import pytest
from .predictor_fixtures import invocation

from pbkv_contract.prediction import PredictionQuery
from pbkv_contract.trace import WorkflowEndRecord
from pbkv_train.backbones import train_backbone
from pbkv_train.serving import GraphSagePredictor


def _cycle_records(n: int):
    """``n`` workflows ``plan, code, test, END``: every next agent is certain."""
    out = []
    for i in range(n):
        for step, agent in enumerate(("plan", "code", "test")):
            out.append(invocation("cyc", f"w{i}", step, agent))
        out.append(WorkflowEndRecord(app="cyc", workflow_id=f"w{i}", t=3.0))
    return out


def test_markov3_on_a_fixed_pipeline_is_exact_and_served_as_distributions_over_agents_and_end():
    bb = train_backbone("markov3", _cycle_records(12), seed=0)
    assert bb.accuracy(_cycle_records(3)).tolist() == [1.0, 1.0, 1.0]
    pred = bb.predictor()
    assert isinstance(pred, GraphSagePredictor) and pred.horizon == 3 and pred.app == "cyc"
    (p,) = pred.predict([PredictionQuery("cyc", "w", 1, ("plan",), "code", ())])
    assert p.dists[0] == pytest.approx({"<END>": 0.0, "code": 0.0, "plan": 0.0, "test": 1.0})
    assert p.dists[1]["<END>"] == pytest.approx(1.0)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["graphsage", "mlp", "transformer"])
def test_every_network_backbone_trains_and_predicts_normalised_distributions(name):
    bb = train_backbone(name, _cycle_records(20), seed=1, epochs=3)
    assert bb.info["model"] == name and bb.info["train_workflows"] == 18  # 10% held out for early stopping
    acc = bb.accuracy(_cycle_records(2))
    assert acc.shape == (3,) and all(0.0 <= a <= 1.0 for a in acc)
    (p,) = bb.predictor().predict([PredictionQuery("cyc", "w", 0, (), "plan", ())])
    assert all(sum(d.values()) == pytest.approx(1.0) for d in p.dists)
    assert set(p.dists[0]) == {"<END>", "code", "plan", "test"}
