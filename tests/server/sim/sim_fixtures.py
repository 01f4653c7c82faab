"""Helpers of the simulator tests: tiny hand-made trace records and a round-number hardware profile."""

from __future__ import annotations

import pytest

from pbkv_contract.trace import InvocationRecord, WorkflowEndRecord
from pbkv_server.engine import HardwareProfile


@pytest.fixture
def unit_profile() -> HardwareProfile:
    """1,000 prefill tokens/s, 0.1 s per decode step (any batch), 1 byte/token over 1 kB/s PCIe."""
    return HardwareProfile(
        name="unit", description="round numbers for hand-checked tests", source="tests",
        prefill_tokens_per_s=1000.0, decode_base_s=0.1, decode_per_seq_s=0.0, pcie_bytes_per_s=1000.0,
        kv_bytes_per_token=1, device_kv_tokens=100_000, host_kv_tokens=0,
    )


def make_inv(wid, step, agent, blocks, tokens, out=3, t_start=0.0, t_end=1.0, app="app"):
    """An invocation record with explicit block keys and per-block tokens."""
    return InvocationRecord(app=app, workflow_id=wid, step=step, agent=agent, t_start=t_start, t_end=t_end,
                            prompt_tokens=sum(tokens), completion_tokens=out, prefix_hashes=list(blocks),
                            block_tokens=list(tokens))


def make_end(wid, t, app="app"):
    return WorkflowEndRecord(app=app, workflow_id=wid, t=t)


def write_model(path, app: str, agents) -> None:
    """Save an untrained (randomly initialised) GraphSAGE predictor model file for ``app``: enough
    for the loader's checks, which look at the file's app, not at its weights."""
    import numpy as np
    import torch

    from pbkv_train.data import Vocab
    from pbkv_train.model import GraphSagePredictorNet, ModelConfig
    from pbkv_train.store import save_model

    torch.manual_seed(0)
    vocab = Vocab(app, agents)
    net = GraphSagePredictorNet(ModelConfig(vocab_size=len(vocab), dim=16, hidden=16, feature_dim=8),
                                np.zeros((len(vocab), len(vocab)), dtype=np.float32))
    save_model(path, net, vocab)


def load_benchmark(name: str):
    """``benchmarks/NAME.py`` as a module; ``benchmarks/`` is on ``sys.path`` while it loads (the
    scripts import their sibling ``_cli``)."""
    import importlib.util
    import sys
    from pathlib import Path

    bench = Path(__file__).resolve().parents[3] / "benchmarks"
    sys.path.insert(0, str(bench))
    try:
        spec = importlib.util.spec_from_file_location(name, bench / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(bench))
    return module
