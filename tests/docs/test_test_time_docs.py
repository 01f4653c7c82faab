"""README's test-time block is rendered from the filed runs of ``scripts/test.sh`` (issue 35: README
gave no time for the test command), by ``scripts/make_test_time_docs.py``."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("make_test_time_docs", ROOT / "scripts" / "make_test_time_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


LOG = """installs done; running the suites (01:07:10 UTC)
===== 1597 passed in 300.1s =====
suites took 6 min 34 s after the installs
test-command-timing: commit=3f9a21b cores=2 installs_s=256 suites_s=394 total_s=650 load1_end=2.10 load15_end=1.92 date=2026-12-04 passed=yes
"""


def test_the_readme_block_is_current():
    script = _script()
    page = (ROOT / "README.md").read_text(encoding="utf-8")
    assert script.render(page, script.load_records()) == page, "README is stale: run scripts/make_test_time_docs.py"


def test_a_log_line_becomes_a_record_and_a_sentence():
    script = _script()
    record = script.parse_log("earlier run\ntest-command-timing: commit=x cores=1 installs_s=1 suites_s=1 "
                              "total_s=2 load1_end=0 load15_end=0 date=d passed=no\n" + LOG)
    assert record == {"commit": "3f9a21b", "date": "2026-12-04", "passed": "yes", "cores": 2, "installs_s": 256,
                      "suites_s": 394, "total_s": 650, "load1_end": 2.1, "load15_end": 1.92}
    busy = {**record, "total_s": 2586, "suites_s": 1542, "installs_s": 1044, "load15_end": 6.04, "busy": 2}
    failed = {**record, "passed": "no", "busy": 0, "total_s": 1}
    text = script.render_block([{**record, "busy": 0}, failed, busy])
    # 650 s = 10 min 50 s; 2586 s = 43 min 6 s; the failed run is not quoted
    assert text == ("Measured (`scripts/make_test_time_docs.py`): on an idle machine 10 min 50 s in all (installs "
                    "4 min 16 s, suites 6 min 34 s; 2 cores, load 1.9 over the last 15 min; commit 3f9a21b, "
                    "2026-12-04); with 2 other CPU-bound jobs beside it 43 min 6 s in all (installs 17 min 24 s, "
                    "suites 25 min 42 s; 2 cores, load 6.0 over the last 15 min; commit 3f9a21b, 2026-12-04).\n")


@pytest.mark.parametrize("text, reason", [
    ("suites took 1 min\n", "no 'test-command-timing:' line"),
    ("test-command-timing: commit=x cores=2\n", "lacks date, passed, installs_s"),
])
def test_a_log_without_a_whole_timing_line_is_refused(text, reason):
    with pytest.raises(ValueError, match=reason):
        _script().parse_log(text)


def test_check_of_a_stale_readme_says_so_in_one_line(tmp_path, monkeypatch, capsys):
    script = _script()
    page = tmp_path / "README.md"
    page.write_text("old\n", encoding="utf-8")
    monkeypatch.setattr(script, "PAGE", page)
    monkeypatch.setattr(script, "render", lambda text, records: "new\n")
    assert script.main(["--check"]) == 1
    assert capsys.readouterr().err == f"make_test_time_docs: {page} is stale; rewrite it with: python scripts/make_test_time_docs.py\n"
    assert page.read_text(encoding="utf-8") == "old\n"
