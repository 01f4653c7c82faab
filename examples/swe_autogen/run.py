"""The SWE-bench example's part of the main job: task split, the AutoGen team run with PBKV, outcomes."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any, Callable

from examples.common.data import workflow_id_for
from examples.common.integration import EMBEDDED_END_TIMEOUT_S
from examples.common.pipeline import ExampleSpec, seeded_split
from examples.swe_autogen import prompts as P
from examples.swe_autogen import sizes as S
from examples.swe_autogen import scenario as _scenario  # noqa: F401  (registers the scenario)
from examples.swe_autogen.app import build_team
from examples.swe_autogen.data import SweTask, load_swebench

__all__ = ["spec", "run_issues", "summarise", "size_bucket"]

_SIZES = dict(S.TASKS)
#: model_info for a model AutoGen does not know (plain chat, no tools, no vision).
MODEL_INFO = {"vision": False, "function_calling": False, "json_output": False, "family": "unknown",
              "structured_output": False}


def _split(tasks: list[SweTask], n_train: int, n_test: int, seed: int) -> tuple[list[SweTask], list[SweTask]]:
    _, train, test = seeded_split(tasks, n_train, n_test, seed)
    return train, test


async def run_issues(tasks: list[SweTask], server_url: str, trace_path: str, concurrency: int,
                     on_done: Callable[[], None] = lambda: None) -> list[dict[str, Any]]:
    """Work on ``tasks`` with the AutoGen team against pbkv-server, ``concurrency`` teams at a time.

    Each issue gets a fresh team, instrumented the README's way (``instrument_team``); each run is
    one workflow.

    Returns:
        per issue: ``{"instance_id", "lines_changed", "files_changed", "test_runs", "passed", "messages"}``.
    """
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    from pbkv_sdk.integrations.autogen import instrument_team

    gate = asyncio.Semaphore(concurrency)

    async def one(task: SweTask) -> dict[str, Any]:
        async with gate:
            client = OpenAIChatCompletionClient(model="pbkv-sim", base_url=server_url + "/v1", api_key="not-needed",
                                                model_info=MODEL_INFO, max_tokens=1024, temperature=0.0)
            try:
                team = instrument_team(build_team(client), app=P.APP, server_url=server_url, trace_path=trace_path,
                                      end_timeout_s=EMBEDDED_END_TIMEOUT_S)
                # A fixed workflow id per issue keeps the seeded scenario replies the same in every run.
                result = await team.run(task=P.task_message(task), workflow_id=workflow_id_for(task.instance_id))
            finally:
                await client.close()
        on_done()
        testers = [str(m.content) for m in result.messages if getattr(m, "source", "") == P.TESTER]
        return {"instance_id": task.instance_id, "lines_changed": task.lines_changed, "files_changed": task.files_changed,
                "test_runs": len(testers), "passed": bool(testers) and testers[-1].startswith(P.TESTS_PASSED),
                "messages": len(result.messages)}

    return list(await asyncio.gather(*(one(t) for t in tasks)))


def size_bucket(lines_changed: int) -> str:
    """Patch-size bucket of an issue: ``"1-3"``, ``"4-10"``, ``"11+"`` changed lines."""
    return "1-3" if lines_changed <= 3 else "4-10" if lines_changed <= 10 else "11+"


def summarise(outcomes: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean test runs per patch-size bucket and the share of issues whose tests passed."""
    runs: dict[str, list[int]] = defaultdict(list)
    for o in outcomes:
        runs[size_bucket(o["lines_changed"])].append(o["test_runs"])
    return {
        "mean_test_runs_by_patch_lines": {b: sum(v) / len(v) for b, v in sorted(runs.items())},
        "passed_share": sum(o["passed"] for o in outcomes) / len(outcomes) if outcomes else 0.0,
        "issues": len(outcomes),
    }


def spec() -> ExampleSpec:
    """The SWE-bench example: AutoGen team, replay at the paper's concurrency 24."""
    return ExampleSpec(
        name="swe_autogen", app=P.APP, title="SWE-bench Lite + AutoGen", replay_concurrency=24,
        load_tasks=load_swebench, split=_split, run_tasks=run_issues, sizes=_SIZES, summarise_outcomes=summarise,
    )
