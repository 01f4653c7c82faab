"""PBKV engine core: two-tier radix prefix cache, eviction policies, lookahead scoring, prefetch,
cost model and the continuous-batching :class:`Engine` (DESIGN.md section 4).

One engine core serves the simulator, the live sim server and the SGLang plugin; eviction logic
lives nowhere else.
"""

from .cost import HardwareProfile
from .types import EngineConfig, EngineRequest, EngineStats, Finished, FirstToken, FutureOracle
from .engine import Engine, Workflow
from .policies import Policy, available_policies, make_policy, register_policy
from .scoring import NodeScore, ScoreBoard, lookahead_score, one_step_value, workflow_weights
from .workflows import WorkflowTracker

__all__ = [
    "Engine", "EngineConfig", "EngineRequest", "HardwareProfile", "FirstToken", "Finished",
    "EngineStats", "FutureOracle", "Workflow", "Policy", "available_policies", "make_policy",
    "register_policy", "NodeScore", "ScoreBoard", "lookahead_score", "one_step_value",
    "workflow_weights", "WorkflowTracker",
]
