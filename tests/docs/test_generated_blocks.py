"""``scripts/generated_blocks.py``: the block writer the ``make_*_docs`` scripts share."""
from __future__ import annotations

import pytest

from .scripts_loader import load_script


@pytest.fixture(scope="module")
def blocks():
    return load_script("generated_blocks")


def test_replace_block_keeps_everything_around_the_block(blocks):
    page = "head\n<!-- t:begin -->\nold\n<!-- t:end -->\ntail\n"
    assert blocks.replace_block(page, "t", "new 1\nnew 2\n", "p.md") == (
        "head\n<!-- t:begin -->\nnew 1\nnew 2\n<!-- t:end -->\ntail\n")
    for bad in ("no block", "<!-- t:end -->\n<!-- t:begin -->\n", "<!-- t:begin -->\n<!-- t:begin -->\n<!-- t:end -->"):
        with pytest.raises(blocks.BlockError, match="p.md needs one <!-- t:begin -->"):
            blocks.replace_block(bad, "t", "x\n", "p.md")


def test_write_or_check(blocks, tmp_path, capsys):
    page = tmp_path / "page.md"
    page.write_text("a\n<!-- t:begin -->\nold\n<!-- t:end -->\n")

    def render(text):
        return blocks.replace_block(text, "t", "new\n", "page.md")

    assert blocks.write_or_check("make_t", page, render, "t", ["--check"]) == 1  # stale, nothing written
    assert "old" in page.read_text()
    # one line naming the page and the command that rewrites it (it used to say nothing)
    assert capsys.readouterr().err == f"make_t: {page} is stale; rewrite it with: python scripts/make_t.py\n"
    assert blocks.write_or_check("make_t", page, render, "t", []) == 0
    assert page.read_text() == "a\n<!-- t:begin -->\nnew\n<!-- t:end -->\n"
    assert blocks.write_or_check("make_t", page, render, "t", ["--check"]) == 0
    page.write_text("no markers\n")
    assert blocks.write_or_check("make_t", page, render, "t", []) == 2
    assert capsys.readouterr().err.strip() == "make_t: page.md needs one <!-- t:begin --> ... <!-- t:end --> block"
    assert page.read_text() == "no markers\n"


def test_a_stale_page_in_the_repository_is_named_from_its_root(blocks):
    from pathlib import Path

    root = Path(blocks.__file__).resolve().parent.parent
    assert blocks.stale_line("make_profile_docs", root / "docs" / "hardware-profiles.md") == (
        "make_profile_docs: docs/hardware-profiles.md is stale; rewrite it with: python scripts/make_profile_docs.py")
