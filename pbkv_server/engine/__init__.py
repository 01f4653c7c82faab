"""PBKV engine core: two-tier radix prefix cache, eviction policies, lookahead scoring, prefetch,
workflow lifecycle, cost model and the continuous-batching :class:`Engine`.

One engine core serves the simulator, the live sim server and the SGLang plugin; eviction logic
lives nowhere else. See ``docs/architecture.md``, "Engine core".
"""

import importlib
from typing import TYPE_CHECKING, Any

# Public name -> submodule that defines it. Loaded on first use (PEP 562), so that importing one
# module (the dataclasses of ``types``, say) does not load the cache and every policy with it.
_EXPORTS = {
    "HardwareProfile": "cost",
    "Admission": "types", "EngineConfig": "types", "EngineRequest": "types", "EngineStats": "types",
    "Finished": "types", "FirstToken": "types", "FutureOracle": "types",
    "Acquired": "acquire", "AcquireRequest": "acquire",
    "PrefixCache": "cache",
    "EndListener": "engine", "Engine": "engine", "Workflow": "engine",
    "Policy": "policies", "available_policies": "policies", "make_policy": "policies", "register_policy": "policies",
    "NodeScore": "scoring", "ScoreBoard": "scoring", "lookahead_score": "scoring", "one_step_value": "scoring",
    "workflow_weights": "scoring",
    "WorkflowTable": "workflows",
}

if TYPE_CHECKING:  # what type checkers and editors see
    from .acquire import Acquired, AcquireRequest
    from .cache import PrefixCache
    from .cost import HardwareProfile
    from .engine import EndListener, Engine, Workflow
    from .policies import Policy, available_policies, make_policy, register_policy
    from .scoring import NodeScore, ScoreBoard, lookahead_score, one_step_value, workflow_weights
    from .types import Admission, EngineConfig, EngineRequest, EngineStats, Finished, FirstToken, FutureOracle
    from .workflows import WorkflowTable


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


__all__ = [
    "Engine", "EngineConfig", "EngineRequest", "HardwareProfile", "FirstToken", "Finished",
    "EngineStats", "FutureOracle", "Workflow", "Policy", "available_policies", "make_policy",
    "register_policy", "NodeScore", "ScoreBoard", "lookahead_score", "one_step_value",
    "workflow_weights", "WorkflowTable", "PrefixCache", "Acquired", "AcquireRequest", "Admission",
    "EndListener",
]
