"""Every size of the SWE-bench example, with its source (the one place these values are stated).

The scenario (``scenario.py``) and the runner (``run.py``) read these values;
``scripts/make_example_sizes.py`` writes the table of ``docs/example-sizes.md`` from :data:`SIZES`.
"""

from __future__ import annotations

from examples.common.sizes import NOT_FOUND, SAME_AS, Size

__all__ = ["SIZES", "REPLY_MEDIAN", "REPLY_SIGMA", "TASKS"]

#: Median tokens of each free-text reply part (log-normal, :data:`REPLY_SIGMA`); ``plan_step`` is
#: per hunk of the gold patch. The coder's diff is the real gold patch, whatever its size.
REPLY_MEDIAN = {
    "plan_step": 35,
    "coder_note": 60,
    "tests_failed_note": 120,
    "tests_passed_note": 25,
    "analysis": 150,
    "unknown_request": 80,
}
#: Log-normal sigma of every reply part (``textgen.lognormal_tokens``' default).
REPLY_SIGMA = 0.35
#: (training, test) issues of a full run and of ``--quick``.
TASKS = {"full": (150, 150), "quick": (24, 24)}

_REPLY_SOURCE = (NOT_FOUND + " for one agent step's visible answer; the app's value is kept (the coder's "
                 "patch is the real SWE-bench Lite gold patch). Production coding agents average about 530 "
                 "completion tokens per LLM call (GitHub Copilot coding-agent traces, Azure Public Dataset "
                 "2026, as quoted in issue 25; not checked here) and the simulator adds no hidden thinking "
                 "tokens.")

SIZES: tuple[Size, ...] = (
    Size("messages", "group chat", "", "what each agent's prompt holds: the whole thread so far (task, and "
         "every earlier agent message), the framework's own pattern, not an option of the app",
         "AutoGen `SelectorGroupChat` \"implements a team where participants take turns broadcasting messages "
         "to all other members\" (https://microsoft.github.io/autogen/stable/user-guide/agentchat-user-guide/"
         "selector-group-chat.html)"),
    Size("REPLY_SIGMA", REPLY_SIGMA, "", "log-normal sigma of every reply part", _REPLY_SOURCE),
    *(Size(f"REPLY_MEDIAN[{part}]", median, "tokens", f"median length of the reply part `{part}`",
           f"{SAME_AS} `REPLY_SIGMA`")
      for part, median in REPLY_MEDIAN.items()),
    Size("TASKS[full]", TASKS["full"], "issues", "(training, test) issues of a full run",
         "The app's value (SWE-bench Lite test split has 300 issues)"),
    Size("TASKS[quick]", TASKS["quick"], "issues", "(training, test) issues of `--quick` (CI)",
         "The app's value (CI budget)"),
)
