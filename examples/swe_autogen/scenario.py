"""The SWE-bench team's scenario: the sim engine's stand-in for the model's answers.

Conditioned on the real instance (found by its ``Instance:`` line in SWE-bench Lite): the planner's
plan and the coder's patch have the size of the real gold patch (the coder writes the gold patch's
hunks); the tester fails a run with probability :func:`p_fail`, which grows with the patch size
(lines changed, files touched) and shrinks with each retry, and lists the instance's real
FAIL_TO_PASS tests; the analyzer explains the failure. Larger patches therefore take more
analyse/code/test retry loops on average.
"""

from __future__ import annotations

import math
import random
from functools import lru_cache

from examples.common.textgen import count_in_prompt, find_field, lognormal_tokens, non_system_text, prose, words_of
from examples.swe_autogen import prompts as P
from examples.swe_autogen import sizes as S
from examples.swe_autogen.data import SweTask, load_swebench
from pbkv_server.scenarios.base import Scenario, ScenarioRequest, register_scenario

__all__ = ["SweScenario", "p_fail", "RETRY_DECAY"]

#: Factor on the failure probability per earlier failed run (the analysis helps the next attempt).
RETRY_DECAY = 0.6


def p_fail(lines_changed: int, files_changed: int, attempt: int) -> float:
    """Probability that test run ``attempt`` (1-based) fails.

    ``p = clip(0.15 + 0.12 ln(1 + lines) + 0.08 (files - 1), 0.05, 0.9) * RETRY_DECAY^(attempt-1)``:
    a one-line fix fails its first run about 23% of the time, a 6-line fix (the Lite median) 38%,
    a 50-line fix 62%. The coefficients are assumptions of this scenario, not measured values.
    """
    base = 0.15 + 0.12 * math.log1p(max(0, lines_changed)) + 0.08 * max(0, files_changed - 1)
    return min(0.9, max(0.05, base)) * RETRY_DECAY ** max(0, attempt - 1)


@lru_cache(maxsize=1)
def _tasks() -> dict[str, SweTask]:
    return {t.instance_id: t for t in load_swebench()}


@register_scenario(P.APP)
class SweScenario(Scenario):
    """Replies of planner, coder, tester and analyzer (see module docstring)."""

    def reply(self, request: ScenarioRequest, rng: random.Random) -> str:
        """Return the reply of ``request.agent`` for the instance named in the ``Instance:`` line."""
        iid = find_field(request.messages, P.INSTANCE_LABEL)
        task = _tasks().get(iid.strip()) if iid else None
        if task is None or request.agent not in P.AGENTS:
            return prose(rng, words_of(non_system_text(request.messages))[-200:], lognormal_tokens(rng, S.REPLY_MEDIAN['unknown_request'], S.REPLY_SIGMA))
        vocab = words_of(task.problem_statement)[:400]
        if request.agent == P.PLANNER:
            steps = [f"{i}. Change {h.splitlines()[0].split(' b/', 1)[-1]}: {prose(rng, vocab, lognormal_tokens(rng, S.REPLY_MEDIAN['plan_step'], S.REPLY_SIGMA))}"
                     for i, h in enumerate(task.hunks, 1)]
            steps.append(f"{len(steps) + 1}. Run {', '.join(task.fail_to_pass[:3]) or 'the affected tests'}.")
            return "Plan:\n" + "\n".join(steps)
        if request.agent == P.CODER:
            # The model rewrites the whole fix on each attempt: the gold patch has the real size.
            return f"```diff\n{task.patch.strip()}\n```\n{prose(rng, vocab, lognormal_tokens(rng, S.REPLY_MEDIAN['coder_note'], S.REPLY_SIGMA))}"
        attempt = count_in_prompt(request.messages, P.TESTS_FAILED + ":") + 1
        if request.agent == P.TESTER:
            n = max(1, len(task.fail_to_pass))
            if rng.random() < p_fail(task.lines_changed, task.files_changed, attempt):
                k = rng.randint(1, n)
                failing = "\n".join(f"FAILED {t}" for t in (task.fail_to_pass or ("test_issue",))[:k])
                return f"{P.TESTS_FAILED}: {k} of {n} failing\n{failing}\n{prose(rng, vocab, lognormal_tokens(rng, S.REPLY_MEDIAN['tests_failed_note'], S.REPLY_SIGMA))}"
            return f"{P.TESTS_PASSED}: {n} tests\n{prose(rng, vocab, lognormal_tokens(rng, S.REPLY_MEDIAN['tests_passed_note'], S.REPLY_SIGMA))}"
        return f"Analysis of failed run {attempt - 1}:\n{prose(rng, vocab, lognormal_tokens(rng, S.REPLY_MEDIAN['analysis'], S.REPLY_SIGMA))}"
