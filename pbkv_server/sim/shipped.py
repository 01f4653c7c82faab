"""What the inference engines ship: the alternatives a PBKV verdict is measured against.

A team that serves with SGLang can switch on SGLang's session cache today; PBKV is worth deploying
only if it beats that, not just LRU. Each policy declares the engines that ship its rule
(``shipped_by``, ``shipped_as`` on the class: :class:`pbkv_server.engine.policies.PolicyInfo`);
this module reads the registry, so a policy added with ``shipped_by = frozenset({"sglang"})`` is
compared by ``pbkv-bench advise --engine sglang`` and named in the examples' summary line with
nothing else to edit.
"""

from __future__ import annotations

from typing import Mapping

from pbkv_server.engine.policies import BASELINE_POLICY, DEFAULT_POLICY, available_policies, policy_info

__all__ = ["ENGINES", "DEFAULT_ENGINE", "shipped_policies", "alternative_label", "best_shipped"]

#: Engines ``advise --engine`` knows -> the name a verdict calls them by.
ENGINES = {"sglang": "SGLang", "vllm": "vLLM", "dynamo": "Dynamo"}
#: The engine a verdict assumes unless told: PBKV's users serve with SGLang (README).
DEFAULT_ENGINE = "sglang"


def shipped_policies(engine: str) -> list[str]:
    """Registered online policies that ``engine`` ships, in registry order, the baseline (LRU,
    which every engine ships) and PBKV left out."""
    return [name for name in available_policies()
            if engine in (info := policy_info(name)).shipped_by and not info.offline
            and name not in (BASELINE_POLICY, DEFAULT_POLICY)]


def alternative_label(policy: str, engine: str) -> str:
    """How a verdict names ``policy`` as run by ``engine``: "SGLang's session cache"; the
    baseline is plain "LRU"."""
    if policy == BASELINE_POLICY:
        return "LRU"
    info = policy_info(policy)
    return f"{ENGINES.get(engine, engine)}'s {info.shipped_as or policy}"


def best_shipped(speedup: Mapping[str, float], engine: str) -> str:
    """The fastest policy ``engine`` ships among those in ``speedup`` (policy -> L_lru / L_policy),
    ties to the earlier one; the baseline when none of them was replayed or none beats it."""
    best, best_speedup = BASELINE_POLICY, 1.0
    for name in shipped_policies(engine):
        value = speedup.get(name)
        if value is not None and value == value and value > best_speedup:  # NaN never wins
            best, best_speedup = name, value
    return best
