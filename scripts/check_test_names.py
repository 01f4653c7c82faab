"""Check the test tree's layout: every folder holding tests is a package, and no test file name
repeats one of its folders as a prefix.

Why: test folders are packages (``tests/server/sim/__init__.py``), so pytest imports
``tests/server/sim/test_cluster.py`` as ``tests.server.sim.test_cluster`` and two folders may hold
files of the same name. The folder already says what a file tests; ``test_sim_cluster.py`` in
``tests/server/sim/`` says it twice. A folder name counts also without its plural ``s``
(``tests/server/scenarios/test_scenario_x.py`` is flagged).

Usage: ``python scripts/check_test_names.py [TESTS_DIR]`` (default ``tests`` next to this script's
folder). Prints one line per problem and exits 1 when there is any, else 0.
"""

from __future__ import annotations

import sys
from pathlib import Path


def folder_prefixes(folder: str) -> set[str]:
    """The file-name prefixes that repeat ``folder``: ``sim`` -> ``{"test_sim_"}``, ``scenarios``
    -> ``{"test_scenarios_", "test_scenario_"}``."""
    names = {folder, folder[:-1]} if folder.endswith("s") and len(folder) > 1 else {folder}
    return {f"test_{name}_" for name in names}


def problems(tests_dir: Path) -> list[str]:
    """One message per test file whose name repeats a folder of its path below ``tests_dir``, and
    per folder holding test files without an ``__init__.py`` (``tests_dir`` itself included)."""
    found: list[str] = []
    test_files = sorted(p for p in tests_dir.rglob("test_*.py") if ".venv" not in p.parts)
    folders = {tests_dir}
    for f in test_files:  # a test file's folder and every folder between it and tests_dir
        rel = f.parent.relative_to(tests_dir)
        folders.update(tests_dir / q for q in (rel, *rel.parents))
    for folder in sorted(folders):
        if not (folder / "__init__.py").is_file():
            found.append(f"{folder}: no __init__.py (test folders are packages, so file names may repeat)")
    for f in test_files:
        rel = f.relative_to(tests_dir)
        for part in rel.parts[:-1]:
            clash = sorted(p for p in folder_prefixes(part) if f.name.startswith(p))
            if clash:
                new = "test_" + f.name[len(clash[-1]):]
                found.append(f"{tests_dir / rel}: name repeats its folder '{part}'; call it {new}")
                break
    return found


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    tests_dir = Path(args[0]) if args else Path(__file__).resolve().parents[1] / "tests"
    if not tests_dir.is_dir():
        print(f"check_test_names: {tests_dir} is not a folder", file=sys.stderr)
        return 2
    found = problems(tests_dir)
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
