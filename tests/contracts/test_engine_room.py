"""The engine core's modules import each other without a circle (issue 32).

Policies rank and value nodes; the cache and the engine drive them. So no module under
``pbkv_server/engine/policies`` imports the cache or the prefetch driver, and the import graph of
``pbkv_server/engine`` has no cycle, counting imports made only for type checking too (a cycle
there is still two modules that each need the other to be understood). Modules are parsed, not
imported (``ast``), so the check costs no import time.
"""

from __future__ import annotations

from pathlib import Path

from tests.import_graph import cycles, import_graph, package_modules

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "pbkv_server" / "engine"
PACKAGE = "pbkv_server.engine"


def engine_modules() -> dict[str, tuple[Path, bool]]:
    """Dotted name -> (path, is a package) of every module under ``pbkv_server/engine``."""
    return package_modules(ENGINE, ROOT)


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
