"""Package boundaries: the contract stands alone, and the serving side never loads the client SDK.

``pbkv_contract`` (hint protocol, block hashing, features, trace format, prediction interface)
uses the standard library only; ``pbkv_server`` and ``predictor`` sit on it and never import
``pbkv_sdk`` (whose package import loads httpx stamping, context variables and end signals).
Checked twice: statically over every module's import statements, and at run time by importing
the server's entry modules in a fresh interpreter and looking at ``sys.modules``.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _imports(path: Path) -> list[tuple[int, str]]:
    """``(line, absolute module name)`` of every import in ``path`` (relative imports skipped)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


def _modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def test_serving_side_and_predictor_never_import_the_sdk():
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: imports {name}"
        for package in ("pbkv_server", "predictor", "pbkv_contract")
        for path in _modules(package)
        for line, name in _imports(path)
        if name == "pbkv_sdk" or name.startswith("pbkv_sdk.")
    ]
    assert not offenders, "\n".join(offenders)


def test_contract_uses_the_standard_library_only():
    stdlib = set(sys.stdlib_module_names)
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: imports {name}"
        for path in _modules("pbkv_contract")
        for line, name in _imports(path)
        if name.split(".")[0] not in stdlib and name.split(".")[0] != "pbkv_contract"
    ]
    assert not offenders, "\n".join(offenders)


@pytest.mark.slow
def test_importing_the_server_loads_no_sdk_module():
    code = (
        "import sys\n"
        "import pbkv_server.engine, pbkv_server.sim.simulator, pbkv_server.http.app, pbkv_server.cli.bench\n"
        "import pbkv_server.cli.server, pbkv_server.predictors.factory, pbkv_train.serving\n"
        "print(sorted(m for m in sys.modules if m == 'pbkv_sdk' or m.startswith('pbkv_sdk.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_the_static_check_sees_an_sdk_import(tmp_path):
    # The scan itself must catch both import forms (guards against a check that cannot fail).
    probe = tmp_path / "probe.py"
    probe.write_text("import pbkv_sdk.stamping\nfrom pbkv_sdk.context import workflow\nfrom . import x\n")
    assert [name for _, name in _imports(probe)] == ["pbkv_sdk.stamping", "pbkv_sdk.context"]


def test_the_server_cli_loads_no_sim_http_stack_before_it_serves():
    # `pbkv-server --engine sglang` runs in SGLang's own environment, which has no httptools:
    # the CLI module may read the HTTP config, not the sim server's protocol and app.
    code = (
        "import sys\n"
        "import pbkv_server.cli.server\n"
        "print(sorted(m for m in sys.modules if m in ('httptools', 'pbkv_server.http.protocol', 'pbkv_server.http.app')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_the_engine_dataclasses_load_no_policy_and_no_cache():
    # A backend or tool that needs EngineConfig or EngineRequest must not pay for every policy
    # module (and their registration) on import; the package names load on first use.
    code = (
        "import sys\n"
        "import pbkv_server.engine.types\n"
        "print(sorted(m for m in sys.modules if m.startswith(('pbkv_server.engine.policies', 'pbkv_server.engine.cache'))))\n"
        "from pbkv_server.engine import PrefixCache, make_policy\n"
        "print(type(make_policy('lru', None)).__name__, PrefixCache.__module__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.split("\n")[:2] == ["[]", "LRUPolicy pbkv_server.engine.cache"], out.stdout + out.stderr
