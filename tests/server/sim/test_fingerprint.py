"""Replay figures stay exactly what the recorded fingerprint says.

``tests/server/sim/fixtures/replay_fingerprint.json`` holds the figures of every policy on a fixed
synthetic trace (oracle, markov and context predictors, two capacities), recorded with
``scripts/replay_fingerprint.py record FIXTURE --workflows 60``. A refactor must leave them
identical; a deliberate behaviour change re-records the fixture in the same commit and says why in
its message. The test replays the policies the fixture holds, so registering a new policy does
not break it; ``scripts/replay_fingerprint.py add FIXTURE --policies NEW --workflows 60`` adds the
new policy's figures without touching the others.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import warnings
from pathlib import Path

import pytest

from pbkv_server.engine.policies import Policy, register_policy, unregister_policy

ROOT = Path(__file__).resolve().parents[3]
FIXTURE = Path(__file__).parent / "fixtures" / "replay_fingerprint.json"
WORKFLOWS = 60  # the fixture's synthetic trace size


def _script():
    spec = importlib.util.spec_from_file_location("replay_fingerprint", ROOT / "scripts" / "replay_fingerprint.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.timeout(1800)  # 6 replays of every policy: past the 600 s hang guard on a loaded 2-core machine
def test_replay_figures_equal_the_recorded_fingerprint(tmp_path, capsys):
    fp = _script()
    out = tmp_path / "now.json"
    _warn_about_missing_policies(fp)
    recorded = fp.recorded_policies(json.loads(FIXTURE.read_text()))
    assert fp.record(out, [], ",".join(recorded), workflows=WORKFLOWS) == 0
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


def _warn_about_missing_policies(fp) -> list[str]:
    """Warn (never fail) about registered policies the fixture lacks, with the command that adds
    them; returns them sorted."""
    missing = sorted(set(fp._registered_policies()) - set(fp.recorded_policies(json.loads(FIXTURE.read_text()))))
    if missing:
        warnings.warn(f"not in the replay fingerprint: {', '.join(missing)}; add with scripts/replay_fingerprint.py "
                      f"add {FIXTURE.relative_to(ROOT)} --policies {','.join(missing)} --workflows {WORKFLOWS}")
    return missing


class _NewPolicy(Policy):
    """A policy registered after the fixture was recorded (LRU's order)."""

    summary = "fingerprint test policy"

    def priority(self, node) -> tuple:
        return (node.last_access,)


def test_a_newly_registered_policy_is_named_with_the_add_command_not_failed_on():
    """The comparison replays the fixture's policies only, so a new policy leaves it passing; the
    warning names the new policy and the command that records it."""
    fp = _script()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        before = _warn_about_missing_policies(fp)  # another policy not yet added is no failure either
    register_policy("fingerprint-new")(_NewPolicy)
    try:
        with pytest.warns(UserWarning) as caught:
            missing = _warn_about_missing_policies(fp)
        assert missing == sorted([*before, "fingerprint-new"])
        names = ",".join(missing)
        assert str(caught[0].message) == (
            f"not in the replay fingerprint: {', '.join(missing)}; add with scripts/replay_fingerprint.py add "
            f"tests/server/sim/fixtures/replay_fingerprint.json --policies {names} --workflows 60")
        assert "fingerprint-new" not in fp.recorded_policies(json.loads(FIXTURE.read_text()))
    finally:
        unregister_policy("fingerprint-new")


def test_add_refuses_a_policy_the_fixture_already_holds(tmp_path, capsys):
    fp = _script()
    copy = tmp_path / "fp.json"
    copy.write_text(FIXTURE.read_text())
    assert fp.add_policies(copy, ["lru"], WORKFLOWS) == 2
    assert "lru already in" in capsys.readouterr().err
    assert copy.read_text() == FIXTURE.read_text()


@pytest.mark.slow
def test_add_records_a_missing_policy_exactly_as_a_full_recording_does(tmp_path):
    """Drop one policy from a copy of the fixture and add it back: the copy equals the fixture."""
    fp = _script()
    data = json.loads(FIXTURE.read_text())
    dropped = "lae"
    for runs in data.values():
        del runs[dropped]
    copy = tmp_path / "fp.json"
    copy.write_text(json.dumps(data))
    assert fp.add_policies(copy, [dropped], WORKFLOWS) == 0
    assert json.loads(copy.read_text()) == json.loads(FIXTURE.read_text())


def test_replace_refuses_to_re_record_the_baseline(tmp_path, capsys):
    fp = _script()
    copy = tmp_path / "fp.json"
    copy.write_text(FIXTURE.read_text())
    assert fp.add_policies(copy, ["lru"], WORKFLOWS, replace=True) == 2
    assert "cannot re-record lru" in capsys.readouterr().err
    assert copy.read_text() == FIXTURE.read_text()


@pytest.mark.slow
def test_replace_re_records_only_the_named_policy(tmp_path):
    """Spoil one policy's figures in a copy; --replace restores exactly them and nothing else."""
    fp = _script()
    data = json.loads(FIXTURE.read_text())
    for runs in data.values():
        runs["lae"]["hit_rate"] = -1.0
        runs["he"]["hit_rate"] = -2.0  # not named: must stay spoiled
    copy = tmp_path / "fp.json"
    copy.write_text(json.dumps(data))
    assert fp.add_policies(copy, ["lae"], WORKFLOWS, replace=True) == 0
    got, want = json.loads(copy.read_text()), json.loads(FIXTURE.read_text())
    for case, runs in got.items():
        assert runs["lae"] == want[case]["lae"]
        assert runs["he"]["hit_rate"] == -2.0


def test_bad_input_is_one_error_line_and_exit_status_2(tmp_path):
    """A missing file, a file that is not JSON, a fingerprint that is not a JSON object or a bad
    option ended in a traceback or argparse's usage block: one ``error:`` line, exit status 2."""
    import subprocess

    missing = tmp_path / "missing.json"
    bad = tmp_path / "bad.json"
    bad.write_text("{not json\n")
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]\n")
    (tmp_path / "partial.json").write_text('{"example": "hover"}')
    script = str(ROOT / "scripts" / "replay_fingerprint.py")
    cases = (
        (["compare", str(missing), str(FIXTURE)],
         f"error: cannot read fingerprint {missing}: No such file or directory"),
        (["compare", str(FIXTURE), str(bad)],
         f"error: fingerprint {bad} is not JSON (Expecting property name enclosed in double quotes: "
         "line 1 column 2 (char 1))"),
        (["add", str(listed), "--policies", "lru"], f"error: fingerprint {listed} holds JSON that is not an object (list)"),
        (["add", str(bad), "--policies", "lru"], f"error: fingerprint {bad} is not JSON (Expecting property name "
                                                  "enclosed in double quotes: line 1 column 2 (char 1))"),
        (["record", str(tmp_path / "out.json"), "--example", str(missing)],
         f"error: cannot read example summary {missing}: No such file or directory"),
        (["record", str(tmp_path / "out.json"), "--example", str(listed.with_name("partial.json"))],
         f"error: example summary {tmp_path / 'partial.json'} is not an example run's --json summary (no policies, "
         "traces, model, replay_concurrency, profile, device_tokens, host_tokens)"),
        (["compare", str(FIXTURE)], "error: the following arguments are required: after"),
    )
    for args, line in cases:
        proc = subprocess.run([sys.executable, script, *args], capture_output=True, text=True)
        assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", line + "\n"), args
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.json", "list.json", "partial.json"]
