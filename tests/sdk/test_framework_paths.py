"""The lifecycle-path table against pbkv-server (``python -m tests.sdk.framework_paths`` runs every
framework, about 40 s); here the OpenTelemetry rows, the fastest, keep the script honest."""

from __future__ import annotations

from .framework_paths import run_paths


def test_opentelemetry_paths_against_pbkv_server_are_all_stamped_and_ended_as_documented(monkeypatch):
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
    rows = run_paths(["OpenTelemetry app"])
    assert [(r[1], r[4]) for r in rows] == [
        ("GenAI agent spans, 3 threads", True), ("run raises inside the agent span", True), ("run task cancelled", True),
    ]
