"""Inference latency of the GraphSAGE predictor on this CPU: batch 1 and batch 1024, median and p99.

Two paths are timed:
  net      the network's forward pass on ready tensors (what the paper's 1.56 ms for 1,024 measures)
  serving  GraphSagePredictor.predict: PredictionQuery objects in, K dicts per query out
           (encoding, forward, softmax, dict building: what pbkv-server pays per batch)

Usage:
  .venv/bin/python benchmarks/predictor_latency.py [--model MODEL.pt] [--agents 20] [--reps 200] [--threads 1]

Without --model a default-size model over --agents agents is built with random weights (latency
does not depend on the weights). Prints the parameter count and one line per (path, batch).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np
import torch

from pbkv_contract.prediction import PredictionQuery
from pbkv_train.data import Vocab
from pbkv_train.model import GraphSagePredictorNet, ModelConfig, count_parameters
from pbkv_train.serving import load_predictor
from pbkv_train.store import ModelFileError, save_model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="model file (default: a fresh default-size model)")
    ap.add_argument("--agents", type=int, default=20, help="agents of the fresh model")
    ap.add_argument("--reps", type=int, default=200,
                    help="timed repetitions per measurement (serving at batch 1024: reps/10, at least 20)")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = ap.parse_args()
    for flag, value in (("--reps", args.reps), ("--agents", args.agents), ("--threads", args.threads)):
        if value < 1:
            ap.error(f"{flag} must be >= 1, got {value}")
    if args.model is not None and not os.path.isfile(args.model):
        ap.error(f"--model {args.model}: no such file")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        path = args.model
        if path is None:
            vocab = Vocab("bench", [f"agent{i}" for i in range(args.agents)])
            v = len(vocab)
            adj = torch.softmax(torch.randn(v, v), dim=1).numpy()
            net = GraphSagePredictorNet(ModelConfig(vocab_size=v), adj).eval()
            path = f"{tmp}/fresh.pt"
            save_model(path, net, vocab)
        try:
            pred = load_predictor(path)
        except ModelFileError as exc:
            ap.error(str(exc))
    net, cfg, vocab = pred._net, pred._cfg, pred._vocab
    agents = vocab.tokens[3:]
    print(f"model: {path}  agents: {len(agents)}  K: {cfg.k}  parameters: {count_parameters(net):,}  torch threads: {torch.get_num_threads()}")
    rng = np.random.default_rng(0)
    for batch in (1, 1024):
        queries = []
        for i in range(batch):
            n = int(rng.integers(0, 20))
            hist = tuple(agents[j] for j in rng.integers(0, len(agents), n))
            feats = rng.normal(size=cfg.feature_dim)
            queries.append(PredictionQuery(vocab.app, f"w{i}", n, hist, agents[int(rng.integers(0, len(agents)))], tuple(feats / np.linalg.norm(feats))))
        tensors = _tensors(batch, cfg, len(vocab), rng)
        with torch.no_grad():
            _report("net", batch, args.reps, lambda: net(*tensors))
        _report("serving", batch, max(20, args.reps // (10 if batch > 1 else 1)), lambda: pred.predict(queries))


def _tensors(batch, cfg, v, rng):
    prefix = torch.from_numpy(rng.integers(0, v, (batch, cfg.max_prefix)))
    prefix_len = torch.from_numpy(rng.integers(0, cfg.max_prefix + 1, batch))
    step = prefix_len.clone()
    current = torch.from_numpy(rng.integers(3, v, batch))
    feats = torch.from_numpy(rng.normal(size=(batch, cfg.feature_dim)).astype(np.float32))
    return prefix, prefix_len, step, current, feats


def _report(name, batch, reps, fn):
    for _ in range(5):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    arr = np.array(times)
    print(f"{name:8s} batch {batch:5d}: median {np.median(arr):8.3f} ms   p99 {np.percentile(arr, 99):8.3f} ms   ({reps} reps)")


if __name__ == "__main__":
    main()
