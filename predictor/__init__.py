"""Workflow predictor: which agents will each active workflow call in its next K steps.

``predictor.api`` holds the serving interface (no torch import); the GraphSAGE model, the
baselines and the train/eval CLI live in the other modules and import torch.
"""
