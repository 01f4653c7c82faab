"""The test tree's layout (``scripts/check_test_names.py``): test folders are packages and no test
file name repeats its folder. A newcomer's ``tests/server/sim/test_sim_x.py`` fails here."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("check_test_names", ROOT / "scripts" / "check_test_names.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_repository_test_tree_passes_the_check():
    assert _script().problems(ROOT / "tests") == []


def test_a_prefixed_name_and_a_folder_without_init_are_each_reported(tmp_path, capsys):
    check = _script()
    tests = tmp_path / "tests"
    for folder in ("server/sim", "server/scenarios", "sdk"):
        (tests / folder).mkdir(parents=True)
    for init in ("__init__.py", "server/__init__.py", "server/sim/__init__.py", "server/scenarios/__init__.py"):
        (tests / init).write_text("")
    for name in ("server/sim/test_sim_cluster.py", "server/sim/test_server_x.py", "server/sim/test_simulator.py",
                 "server/scenarios/test_scenario_tool.py", "server/scenarios/test_tool.py", "sdk/test_core.py"):
        (tests / name).write_text("")
    assert check.main([str(tests)]) == 1
    assert capsys.readouterr().out.splitlines() == [
        f"{tests / 'sdk'}: no __init__.py (test folders are packages, so file names may repeat)",
        f"{tests / 'server/scenarios/test_scenario_tool.py'}: name repeats its folder 'scenarios'; call it test_tool.py",
        f"{tests / 'server/sim/test_server_x.py'}: name repeats its folder 'server'; call it test_x.py",
        f"{tests / 'server/sim/test_sim_cluster.py'}: name repeats its folder 'sim'; call it test_cluster.py",
    ]
    # fixed, the same tree passes (test_simulator.py starts with "test_sim" but not "test_sim_")
    (tests / "sdk/__init__.py").write_text("")
    for old, new in (("server/scenarios/test_scenario_tool.py", "server/scenarios/test_tool2.py"),
                     ("server/sim/test_server_x.py", "server/sim/test_x.py"),
                     ("server/sim/test_sim_cluster.py", "server/sim/test_cluster.py")):
        (tests / old).rename(tests / new)
    assert check.main([str(tests)]) == 0
