"""Replay figures stay exactly what the recorded fingerprint says.

``tests/server/sim/fixtures/replay_fingerprint.json`` holds the figures of every policy on a fixed
synthetic trace (oracle and markov predictors, two capacities), recorded with
``scripts/replay_fingerprint.py record FIXTURE --workflows 60`` (every registered replay policy). A refactor must
leave them identical; a deliberate behaviour change re-records the fixture in the same commit and
says why in its message.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
FIXTURE = Path(__file__).parent / "fixtures" / "replay_fingerprint.json"
POLICIES = None  # every registered replay policy: a new policy is covered as soon as it is registered


def _script():
    spec = importlib.util.spec_from_file_location("replay_fingerprint", ROOT / "scripts" / "replay_fingerprint.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_replay_figures_equal_the_recorded_fingerprint(tmp_path, capsys):
    fp = _script()
    out = tmp_path / "now.json"
    assert fp.record(out, [], POLICIES, workflows=60) == 0
    status = fp.compare(FIXTURE, out)
    report = capsys.readouterr().out
    assert status == 0, f"replay figures changed (re-record the fixture only for a deliberate change):\n{report}"


def test_compare_reports_a_changed_figure(tmp_path, capsys):
    fp = _script()
    data = json.loads(FIXTURE.read_text())
    case = next(iter(data))
    data[case]["lru"]["hit_rate"] += 1e-12
    changed = tmp_path / "changed.json"
    changed.write_text(json.dumps(data))
    assert fp.compare(FIXTURE, changed) == 1
    assert f"/{case}/lru/hit_rate" in capsys.readouterr().out
