"""An 'existing app' for the `pbkv-sdk record` tests: runs one of the test apps on a few tasks.

Usage: ``python record_target.py {langgraph,autogen,crewai,mixed} BASE_URL N_TASKS`` (``mixed``:
N LangGraph workflows, then N // 4 CrewAI kickoffs, then a line ``app done <unix time>``; at exit it writes ``exit handlers done <unix time>`` to
stderr once every other exit handler, the SDK's end flush included, has run). Its only PBKV
lines are the ones README "Adding PBKV to your app" gives (inside ``apps.py``); recording, the
app name and the server URL come from the environment that ``pbkv-sdk record`` sets.
"""

import asyncio
import atexit
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from apps import build_autogen_team, build_crewai_crew, build_langgraph_app  # noqa: E402


def run_langgraph(base_url: str, n: int) -> None:
    """Claim ``i`` runs ``1 + i % 2`` rounds of 6 LLM calls."""
    from pbkv_sdk.integrations.langchain import instrument

    instrument(app="claims")
    graph = build_langgraph_app(base_url)
    for i in range(n):
        graph.invoke({"claim": f"claim{i}", "max_rounds": 1 + i % 2})


def run_autogen(base_url: str, n: int) -> None:
    """Each task: 2 turns of (speaker selection, agent) = 4 LLM calls."""

    async def main() -> None:
        for i in range(n):
            team = build_autogen_team(base_url, max_turns=2)
            await team.run(task=f"fix bug {i}")

    asyncio.run(main())


def run_crewai(base_url: str, n: int) -> None:
    """Each kickoff: analyst then writer = 2 LLM calls."""
    crew = build_crewai_crew(base_url)
    for i in range(n):
        crew.kickoff(inputs={"question": f"question-{i}"})


def run_mixed(base_url: str, n: int) -> None:
    """N LangGraph workflows and N // 4 CrewAI kickoffs in one process."""
    run_langgraph(base_url, n)
    run_crewai(base_url, n // 4)


if __name__ == "__main__":
    # Registered before the SDK's exit flush, so it runs after it (atexit is last in, first out):
    # the tests time exit handling without the interpreter's teardown, which a loaded machine slows.
    atexit.register(lambda: print(f"exit handlers done {time.time()}", file=sys.stderr, flush=True))
    framework, base_url, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    {"langgraph": run_langgraph, "autogen": run_autogen, "crewai": run_crewai, "mixed": run_mixed}[framework](base_url, n)
    print(f"app done {time.time()}", flush=True)
