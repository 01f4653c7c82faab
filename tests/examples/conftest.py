"""Fixtures of the examples' tests: a fixture data directory that the loaders and scenarios use."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from .examples_fixtures import write_data_dir


def _clear_scenario_caches() -> None:
    from examples.finance_crewai import scenario as fin
    from examples.hover_langchain import scenario as hov
    from examples.swe_autogen import scenario as swe

    hov._claims_by_text.cache_clear()
    swe._tasks.cache_clear()
    fin._questions.cache_clear()


@pytest.fixture
def fixture_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """PBKV_DATA_DIR pointing at freshly written fixture data sets (scenario caches cleared around)."""
    root = write_data_dir(tmp_path / "data")
    monkeypatch.setenv("PBKV_DATA_DIR", str(root))
    _clear_scenario_caches()
    yield root
    _clear_scenario_caches()
