"""PBKV engine core: two-tier radix prefix cache, eviction policies, lookahead scoring, prefetch,
workflow lifecycle, cost model and the continuous-batching :class:`Engine`.

One engine core serves the simulator, the live sim server and the SGLang plugin; eviction logic
lives nowhere else. See ``docs/architecture.md``, "Engine core".
"""

from .cost import HardwareProfile
from .types import Admission, EngineConfig, EngineRequest, EngineStats, Finished, FirstToken, FutureOracle
from .acquire import Acquired, AcquireRequest
from .cache import PrefixCache
from .engine import EndListener, Engine, Workflow
from .policies import Policy, available_policies, make_policy, register_policy
from .scoring import NodeScore, ScoreBoard, lookahead_score, one_step_value, workflow_weights
from .workflows import Invocation, WorkflowTable

__all__ = [
    "Engine", "EngineConfig", "EngineRequest", "HardwareProfile", "FirstToken", "Finished",
    "EngineStats", "FutureOracle", "Workflow", "Policy", "available_policies", "make_policy",
    "register_policy", "NodeScore", "ScoreBoard", "lookahead_score", "one_step_value",
    "workflow_weights", "WorkflowTable", "Invocation", "PrefixCache", "Acquired", "AcquireRequest", "Admission",
    "EndListener",
]
