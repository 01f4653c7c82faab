"""The layer rule: no module imports a package of its own layer or of a layer above it.

:data:`LAYERS` is the one definition of the layer order (``docs/architecture.md``, "Packages and
import rules", says the same in words). Every module of our packages is parsed (``ast``: import
statements anywhere, also inside functions and ``TYPE_CHECKING`` blocks, relative ones resolved);
an import of another group is allowed only when that group sits in a lower layer. Two groups of
the same layer are peers and never import each other (the simulator and the HTTP server both
price work with ``pbkv_server.hardware``; neither imports the other). Importing inside one's own
group is free. A module outside every group (a loose file at the top of ``pbkv_server/``) fails.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: The layers, bottom first. A group may import groups of lower layers only.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("pbkv_contract",),                                    # protocol, trace format, block hashing (stdlib only)
    ("pbkv_server.engine", "pbkv_train", "pbkv_sdk"),     # engine core; training package; client SDK
    ("pbkv_server.hardware", "pbkv_server.predictors", "pbkv_server.scenarios"),
    ("pbkv_server.sim", "pbkv_server.http", "pbkv_server.backends"),
    ("pbkv_server.loadgen",),                              # drives a live server over HTTP
    ("pbkv_server.cli",),                                  # pbkv-server, pbkv-bench
    ("pbkv_server.testing",),                              # harnesses for tests and benchmarks
    ("examples",),                                         # the apps (run from a checkout, not installed)
)

#: Groups that only the listed groups may import, whatever their layer: the serving side never
#: loads the client SDK (``test_import_boundaries.py`` checks it at run time too).
IMPORTED_ONLY_BY: dict[str, tuple[str, ...]] = {"pbkv_sdk": ("examples",)}

#: Upward imports that exist today, each with why it is left and where it goes. The test fails
#: when one disappears too, so the list cannot go stale.
KNOWN_UPWARD: dict[tuple[str, str], str] = {}

TIER = {group: tier for tier, groups in enumerate(LAYERS) for group in groups}
PACKAGES = sorted({group.split(".")[0] for group in TIER})


def group_of(module: str) -> str | None:
    """The group of a dotted module name (longest matching group), ``None`` if it has none."""
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in TIER:
            return ".".join(parts[:end])
    return None


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    return {module_name(path): path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))}


def imported_modules(source: str, module: str, is_package: bool, known: set[str]) -> list[tuple[int, str]]:
    """``(line, module)`` for every import in ``source``, relative ones resolved against ``module``.

    ``from a.b import c`` yields ``a.b`` and, when ``a.b.c`` is a module in ``known``, ``a.b.c``
    too (``from pbkv_server import cli`` imports the command-line package). A module of ours named
    by a whole string counts as imported, wherever the string stands: handed to a call
    (``importlib.import_module("a.b")``, an entry-point-like ``run("a.b:app")``) or kept in a table
    that something else imports from later (``{"pbkv-server": "a.b:app"}``). Issue 32: the
    console-script launcher ``pbkv_contract/extras.py`` once named the CLIs in both ways, unseen by
    this rule. A bare package name (``"pbkv_server"``) is a word, not a module reference.
    """
    package = module.split(".") if is_package else module.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.append((node.lineno, target))
            found += [(node.lineno, f"{target}.{alias.name}") for alias in node.names
                      if f"{target}.{alias.name}" in known]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            named = node.value.partition(":")[0]
            if "." in named and named.split(".")[0] in PACKAGES and named in known:  # not a bare word
                found.append((node.lineno, named))
    return found


def violations(modules: dict[str, Path], sources: dict[str, str] | None = None,
               known: set[str] | None = None) -> list[tuple[str, str, str]]:
    """``(importer, imported, why)`` for every import of ``modules`` that breaks the rule.

    ``sources`` replaces the files' text (probe modules); ``known`` is every module name (default:
    those of ``modules``), to tell ``from package import submodule`` from an attribute import.
    """
    known = set(modules) if known is None else known
    found = []
    for module, path in modules.items():
        source = sources[module] if sources else path.read_text(encoding="utf-8")
        mine = group_of(module)
        if mine is None:
            continue  # a module outside every group: test_every_module_belongs_to_a_layer says so
        for line, target in imported_modules(source, module, path.name == "__init__.py", known):
            theirs = group_of(target)
            if theirs is None or theirs == mine or target.split(".")[0] not in PACKAGES:
                continue
            where = f"{path.relative_to(ROOT) if path.is_absolute() else path}:{line}"
            allowed = IMPORTED_ONLY_BY.get(theirs)
            if allowed is not None and mine not in allowed:
                found.append((module, target, f"{where}: {theirs} is imported only by {', '.join(allowed)}"))
            elif TIER[theirs] >= TIER[mine]:
                kind = "a peer" if TIER[theirs] == TIER[mine] else "a layer above"
                found.append((module, target, f"{where}: {mine} (layer {TIER[mine]}) imports {kind}, {theirs} "
                                              f"(layer {TIER[theirs]})"))
    return found


def test_every_module_belongs_to_a_layer():
    loose = [f"{path.relative_to(ROOT)}" for module, path in all_modules().items()
             if group_of(module) is None and module not in PACKAGES]
    assert not loose, "modules outside every layer (put them in a package of LAYERS):\n" + "\n".join(loose)


def test_every_group_of_the_rule_exists():
    missing = [group for group in TIER if not (ROOT / group.replace(".", "/")).is_dir()]
    assert not missing, f"LAYERS names folders that do not exist: {missing}"


def test_no_module_imports_its_layer_or_one_above():
    found = violations(all_modules())
    new = [why for importer, target, why in found if (importer, target) not in KNOWN_UPWARD]
    assert not new, "imports against the layer order (docs/architecture.md, \"Packages and import rules\"):\n" + "\n".join(new)


def test_the_known_upward_imports_still_exist():
    found = {(importer, target) for importer, target, _ in violations(all_modules())}
    gone = [pair for pair in KNOWN_UPWARD if pair not in found]
    assert not gone, f"remove these from KNOWN_UPWARD, they no longer occur: {gone}"


@pytest.mark.parametrize(("module", "source", "expected"), [
    # an engine module reaching up to the command line: absolute, from-parent and lazy forms
    ("pbkv_server.engine.probe", "from pbkv_server.cli.server import app\n", ["pbkv_server.cli.server"]),
    ("pbkv_server.engine.probe", "from pbkv_server import cli\n", ["pbkv_server.cli"]),
    ("pbkv_server.engine.probe", "def f():\n    import pbkv_server.sim.simulator\n", ["pbkv_server.sim.simulator"]),
    # peers: the HTTP server may not import the simulator (relative import resolved)
    ("pbkv_server.http.probe", "from ..sim import simulator\n", ["pbkv_server.sim", "pbkv_server.sim.simulator"]),
    # the serving side never loads the SDK, though the SDK's layer is lower
    ("pbkv_server.http.probe", "import pbkv_sdk\n", ["pbkv_sdk"]),
    # a module named by a string handed to a call (a launcher, importlib), as the console scripts once were
    ("pbkv_contract.probe", "run('pbkv-server', 'pbkv_server.cli.server:app', 'server')\n", ["pbkv_server.cli.server"]),
    ("pbkv_server.engine.probe", "import importlib\nimportlib.import_module('pbkv_server.sim.simulator')\n",
     ["pbkv_server.sim.simulator"]),
    # ... or kept in a table that a launcher reads later (the old extras.py's form)
    ("pbkv_contract.probe", "CLIS = {'pbkv-bench': ('pbkv_server.cli.bench:app', 'server')}\n",
     ["pbkv_server.cli.bench"]),
    ("pbkv_contract.probe", "def cli():\n    return 'pbkv_train.cli'\n", ["pbkv_train.cli"]),
    # allowed: downward, inside one's own group, third-party
    ("pbkv_server.http.probe", "from pbkv_server.hardware.profiles import get_profile\nfrom . import config\n"
                               "import numpy\n", []),
])
def test_the_rule_catches_an_upward_import(module, source, expected):
    # Guards against a check that cannot fail: a probe module with a known import is judged.
    probe = {module: Path(module.replace(".", "/") + ".py")}
    found = [target for _, target, _ in violations(probe, {module: source}, set(all_modules()) | set(probe))]
    assert found == expected


def test_the_old_console_script_launcher_fails_the_rule():
    # pbkv_contract/extras.py before issue 32's fix: its table and its calls named the CLIs by
    # string. The rule must see both forms; today's extras.py (imports in the launchers next to
    # the CLIs) names no module of ours.
    old = ("CLIS = {'pbkv-server': 'pbkv_server.cli.server:app'}\n"
           "def pbkv_bench():\n    return run('pbkv-bench', 'pbkv_server.cli.bench:app', 'server')\n")
    probe = {"pbkv_contract.extras": Path("pbkv_contract/extras.py")}
    found = [target for _, target, _ in violations(probe, {"pbkv_contract.extras": old}, set(all_modules()))]
    assert found == ["pbkv_server.cli.server", "pbkv_server.cli.bench"]
    now = (ROOT / "pbkv_contract" / "extras.py").read_text(encoding="utf-8")
    ours = [m for _, m in imported_modules(now, "pbkv_contract.extras", False, set(all_modules()))
            if m.split(".")[0] in PACKAGES]
    assert ours == []
