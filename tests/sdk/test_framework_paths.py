"""The lifecycle-path table against pbkv-server (``python -m tests.sdk.framework_paths`` runs all
frameworks); here the two tracing-based integrations, the fastest, keep the script honest."""

from __future__ import annotations

from .framework_paths import run_paths


def test_agents_sdk_and_opentelemetry_paths_against_pbkv_server_are_all_stamped_and_ended_as_documented(monkeypatch):
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
    rows = run_paths(["OpenAI Agents SDK", "OpenTelemetry app"])
    assert len(rows) == 8
    assert [r for r in rows if not r[4]] == []
