"""No module of ``pbkv_sdk`` imports, directly or through others, a module that imports it back.

Read with ``ast`` (nothing is imported), counting every import statement that can run: at module
level and inside functions (a deferred import is how a cycle hides), but not under
``if TYPE_CHECKING:`` (never runs). ``from pbkv_sdk import routing`` counts as importing the
module ``pbkv_sdk.routing``; a package's ``__init__`` is not counted as imported by its own
submodules (Python runs it first anyway, and it may re-export them).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pbkv_sdk

ROOT = Path(pbkv_sdk.__file__).parent


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(path: Path, module: str, known: set[str]) -> set[str]:
    """The pbkv_sdk modules that ``module`` (at ``path``) may import."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)  # submodules named in the list
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    ancestors = {module.rsplit(".", i)[0] for i in range(1, module.count(".") + 1)}
    return {m for m in found if m in known and m != module and m not in ancestors}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def test_no_module_of_pbkv_sdk_imports_in_a_cycle():
    modules = _modules()
    graph = {name: _imports(path, name, set(modules)) for name, path in modules.items()}
    assert "pbkv_sdk.delivery" in graph["pbkv_sdk.ending"] and "pbkv_sdk.delivery" in graph["pbkv_sdk.routing"]
    assert _cycles(graph) == []


def test_the_cycle_finder_sees_a_deferred_import_and_skips_type_checking(tmp_path):
    # main before the delivery module: ending imported routing at the top, routing imported
    # ending inside declare_graph
    ending = tmp_path / "ending.py"
    ending.write_text("from pbkv_sdk import routing\n")
    routing = tmp_path / "routing.py"
    routing.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pbkv_sdk import context\n"
                       "def declare_graph():\n    from pbkv_sdk.ending import queue_request\n")
    known = {"pbkv_sdk", "pbkv_sdk.ending", "pbkv_sdk.routing", "pbkv_sdk.context"}
    graph = {"pbkv_sdk.ending": _imports(ending, "pbkv_sdk.ending", known),
             "pbkv_sdk.routing": _imports(routing, "pbkv_sdk.routing", known), "pbkv_sdk.context": set()}
    assert graph["pbkv_sdk.ending"] == {"pbkv_sdk.routing"} and graph["pbkv_sdk.routing"] == {"pbkv_sdk.ending"}
    assert _cycles(graph) == [["pbkv_sdk.ending", "pbkv_sdk.routing"]]
