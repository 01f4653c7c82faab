"""Pytest plugin: a failure is always reported with its test name and reason (issue 35 item 1).

pytest formats a failure by parsing the failing test's source (``getstatementrange_ast``). On
CPython 3.11 that parse can itself raise (``SystemError: AST constructor recursion depth
mismatch``, seen under load in a pytest-xdist worker); the exception then escapes
``pytest_runtest_makereport``, the worker dies with an ``INTERNALERROR``, the failure is never
printed and the worker's remaining tests never run. This wrapper catches an exception raised
while the report is made and reports the failure anyway: first in pytest's ``native`` style
(Python's own traceback module), and if that fails too, as the exception's type and message.
Loaded by ``tests/conftest.py`` for every suite.
"""

from __future__ import annotations

import traceback
from typing import Any

import pytest


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    try:
        return (yield)
    except Exception as formatting_error:  # noqa: BLE001 - any error here would kill the worker
        return _fallback_report(item, call, formatting_error)


def _fallback_report(item: pytest.Item, call: pytest.CallInfo[None], formatting_error: Exception) -> pytest.TestReport:
    """A failed report of ``item``'s ``call.when`` phase whose text needs no AST parsing of the test."""
    note = f"(pytest could not format this failure: {type(formatting_error).__name__}: {formatting_error})"
    longrepr: Any
    excinfo = call.excinfo
    try:
        if excinfo is None:  # the report itself failed without a test failure: say that
            raise formatting_error
        longrepr = excinfo.getrepr(style="native")
        longrepr.addsection("PBKV report fallback", note)
    except Exception:  # noqa: BLE001 - the native style failed too: the plainest text
        err = excinfo.value if excinfo is not None else formatting_error
        where = ""
        try:
            frame = traceback.extract_tb(err.__traceback__)[-1]
            where = f"{frame.filename}:{frame.lineno}: "
        except Exception:  # noqa: BLE001
            pass
        longrepr = f"{where}{type(err).__name__}: {err}\n{note}"
    return pytest.TestReport(
        item.nodeid, item.location, dict.fromkeys(item.keywords, 1), "failed", longrepr, call.when,
        [(f"Captured {key} {rwhen}", content) for rwhen, key, content in item._report_sections],
        call.duration, call.start, call.stop, user_properties=item.user_properties,
    )
