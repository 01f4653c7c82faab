"""Scenarios: the stand-in for the model's answers in the sim engine (``docs/architecture.md``, "Live server").

A scenario writes each agent's reply from the request and a seeded random source, conditioned on
real properties of the task (HoVer hop count and label, SWE-bench patch size, FinanceBench
question type), so that real framework code downstream branches on realistic decisions.

Apps register their scenario by app name; :func:`get_scenario` falls back to the default.
``pbkv-server --scenario module:Name`` imports a scenario class by path.
"""

from __future__ import annotations

import importlib
import random
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

__all__ = ["ScenarioRequest", "Scenario", "register_scenario", "get_scenario", "load_scenario"]


@dataclass(slots=True)
class ScenarioRequest:
    """What a scenario sees of one LLM request.

    Attributes:
        app: application name from the hints (``None`` for anonymous requests).
        agent: agent name from the hints (``None`` for anonymous requests).
        workflow_id: workflow id from the hints (``None`` for anonymous requests).
        step: 0-based step from the hints (0 for anonymous requests).
        messages: OpenAI chat messages (a completions prompt arrives as one user message).
        max_tokens: the request's output cap in tokens, if given.
        extra: other request fields a scenario may read (tools, response_format, ...).
    """

    app: str | None
    agent: str | None
    workflow_id: str | None
    step: int
    messages: Sequence[Mapping[str, Any]]
    max_tokens: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


class Scenario(ABC):
    """Writes the reply text of each request; must be deterministic given the ``rng`` state."""

    @abstractmethod
    def reply(self, request: ScenarioRequest, rng: random.Random) -> str:
        """Return the assistant's reply text for ``request``."""


_REGISTRY: dict[str, Callable[[], Scenario]] = {}


def register_scenario(app: str) -> Callable[[type[Scenario]], type[Scenario]]:
    """Class decorator: make ``cls()`` the scenario for requests whose hint app is ``app``."""

    def deco(cls: type[Scenario]) -> type[Scenario]:
        _REGISTRY[app] = cls
        return cls

    return deco


def get_scenario(app: str | None) -> Scenario | None:
    """A new instance of the scenario registered for ``app``, or ``None`` if there is none."""
    factory = _REGISTRY.get(app) if app is not None else None
    return factory() if factory is not None else None


def load_scenario(spec: str) -> Scenario:
    """Import ``module:ClassName`` and instantiate it.

    Raises:
        ValueError: ``spec`` is not of the form ``module:Name`` or does not name a Scenario class.
        ImportError: the module cannot be imported.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"scenario must be 'module:ClassName', got {spec!r}")
    obj = getattr(importlib.import_module(module_name), attr, None)
    if not isinstance(obj, type) or not issubclass(obj, Scenario):
        raise ValueError(f"{spec!r} is not a Scenario subclass")
    return obj()
