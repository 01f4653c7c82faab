"""Every size of the FinanceBench example, with its source (the one place these values are stated).

The scenario (``scenario.py``) and the runner (``run.py``) read these values;
``scripts/make_example_sizes.py`` writes the table of ``docs/example-sizes.md`` from :data:`SIZES`.
"""

from __future__ import annotations

from examples.common.sizes import NOT_FOUND, SAME_AS, Size

__all__ = ["SIZES", "MEDIAN_TOKENS", "UNKNOWN_REQUEST_MEDIAN", "N_EXAMPLES", "TASKS"]

#: Median reply tokens per (FinanceBench question type, crew role) (log-normal, sigma 0.35).
MEDIAN_TOKENS = {
    "metrics-generated": {"Filing Researcher": 160, "Financial Analyst": 260, "Answer Writer": 60,
                          "Answer Reviewer": 70},
    "domain-relevant": {"Filing Researcher": 220, "Financial Analyst": 200, "Answer Writer": 150,
                        "Answer Reviewer": 90},
    "novel-generated": {"Filing Researcher": 190, "Financial Analyst": 300, "Answer Writer": 120,
                        "Answer Reviewer": 90},
}
#: Median reply tokens of a request the scenario cannot place.
UNKNOWN_REQUEST_MEDIAN = 80
#: Held-out questions rendered as worked examples in every agent's backstory.
N_EXAMPLES = 3
#: (training, test) questions of a full run and of ``--quick``.
TASKS = {"full": (72, 72), "quick": (24, 24)}

_REPLY_SOURCE = (NOT_FOUND + " for one crew step's visible answer; the app's value is kept (the simulator "
                 "adds no hidden thinking tokens)")

SIZES: tuple[Size, ...] = (
    Size("context", "previous task outputs", "", "what each agent's prompt holds: its role, goal and "
         "backstory, its task, and the outputs of the earlier tasks; the framework's own pattern",
         "CrewAI sequential process: agents pick up their tasks \"with outcomes of preceding tasks or "
         "directives guiding their execution\" (https://docs.crewai.com/learn/sequential-process)"),
    Size("UNKNOWN_REQUEST_MEDIAN", UNKNOWN_REQUEST_MEDIAN, "tokens", "median reply to a request the "
         "scenario cannot place", _REPLY_SOURCE),
    *(Size(f"MEDIAN_TOKENS[{qtype}][{role}]", median, "tokens", f"median reply of the {role} on a {qtype} "
           "question", f"{SAME_AS} `UNKNOWN_REQUEST_MEDIAN`")
      for qtype, roles in MEDIAN_TOKENS.items() for role, median in roles.items()),
    Size("N_EXAMPLES", N_EXAMPLES, "questions", "held-out worked examples in every backstory",
         NOT_FOUND + "; the app's value"),
    Size("TASKS[full]", TASKS["full"], "questions", "(training, test) questions of a full run",
         "The app's value (FinanceBench's open-source sample has 150 questions)"),
    Size("TASKS[quick]", TASKS["quick"], "questions", "(training, test) questions of `--quick` (CI)",
         "The app's value (CI budget)"),
)
