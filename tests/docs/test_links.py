"""The documentation holds together: every relative link and #anchor in README.md and docs/**/*.md
resolves (GitHub's heading-slug rules), every docs page is reachable from README.md or
docs/index.md, and README.md stays a front page (at most 220 lines).

The checker is plain functions over a root folder, so the self-tests at the bottom run it on a
small tree with a known broken link and anchor and check that both are reported.
"""
from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README_MAX_LINES = 220

_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
# [text](target) and ![alt](target); the text may hold one level of brackets (badges, images)
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFDEF = re.compile(r"^\s*\[[^\]]+\]:\s*(\S+)")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")


def _prose_lines(text: str):
    """(line number, line) outside fenced code blocks."""
    fence = None
    for no, line in enumerate(text.splitlines(), 1):
        m = _FENCE.match(line)
        if m:
            if fence is None:
                fence = m.group(1)
            elif m.group(1) == fence:
                fence = None
            continue
        if fence is None:
            yield no, line


def slug(heading: str) -> str:
    """GitHub's anchor for a heading text (github-slugger): markup removed, lower case, every
    character but letters, digits, marks, '-', '_' and spaces dropped, each space a '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links and images keep their text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    out = []
    for ch in text.lower():
        cat = unicodedata.category(ch)
        if ch in "-_ " or cat[0] in "LNM":
            out.append("-" if ch == " " else ch)
    return "".join(out)


def anchors(text: str) -> set[str]:
    """Every heading anchor of a Markdown text, duplicates numbered ``-1``, ``-2`` as GitHub does."""
    seen: dict[str, int] = {}
    out = set()
    for _, line in _prose_lines(text):
        m = _HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        out.add(base if n == 0 else f"{base}-{n}")
        seen[base] = n + 1
    return out


def links(text: str):
    """(line number, target) of every link outside code blocks and code spans."""
    for no, line in _prose_lines(text):
        bare = _CODE_SPAN.sub("", line)
        for m in _LINK.finditer(bare):
            yield no, m.group(1)
        m = _REFDEF.match(bare)
        if m:
            yield no, m.group(1)


def doc_files(root: Path) -> list[Path]:
    return [root / "README.md"] + sorted((root / "docs").rglob("*.md"))


def broken_links(root: Path) -> list[str]:
    """``file:line: target (why)`` for every relative link or anchor that does not resolve."""
    cache: dict[Path, set[str]] = {}
    problems = []
    for f in doc_files(root):
        for no, target in links(f.read_text(encoding="utf-8")):
            if not target or re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
                continue  # absolute URLs (http:, mailto:) are not checked here
            path, _, anchor = target.partition("#")
            dest = (f.parent / path).resolve() if path else f
            where = f"{f.relative_to(root)}:{no}: {target}"
            if not dest.exists():
                problems.append(f"{where} (no such file)")
                continue
            if anchor:
                if dest.suffix != ".md" or not dest.is_file():
                    problems.append(f"{where} (anchor into a file that is not Markdown)")
                    continue
                if dest not in cache:
                    cache[dest] = anchors(dest.read_text(encoding="utf-8"))
                if anchor not in cache[dest]:
                    problems.append(f"{where} (no heading with anchor #{anchor} in {dest.relative_to(root)})")
    return problems


def unlinked_pages(root: Path) -> list[str]:
    """docs pages that neither README.md nor docs/index.md links to."""
    linked = set()
    for f in (root / "README.md", root / "docs" / "index.md"):
        if f.exists():
            for _, target in links(f.read_text(encoding="utf-8")):
                path = target.partition("#")[0]
                if path and not re.match(r"^[a-z][a-z0-9+.-]*:", path, re.I):
                    linked.add((f.parent / path).resolve())
    pages = sorted((root / "docs").rglob("*.md"))
    return [str(p.relative_to(root)) for p in pages if p.name != "index.md" and p.resolve() not in linked]


# --- the repository's docs ---------------------------------------------------------------------

def test_every_relative_link_and_anchor_resolves():
    problems = broken_links(ROOT)
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_every_docs_page_is_linked_from_readme_or_index():
    assert (ROOT / "docs" / "index.md").is_file()
    missing = unlinked_pages(ROOT)
    assert not missing, "pages not linked from README.md or docs/index.md: " + ", ".join(missing)


def test_readme_is_a_front_page():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move detail into docs/ (limit {README_MAX_LINES})"


# --- the checker itself ------------------------------------------------------------------------

@pytest.mark.parametrize("heading, expected", [
    ("LangGraph / LangChain", "langgraph--langchain"),          # '/' dropped, both spaces kept
    ("Simulator (`pbkv-bench`)", "simulator-pbkv-bench"),
    ("Prediction and access (PBKV Section 4; `workflows.py` cites their use as Eq. 1-2)",
     "prediction-and-access-pbkv-section-4-workflowspy-cites-their-use-as-eq-1-2"),
    ("`RadixTree`", "radixtree"),
    ("Sensitivity (paper Figures 5b, 5c, 10-12)", "sensitivity-paper-figures-5b-5c-10-12"),
    ("pbkv_sdk and [links](x.md)", "pbkv_sdk-and-links"),
])
def test_slug_follows_github(heading, expected):
    assert slug(heading) == expected


def test_duplicate_headings_are_numbered():
    assert anchors("# A\n## Design\n## Design\n```\n# Design\n```\n## Design\n") == {"a", "design", "design-1", "design-2"}


def _tree(tmp_path: Path, readme: str, pages: dict[str, str]) -> Path:
    (tmp_path / "README.md").write_text(readme)
    for name, text in pages.items():
        p = tmp_path / "docs" / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return tmp_path


def test_checker_reports_a_missing_file_and_a_missing_anchor(tmp_path):
    root = _tree(tmp_path, "[ok](docs/a.md#one) [gone](docs/nope.md) [bad](docs/a.md#two)\n"
                           "`[in code](docs/nope.md)`\n```\n[fenced](docs/nope.md)\n```\n",
                 {"index.md": "[a](a.md)\n", "a.md": "# One\n[self](#one) [self-bad](#zero)\n"})
    assert broken_links(root) == [
        "README.md:1: docs/nope.md (no such file)",
        "README.md:1: docs/a.md#two (no heading with anchor #two in docs/a.md)",
        "docs/a.md:2: #zero (no heading with anchor #zero in docs/a.md)",
    ]


def test_checker_reports_an_unlinked_page(tmp_path):
    root = _tree(tmp_path, "[index](docs/index.md)\n", {"index.md": "[a](a.md)\n", "a.md": "# A\n", "sub/b.md": "# B\n"})
    assert unlinked_pages(root) == ["docs/sub/b.md"]
