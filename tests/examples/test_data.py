"""Dataset loaders: locate files, reject missing and malformed files with clear messages, parse fields."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from examples.common.data import DataError, resolve_data_file
from examples.finance_crewai.data import load_financebench
from examples.hover_langchain.data import load_hover
from examples.swe_autogen.data import load_swebench, patch_size, split_hunks

LOADERS = {
    "hover": (load_hover, "hover/hover_dev_release_v1.1.json"),
    "swe": (load_swebench, "swebench/swe-bench-lite.json"),
    "finance": (load_financebench, "financebench/financebench_open_source.jsonl"),
}


def test_hover_loader_parses_titles_label_and_hops(fixture_data: Path) -> None:
    claims = load_hover()
    assert len(claims) == 60
    first = claims[0]
    assert first.num_hops == 2 and first.label == "SUPPORTED"
    assert len(first.titles) == 2 and first.titles[0].endswith("(2.0.0)")
    assert {c.num_hops for c in claims} == {2, 3, 4}


def test_swe_loader_cuts_hunks_and_measures_patch_size(fixture_data: Path) -> None:
    small, large = load_swebench()
    assert (small.files_changed, small.lines_changed) == (1, 1)
    assert (large.files_changed, large.lines_changed) == (3, 60)
    assert large.fail_to_pass == ("test_export_unicode", "test_export_rows")


def test_patch_size_counts_changed_lines_not_file_headers() -> None:
    patch = "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n keep\n-old\n+new\n+extra\n"
    assert patch_size(patch) == 3
    assert len(split_hunks(patch + patch.replace("/x", "/y"))) == 2


def test_finance_loader_keeps_type_reasoning_and_pages(fixture_data: Path) -> None:
    qs = load_financebench()
    assert [q.question_type for q in qs] == ["metrics-generated", "domain-relevant", "novel-generated"]
    assert qs[0].reasoning == "Numerical reasoning" and qs[1].reasoning == ""
    assert qs[0].evidence[0].page == 41 and qs[0].evidence[0].page_text.startswith("Consolidated")


@pytest.mark.parametrize("name", sorted(LOADERS))
def test_loader_rejects_missing_file_naming_the_path(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PBKV_DATA_DIR", str(tmp_path))
    loader, relpath = LOADERS[name]
    with pytest.raises(DataError, match="PBKV_DATA_DIR") as info:
        loader()
    assert str(tmp_path / relpath) in str(info.value)


@pytest.mark.parametrize("name", sorted(LOADERS))
def test_loader_rejects_truncated_file(name: str, fixture_data: Path) -> None:
    loader, relpath = LOADERS[name]
    path = fixture_data / relpath
    text = path.read_text(encoding="utf-8")
    path.write_text(text[: len(text) // 2], encoding="utf-8")
    with pytest.raises(DataError, match="malformed JSON") as info:
        loader()
    assert str(path) in str(info.value)


@pytest.mark.parametrize("name,field", [("hover", "num_hops"), ("swe", "patch"), ("finance", "question_type")])
def test_loader_rejects_row_without_required_field(name: str, field: str, fixture_data: Path) -> None:
    loader, relpath = LOADERS[name]
    path = fixture_data / relpath
    if relpath.endswith(".jsonl"):
        rows = [json.loads(line) for line in path.read_text().splitlines()]
    else:
        rows = json.loads(path.read_text())
    del rows[1][field]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) if relpath.endswith(".jsonl") else json.dumps(rows))
    with pytest.raises(DataError, match=rf"row 1 lacks field '{field}'"):
        loader()


def test_hover_loader_rejects_unknown_label(fixture_data: Path) -> None:
    path = fixture_data / LOADERS["hover"][1]
    rows = json.loads(path.read_text())
    rows[3]["label"] = "MAYBE"
    path.write_text(json.dumps(rows))
    with pytest.raises(DataError, match="row 3 has label 'MAYBE'"):
        load_hover()


def test_resolver_downloads_into_cache_when_no_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PBKV_DATA_DIR", raising=False)
    monkeypatch.setenv("PBKV_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr("examples.common.data.default_data_dir", lambda: tmp_path / "nowhere")
    fetched: list[Path] = []

    def fetch(dest: Path) -> None:
        dest.parent.mkdir(parents=True)
        dest.write_text("[]")
        fetched.append(dest)

    path = resolve_data_file("hover/x.json", fetch)
    assert path == tmp_path / "cache" / "data" / "hover" / "x.json" and fetched == [path]
    assert resolve_data_file("hover/x.json", fetch) == path and len(fetched) == 1  # cached: no second fetch


def test_resolver_reports_failed_download_with_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PBKV_DATA_DIR", raising=False)
    monkeypatch.setenv("PBKV_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr("examples.common.data.default_data_dir", lambda: tmp_path / "nowhere")

    def fetch(dest: Path) -> None:
        raise OSError("network is unreachable")

    with pytest.raises(DataError, match="download failed: network is unreachable.*Set PBKV_DATA_DIR"):
        resolve_data_file("hover/x.json", fetch)
