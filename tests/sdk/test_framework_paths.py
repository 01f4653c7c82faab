"""The lifecycle-path table against pbkv-server: every run-control path of LangGraph, AutoGen,
CrewAI, the OpenAI Agents SDK and an OpenTelemetry-only app, with the real frameworks (about
15 s), run as the documented command (``python -m tests.sdk.framework_paths``) in its own
process, since it instruments and uninstruments every framework globally."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .framework_paths import FRAMEWORKS

ROOT = Path(__file__).resolve().parents[2]


def _run_paths(*only: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Run ``tests.sdk.framework_paths`` (``--only`` the given frameworks); returns the process and
    its table rows, after asserting that it succeeded with no path marked NO."""
    env = {k: v for k, v in os.environ.items() if k != "OTEL_SDK_DISABLED"}
    env.update(CREWAI_DISABLE_TELEMETRY="true", CREWAI_TRACING_ENABLED="false")
    done = subprocess.run([sys.executable, "-m", "tests.sdk.framework_paths", *(["--only", *only] if only else [])],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ") and not line.startswith("| framework")]
    failed = [row for row in rows if row.rstrip().endswith("| NO |")]
    assert done.returncode == 0 and not failed, "\n".join(failed) or done.stdout[-3000:] + done.stderr[-3000:]
    return done, rows


@pytest.mark.slow
def test_the_opentelemetry_paths_alone_are_stamped_and_ended_as_documented():
    """The fast lane's share of the paths: the three OpenTelemetry ones (no agent framework loaded)."""
    done, rows = _run_paths("OpenTelemetry app")
    assert {row.split(" | ")[0].lstrip("| ") for row in rows} == {"OpenTelemetry app"}
    assert len(rows) == 3 and re.search(r"^3/3 paths as expected", done.stdout, re.M)


@pytest.mark.slow
def test_every_framework_path_is_stamped_and_ended_as_documented():
    done, rows = _run_paths()
    assert {row.split(" | ")[0].lstrip("| ") for row in rows} == set(FRAMEWORKS)
    assert re.search(rf"^{len(rows)}/{len(rows)} paths as expected", done.stdout, re.M)
    assert len(rows) == 32  # 11 LangGraph, 6 AutoGen, 6 CrewAI, 6 Agents SDK, 3 OpenTelemetry
