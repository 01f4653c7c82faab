"""No module of ``pbkv_sdk`` imports, directly or through others, a module that imports it back.

Read with ``ast`` (nothing is imported), counting every import statement that can run: at module
level and inside functions (a deferred import is how a cycle hides), but not under
``if TYPE_CHECKING:`` (never runs). ``from pbkv_sdk import routing`` counts as importing the
module ``pbkv_sdk.routing``; a package's ``__init__`` is not counted as imported by its own
submodules (Python runs it first anyway, and it may re-export them).
"""

from __future__ import annotations

from pathlib import Path

import pbkv_sdk
from tests.import_graph import cycles, import_graph, module_imports, package_modules

ROOT = Path(pbkv_sdk.__file__).parent


def _imports(path: Path, module: str, known: set[str]) -> set[str]:
    """The pbkv_sdk modules that plain module ``module`` (at ``path``) may import."""
    return module_imports(path, module, False, known, type_checking=False, ancestors=False)


def test_no_module_of_pbkv_sdk_imports_in_a_cycle():
    graph = import_graph(package_modules(ROOT), type_checking=False, ancestors=False)
    assert "pbkv_sdk.delivery" in graph["pbkv_sdk.ending"] and "pbkv_sdk.delivery" in graph["pbkv_sdk.routing"]
    assert cycles(graph) == []


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
    assert cycles(graph) == [["pbkv_sdk.ending", "pbkv_sdk.routing"]]
