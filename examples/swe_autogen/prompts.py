"""Prompt texts and reply markers of the SWE-bench repair team (shared by app and scenario)."""

from __future__ import annotations

from examples.swe_autogen.data import SweTask

APP = "swe"

PLANNER = "planner"
CODER = "coder"
TESTER = "tester"
ANALYZER = "analyzer"
AGENTS = (PLANNER, CODER, TESTER, ANALYZER)

INSTANCE_LABEL = "Instance"
TESTS_FAILED = "TESTS FAILED"
TESTS_PASSED = "TESTS PASSED"

SYSTEM = {
    PLANNER: (
        "You are the planner of a software repair team working on a real GitHub issue. Read the issue "
        "and the relevant code, locate the root cause, and write a numbered plan: which file and "
        "function to change, what the change is, and which tests should prove it. Do not write code."
    ),
    CODER: (
        "You are the coder of a software repair team. Follow the plan (and the analysis of any failed "
        "test run) and answer with a minimal patch as a unified diff in a ```diff block against the "
        "repository's current code, followed by one paragraph that explains the change."
    ),
    TESTER: (
        "You are the tester of a software repair team. Apply the latest patch, run the tests that the "
        f"issue concerns, and report the result: start with '{TESTS_PASSED}: <n> tests' or "
        f"'{TESTS_FAILED}: <k> of <n> failing', then give the failing test names and the relevant log."
    ),
    ANALYZER: (
        "You are the failure analyst of a software repair team. Read the failed test log and the latest "
        "patch, explain why the tests fail, and tell the coder precisely what to change next."
    ),
}


def pre_change_code(task: SweTask, max_chars: int = 6000) -> str:
    """The repository code the gold patch touches, as it was before the fix.

    Context and removed lines of each hunk (added lines dropped), with the file headers, cut to
    ``max_chars`` characters. This is real code from the patch, given to the team as context.
    """
    out = []
    for hunk in task.hunks:
        for line in hunk.splitlines():
            if line.startswith("diff --git"):
                out.append("# file " + line.split(" b/", 1)[-1])
            elif line.startswith("@@"):
                out.append(line)
            elif line.startswith((" ", "-")) and not line.startswith("---"):
                out.append(line[1:])
    return "\n".join(out)[:max_chars]


def task_message(task: SweTask) -> str:
    """The team's task: instance id, repository, the real issue text and the pre-change code."""
    return (
        f"{INSTANCE_LABEL}: {task.instance_id}\nRepository: {task.repo}\n\nIssue:\n{task.problem_statement.strip()}\n\n"
        f"Relevant code:\n{pre_change_code(task)}"
    )
