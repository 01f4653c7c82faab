"""Import graphs of a package read with ``ast`` (nothing is imported), and their cycles.

Shared by the import-circle checks (``tests/contracts/test_engine_room.py`` for the engine core,
``tests/sdk/test_import_cycles.py`` for the SDK). Every import statement counts wherever it
stands, at module level or inside a function (a deferred import is how a cycle hides);
``from a import b`` counts ``a`` and, where it is a module, ``a.b``.
"""

from __future__ import annotations

import ast
from pathlib import Path

__all__ = ["package_modules", "module_imports", "import_graph", "cycles"]


def package_modules(directory: Path, root: Path | None = None) -> dict[str, tuple[Path, bool]]:
    """Dotted name -> (path, is a package) of every module under package ``directory``, named from
    the import root ``root`` (default ``directory.parent``: ``pbkv_sdk/routing.py`` is
    ``pbkv_sdk.routing``)."""
    root = directory.parent if root is None else root
    found = {}
    for path in sorted(directory.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        package = parts[-1] == "__init__"
        if package:
            parts.pop()
        found[".".join(parts)] = (path, package)
    return found


def _is_type_checking(node: ast.If) -> bool:
    """``if TYPE_CHECKING:`` or ``if typing.TYPE_CHECKING:`` (not ``if not TYPE_CHECKING:``)."""
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def module_imports(path: Path, module: str, is_package: bool, known: set[str], *, type_checking: bool,
                   ancestors: bool = True) -> set[str]:
    """The modules of ``known`` that ``module`` (source at ``path``) imports, itself left out.

    Args:
        type_checking: count imports under ``if TYPE_CHECKING:`` too (a cycle there is still two
            modules that each need the other to be understood); False counts only imports that
            can run (the ``else`` branch of such an ``if`` still counts).
        ancestors: count the module's own parent packages (False: Python runs a package's
            ``__init__`` before its submodules anyway, and it may re-export them).
    """
    package = module.split(".") if is_package else module.split(".")[:-1]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if not type_checking and isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)  # submodules named in the list
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    skip = {module}
    if not ancestors:
        skip |= {module.rsplit(".", i)[0] for i in range(1, module.count(".") + 1)}
    return {m for m in found if m in known and m not in skip}


def import_graph(modules: dict[str, tuple[Path, bool]], *, type_checking: bool,
                 ancestors: bool = True) -> dict[str, set[str]]:
    """Module -> modules of ``modules`` it imports (:func:`module_imports` for each)."""
    known = set(modules)
    return {name: module_imports(path, name, is_package, known, type_checking=type_checking, ancestors=ancestors)
            for name, (path, is_package) in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted, in the
    order their search ends."""
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
