"""The SWE-bench repair team in AutoGen agentchat: plan, code, test, and analyse-and-retry loops.

A ``SelectorGroupChat`` of four ``AssistantAgent``s whose speaker order is decided by a selector
function over the conversation (never by an extra LLM call)::

    task -> planner -> coder -> tester --"TESTS PASSED"--> stop
                         ^        |
                         |   "TESTS FAILED"
                         +-- analyzer <-+

The run stops when the tester reports ``TESTS PASSED`` or after ``max_attempts`` test runs.
"""

from __future__ import annotations

from typing import Any, Sequence

from examples.swe_autogen import prompts as P

__all__ = ["build_team", "next_speaker", "DEFAULT_MAX_ATTEMPTS", "max_messages"]

#: Test runs before the team gives up on an issue.
DEFAULT_MAX_ATTEMPTS = 4


def max_messages(max_attempts: int) -> int:
    """Messages of a run that uses all attempts: task, planner, then coder+tester per attempt and
    an analyzer before each retry: ``1 + 1 + 2 a + (a - 1)``."""
    return 2 + 2 * max_attempts + (max_attempts - 1)


def next_speaker(messages: Sequence[Any]) -> str:
    """The selector function: who speaks after the last message.

    Args:
        messages: the group chat thread (objects with ``source`` and ``content``).

    Returns:
        the next agent's name: planner first, coder after planner/analyzer, tester after coder,
        analyzer after a failed test run (a passed run ends the chat by the termination condition).
    """
    last = messages[-1] if messages else None
    source = getattr(last, "source", "user")
    if source == "user":
        return P.PLANNER
    if source in (P.PLANNER, P.ANALYZER):
        return P.CODER
    if source == P.CODER:
        return P.TESTER
    if source == P.TESTER and P.TESTS_FAILED in str(getattr(last, "content", "")):
        return P.ANALYZER
    return P.CODER


def build_team(model_clients: Any, max_attempts: int = DEFAULT_MAX_ATTEMPTS) -> Any:
    """Build a fresh team for one issue (a group chat keeps per-run state, so one per task).

    Args:
        model_clients: an AutoGen ``ChatCompletionClient`` shared by all agents, or a mapping
            agent name -> client.
        max_attempts: test runs before giving up (>= 1).

    Returns:
        an ``autogen_agentchat.teams.SelectorGroupChat``; ``await team.run(task=task_message(t))``.

    Raises:
        ValueError: ``max_attempts`` < 1.
    """
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.conditions import MaxMessageTermination, TextMentionTermination
    from autogen_agentchat.teams import SelectorGroupChat

    if max_attempts < 1:
        raise ValueError("max_attempts must be >= 1")

    def client(name: str) -> Any:
        return model_clients[name] if isinstance(model_clients, dict) else model_clients

    agents = [
        AssistantAgent(name, model_client=client(name), system_message=P.SYSTEM[name], description=P.SYSTEM[name][:120])
        for name in P.AGENTS
    ]
    stop = TextMentionTermination(P.TESTS_PASSED, sources=[P.TESTER]) | MaxMessageTermination(max_messages(max_attempts))
    return SelectorGroupChat(
        agents,
        model_client=client(P.PLANNER),  # required by the class; never called: next_speaker always answers
        selector_func=next_speaker,
        allow_repeated_speaker=True,
        termination_condition=stop,
    )
