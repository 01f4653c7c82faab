"""One colour and line style per policy, shared by every chart (examples, study, replay timelines).

Colours come from the policy's position in the registry (:func:`pbkv_server.engine.policies.available_policies`,
registration order, built-ins first), so a policy keeps its colour in every chart and run, and two
registered policies never share one while there are at most ``len(PALETTE)`` of them. Offline
references (``opt``, ``belady``) are drawn dashed, online policies solid. A name the registry
does not know (a plugin not installed here) gets a colour from its name's hash, drawn dotted so
it cannot pass for a registered policy.

A chart of many policies draws most of them as one bundle of near-identical lines. :func:`emphasis`
names the ones to draw bold (the baseline, PBKV, the offline reference and the best alternative
the user's engine ships); the charts draw the others thin and grey behind them, as one legend entry.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Mapping

__all__ = ["PALETTE", "PolicyStyle", "policy_style", "emphasis", "FAINT", "MAX_ALL_BOLD"]

#: Colour of the policies a chart does not emphasise (drawn thin, behind the others).
FAINT = "#d0d0d0"
#: Up to this many policies, a chart draws every one bold: they can still be told apart.
MAX_ALL_BOLD = 5

#: Distinct colours in registry order: matplotlib's tab10, then twelve more chosen to stay apart
#: from it and from each other (hex RGB).
PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
    "#000000", "#e6b800", "#1a1a80", "#008080", "#7cd92b", "#cc00cc", "#800000", "#fa8072", "#4d6b3a", "#6a5acd",
    "#ff4500", "#00ced1",
)


@dataclass(frozen=True)
class PolicyStyle:
    """How a policy is drawn: ``colour`` (hex RGB) and matplotlib ``linestyle``."""

    colour: str
    linestyle: str


def policy_style(name: str) -> PolicyStyle:
    """The colour and line style of policy ``name`` (module docstring)."""
    order = _registered()
    if name in order:
        i = order.index(name)
        colour = PALETTE[i % len(PALETTE)]
        return PolicyStyle(colour, "--" if _offline(name) else "-")
    digest = int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:4], "little")
    return PolicyStyle(PALETTE[digest % len(PALETTE)], ":")


def emphasis(latency_s: Mapping[str, float | None], engine: str | None = None) -> dict[str, str]:
    """The policies a chart draws bold, each with its role (``"baseline"``, ``"PBKV"``, ``"offline
    reference"``, or "best SGLang ships" for the fastest alternative ``engine`` ships, by mean
    latency); every policy (role ``""`` for the unnamed ones) when there are at most
    :data:`MAX_ALL_BOLD`. ``latency_s``: policy -> mean workflow latency (seconds), chart order."""
    from pbkv_server.engine.policies import BASELINE_POLICY, DEFAULT_POLICY, REFERENCE_POLICY
    from pbkv_server.sim.shipped import DEFAULT_ENGINE, ENGINES, best_shipped

    engine = engine or DEFAULT_ENGINE
    base = latency_s.get(BASELINE_POLICY)
    speedup = {p: base / lat for p, lat in latency_s.items()
               if base and lat and math.isfinite(base) and math.isfinite(lat) and lat > 0}
    roles = {BASELINE_POLICY: "baseline", DEFAULT_POLICY: "PBKV", REFERENCE_POLICY: "offline reference"}
    alternative = best_shipped(speedup, engine)
    if alternative != BASELINE_POLICY:
        roles[alternative] = f"best {ENGINES.get(engine, engine)} ships"
    if len(latency_s) <= MAX_ALL_BOLD:
        return {p: roles.get(p, "") for p in latency_s}
    return {p: roles[p] for p in latency_s if p in roles}


@lru_cache(maxsize=1)
def _registered() -> tuple[str, ...]:
    from pbkv_server.engine.policies import available_policies

    return tuple(available_policies())


def _offline(name: str) -> bool:
    from pbkv_server.engine.policies import policy_info

    try:
        return policy_info(name).offline
    except ValueError:
        return False
