"""Scenarios: the stand-in for the model's answers in the sim engine (``docs/architecture.md``, "Live server").

A scenario writes each agent's reply from the request and a seeded random source, conditioned on
real properties of the task (HoVer hop count and label, SWE-bench patch size, FinanceBench
question type), so that real framework code downstream branches on realistic decisions.

Apps register their scenario by app name; :func:`get_scenario` falls back to the default.
``pbkv-server --scenario module:Name`` imports a scenario class by path.

A request that offers ``tools`` may be answered with a tool call instead of text:
:meth:`Scenario.tool_call` decides, by default with the scenario's :attr:`Scenario.tool_settings`
(:class:`pbkv_server.scenarios.tool_calls.ToolSettings`), and draws schema-valid arguments.
"""

from __future__ import annotations

import importlib
import random
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Mapping, Sequence

from pbkv_server.scenarios.tool_calls import ToolCall, ToolSettings, decide_tool_call, draw_tool_call

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
    """Writes the reply of each request (text, or a tool call); must be deterministic given the ``rng`` state."""

    #: When ``tool_choice: "auto"`` calls a tool; a subclass sets its own (a class attribute).
    tool_settings: ClassVar[ToolSettings] = ToolSettings()

    @abstractmethod
    def reply(self, request: ScenarioRequest, rng: random.Random) -> str:
        """Return the assistant's reply text for ``request``."""

    def tool_call(self, request: ScenarioRequest, rng: random.Random) -> ToolCall | None:
        """The tool call that answers ``request`` instead of text, or ``None`` for a text answer.

        Called only for chat requests that offer tools and whose ``tool_choice`` is not
        ``"none"``, with an ``rng`` of its own (seeded like :meth:`reply`'s), so requests without
        tools are answered exactly as before. The default follows ``tool_choice`` and
        :attr:`tool_settings` (:func:`pbkv_server.scenarios.tool_calls.decide_tool_call`) and fills
        the arguments from the function's ``parameters`` schema with words of the prompt.
        """
        from pbkv_server.scenarios.default import prompt_words  # the default scenario imports this module

        function = decide_tool_call(request.extra, request.messages, self.tool_settings, rng)
        return None if function is None else draw_tool_call(function, rng, prompt_words(request)[:50])


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
        ValueError: ``spec`` is not of the form ``module:Name`` or does not name a Scenario class,
            or a module is missing while the user's module is imported (the user's module or one
            it imports: the user's environment, not an extra of ours; the message names both).
        ImportError: the module cannot be imported for another reason.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"scenario must be 'module:ClassName', got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        # Not a missing extra of pbkv (the CLI would blame the "server" extra for it): say whose it is.
        missing = exc.name or str(exc)
        if missing == module_name or module_name.startswith(missing + "."):
            raise ValueError(f"scenario {spec!r}: no module named {missing!r} (a scenario module must be "
                             f"importable: on PYTHONPATH or installed)") from None
        raise ValueError(f"scenario {spec!r}: module {module_name!r} imports {missing!r}, which is not "
                         f"installed") from None
    obj = getattr(module, attr, None)
    if not isinstance(obj, type) or not issubclass(obj, Scenario):
        raise ValueError(f"{spec!r} is not a Scenario subclass")
    return obj()
