"""Schema-driven fuzzing of a live pbkv-server with schemathesis (test extra only).

:func:`fuzz` loads the server's OpenAPI document (``/openapi.json``), and for every operation and
generation mode (``positive``: data the schema allows; ``negative``: data it forbids) draws
``max_examples`` cases with Hypothesis, sends each over real HTTP and runs schemathesis's checks
on the answer: no 5xx (``not_a_server_error``), a documented status and content type, a body that
matches the documented schema, schema-invalid data refused with a 4xx
(``negative_data_rejection``), schema-valid data accepted (``positive_data_acceptance``), and the
rest of the default set. Failures are collected, not raised, so one run reports all of them.

Used by ``tests/server/http/test_fuzz.py`` (CI size) and ``benchmarks/server_fuzz.py``
(longer runs). Needs ``schemathesis`` (``pip install 'pbkv[test]'``).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any, Iterable

__all__ = ["OperationRun", "fuzz", "SUBSET_PATTERNS", "names_unoffered_tool"]


@dataclass
class OperationRun:
    """What one operation received in one generation mode.

    Attributes:
        operation: ``"POST /v1/chat/completions"`` etc.
        mode: ``"positive"`` or ``"negative"``.
        cases: cases generated and sent.
        statuses: count of answers per HTTP status.
        failures: one line per failed check (check name, status, message, curl command).
        unoffered: schema-valid cases whose ``tool_choice`` names a tool they do not offer
            (:func:`names_unoffered_tool`): refused with 400 by design, so not expected to succeed.
    """

    operation: str
    mode: str
    cases: int = 0
    statuses: collections.Counter[int] = field(default_factory=collections.Counter)
    failures: list[str] = field(default_factory=list)
    unoffered: int = 0

    @property
    def server_errors(self) -> int:
        """Answers with a 5xx status."""
        return sum(n for status, n in self.statuses.items() if status >= 500)


#: Path parameters whose documented pattern is a subset of what the server accepts: an app name
#: is valid when its percent-encoded form fits in 128 characters, which no JSON Schema pattern
#: can express, so the document promises the printable-ASCII subset. A negative case that only
#: breaks such a pattern is not expected to be refused.
SUBSET_PATTERNS = frozenset({"app_name"})


def names_unoffered_tool(body: Any) -> bool:
    """Whether a chat body's ``tool_choice`` names a function that is not among its ``tools``.

    The server refuses such a body (400, as OpenAI does), but the rule ties two fields together
    and JSON Schema cannot state it, so schema-valid (positive) data may break it: such a case is
    not expected to be accepted.
    """
    if not isinstance(body, dict) or not isinstance(body.get("tool_choice"), dict):
        return False
    choice = body["tool_choice"]
    named = choice.get("function", {}).get("name") if isinstance(choice.get("function"), dict) else None
    tools = body.get("tools") if isinstance(body.get("tools"), list) else []
    offered = {t["function"].get("name") for t in tools if isinstance(t, dict) and isinstance(t.get("function"), dict)}
    return choice.get("type") == "function" and named is not None and named not in offered


def fuzz(base_url: str, max_examples: int, modes: Iterable[str] = ("positive", "negative"),
         seed: int | None = 0, headers: dict[str, str] | None = None) -> list[OperationRun]:
    """Fuzz every operation of the server at ``base_url`` (e.g. ``http://127.0.0.1:8000``).

    Args:
        base_url: the server's root URL (its document is at ``/openapi.json``).
        max_examples: cases per operation and mode (Hypothesis may stop earlier when an
            operation has fewer distinct inputs, e.g. ``GET /health``).
        modes: generation modes to run.
        seed: Hypothesis seed (``None`` = random); the same seed sends the same cases.
        headers: extra headers on every request (e.g. the hint token).

    Returns:
        one :class:`OperationRun` per operation and mode, in document order.
    """
    import requests
    import schemathesis
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed
    from hypothesis.errors import Unsatisfiable
    from schemathesis import GenerationMode

    schema = schemathesis.openapi.from_url(base_url.rstrip("/") + "/openapi.json")
    session = requests.Session()
    runs: list[OperationRun] = []
    for result in schema.get_all_operations():
        operation = result.ok()
        for mode in modes:
            run = OperationRun(f"{operation.method.upper()} {operation.path}", mode)
            runs.append(run)
            test = settings(max_examples=max_examples, deadline=None, database=None,
                            suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate])(
                given(case=operation.as_strategy(generation_mode=GenerationMode(mode)))(_case_runner(
                    run, base_url, session, headers)))
            if seed is not None:
                test = hypothesis_seed(seed)(test)
            try:
                test()
            except Unsatisfiable:
                pass  # nothing to negate (an operation without parameters or body): 0 negative cases
    return runs


def _case_runner(run: OperationRun, base_url: str, session: Any, headers: dict[str, str] | None) -> Any:
    from schemathesis.generation.meta import negated_parameters
    from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance

    # No shrinking (Phase.shrink is off): a failure is recorded as found and fuzzing goes on.
    def one_case(case: Any) -> None:
        run.cases += 1
        response = None
        try:
            response = case.call(base_url=base_url, session=session, headers=headers, timeout=30)
            run.statuses[response.status_code] += 1
            negated = {name for name, _ in negated_parameters(case.meta)}
            lenient = [negative_data_rejection] if negated and negated <= SUBSET_PATTERNS else []
            if names_unoffered_tool(case.body):
                lenient.append(positive_data_acceptance)
                run.unoffered += 1
            case.validate_response(response, headers=headers, excluded_checks=lenient)
        except BaseException as exc:  # a failed check, or a group of them: record and go on
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            status = response.status_code if response is not None else "no answer"
            detail = " ".join(str(exc).split())[:400]
            run.failures.append(f"{type(exc).__name__} (status {status}): {detail} | {case.as_curl_command()[:2000]}")

    return one_case
