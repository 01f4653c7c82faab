"""The engine core's modules import each other without a circle (issue 32).

Policies rank and value nodes; the cache and the engine drive them. So no module under
``pbkv_server/engine/policies`` imports the cache or the prefetch driver, and the import graph of
``pbkv_server/engine`` has no cycle, counting imports made only for type checking too (a cycle
there is still two modules that each need the other to be understood). Modules are parsed, not
imported (``ast``), so the check costs no import time.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "pbkv_server" / "engine"
PACKAGE = "pbkv_server.engine"


def engine_modules() -> dict[str, tuple[Path, bool]]:
    """Dotted name -> (path, is a package) of every module under ``pbkv_server/engine``."""
    found = {}
    for path in sorted(ENGINE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        package = parts[-1] == "__init__"
        if package:
            parts.pop()
        found[".".join(parts)] = (path, package)
    return found


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    inside = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            inside |= {id(n) for n in ast.walk(node)}
    return inside


def import_graph(modules: dict[str, tuple[Path, bool]], type_checking: bool) -> dict[str, set[str]]:
    """Module -> engine modules it imports (``from a import b`` counts ``a`` and, if a module,
    ``a.b``); ``type_checking=False`` leaves out imports under ``if TYPE_CHECKING:``."""
    graph = {}
    for name, (path, is_package) in modules.items():
        tree = ast.parse(path.read_text())
        skip = set() if type_checking else _type_checking_nodes(tree)
        package = name.split(".") if is_package else name.split(".")[:-1]
        out = set()
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.ImportFrom):
                base = package[:len(package) - node.level + 1] if node.level else []
                target = ".".join(base + ([node.module] if node.module else []))
                out |= {t for t in [target, *(f"{target}.{a.name}" for a in node.names)] if t in modules}
            elif isinstance(node, ast.Import):
                out |= {a.name for a in node.names if a.name in modules}
        out.discard(name)
        graph[name] = out
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
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
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_policy_module_imports_the_cache_or_the_prefetch_driver():
    modules = engine_modules()
    graph = import_graph(modules, type_checking=False)
    banned = {f"{PACKAGE}.cache", f"{PACKAGE}.prefetch"}
    offenders = {name: sorted(graph[name] & banned) for name in graph
                 if name.startswith(f"{PACKAGE}.policies") and graph[name] & banned}
    assert offenders == {}


def test_the_engine_core_has_no_import_circle():
    modules = engine_modules()
    assert cycles(import_graph(modules, type_checking=True)) == []


def test_the_cycle_finder_finds_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
