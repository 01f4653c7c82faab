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


def _no_replay(*args, **kwargs):
    pytest.fail(f"a replay started: {args}")


@pytest.fixture
def fp_offline(monkeypatch):
    """The script with its replays replaced by a failure: a refusal must come before any."""
    fp = _script()
    monkeypatch.setattr(fp, "_bench", _no_replay)
    monkeypatch.setattr(fp, "_replay", _no_replay)
    return fp


def test_record_refuses_an_out_it_must_not_replace_before_any_replay(tmp_path, fp_offline, capsys):
    """``record OUT`` overwrote whatever OUT was (a trace, a plot, another command's result) and
    replaced a fifo; each is now refused in one line before any replay, and left as it was."""
    import os

    from pbkv_contract.trace import TRACE_VERSION

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    folder = tmp_path / "folder"
    folder.mkdir()
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "nowhere.json")
    a_file = tmp_path / "a_file"
    a_file.write_text("keep\n")
    trace = tmp_path / "trace.jsonl"
    trace.write_text(json.dumps({"type": "request", "v": TRACE_VERSION}) + "\n")
    png = tmp_path / "plot.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 8)
    other = tmp_path / "other.json"
    other.write_text('{"a": 1}\n')
    replay_result = tmp_path / "replay.json"  # a replay --json result: objects, but no fingerprint
    replay_result.write_text('{"lru": {"hit_rate": 0.5}}\n')
    before = {p: p.read_bytes() for p in (a_file, trace, png, other, replay_result)}
    not_ours = "holds JSON that is not an earlier result of this command; writing the results would destroy it " \
               "(give another path)"
    cases = (
        (fifo, "is a named pipe (fifo), not a regular file; writing it would replace it (give a regular file path)"),
        (folder, "is a directory"),
        (dangling, f"is a symbolic link to a missing file ({tmp_path / 'nowhere.json'}); give the file itself"),
        (a_file / "out.json", f"{a_file} is not a directory"),
        (trace, "is a PBKV trace; writing it would destroy it (give another path)"),
        (png, "is a file that is not JSON; writing the results would destroy it (give another path)"),
        (other, not_ours),
        (replay_result, not_ours),
    )
    for out, problem in cases:
        assert fp_offline.main(["record", str(out)]) == 2, out
        assert capsys.readouterr() == ("", f"error: {out}: {problem}\n"), out
    assert {p: p.read_bytes() for p in before} == before
    assert fifo.is_fifo() and folder.is_dir() and not any(folder.iterdir()) and dangling.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["fifo", "folder", "dangling.json", "a_file", "trace.jsonl", "plot.png", "other.json", "replay.json"])


def test_record_replaces_an_empty_file_or_an_earlier_fingerprint_whole(tmp_path, monkeypatch, capsys):
    fp = _script()
    monkeypatch.setattr(fp, "_bench", lambda *args: None)
    monkeypatch.setattr(fp, "_replay", lambda *args: {"lru": {"hit_rate": 0.25}})
    written = []
    real_replace = fp.replace_file
    monkeypatch.setattr(fp, "replace_file", lambda path, write: (written.append(Path(path)), real_replace(path, write)))
    want = {f"synth-codegen/{pred}/device{device}": {"lru": {"hit_rate": 0.25}}
            for pred in ("oracle", "markov", "context") for device in (120000, 200000)}
    empty = tmp_path / "empty.json"
    empty.write_text("")
    earlier = tmp_path / "earlier.json"
    earlier.write_text(FIXTURE.read_text())
    for out in (empty, earlier):
        assert fp.main(["record", str(out)]) == 0
        assert json.loads(out.read_text()) == want
    assert written == [empty, earlier]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["earlier.json", "empty.json"]  # no .partial- left


def test_compare_and_add_refuse_json_that_is_not_a_fingerprint_in_one_line(tmp_path, fp_offline, capsys):
    """``{"a": 1}`` gave a TypeError traceback in compare and add; now one line, exit 2, file kept."""
    import os

    plain = tmp_path / "plain.json"
    plain.write_text('{"a": 1}\n')
    empty_obj = tmp_path / "empty_obj.json"
    empty_obj.write_text("{}")
    no_figures = tmp_path / "no_figures.json"
    no_figures.write_text('{"synth-codegen/oracle/device120000": {"lru": [1]}}')
    strange_case = tmp_path / "strange_case.json"
    strange_case.write_text('{"synth-other/oracle/device1": {"lru": {"hit_rate": 1}}}')
    no_lru = tmp_path / "no_lru.json"
    no_lru.write_text('{"synth-codegen/oracle/device120000": {"pbkv": {"hit_rate": 1}}}')
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    folder = tmp_path / "folder"
    folder.mkdir()
    before = {p: p.read_bytes() for p in (plain, empty_obj, no_figures, strange_case, no_lru)}

    def not_fp(path, why):
        return f"error: fingerprint {path} is not a replay fingerprint ({why})\n"

    cases = (
        (["compare", str(FIXTURE), str(plain)], not_fp(plain, "case 'a' is not an object of policies")),
        (["compare", str(plain), str(FIXTURE)], not_fp(plain, "case 'a' is not an object of policies")),
        (["compare", str(empty_obj), str(FIXTURE)], not_fp(empty_obj, "holds no case")),
        (["compare", str(FIXTURE), str(no_figures)],
         not_fp(no_figures, "case 'synth-codegen/oracle/device120000' policy 'lru' is not an object of figures")),
        (["add", str(plain), "--policies", "pbkv"], not_fp(plain, "case 'a' is not an object of policies")),
        (["add", str(strange_case), "--policies", "pbkv"],
         f"error: {strange_case} holds case synth-other/oracle/device1, which record does not make; nothing written\n"),
        (["add", str(no_lru), "--policies", "lae"],
         f"error: {no_lru} holds no lru on case synth-codegen/oracle/device120000 (add checks the cases against it); "
         "nothing written\n"),
        (["add", str(fifo), "--policies", "pbkv"],
         f"error: {fifo}: is a named pipe (fifo), not a regular file; writing it would replace it "
         "(give a regular file path)\n"),
        (["add", str(folder), "--policies", "pbkv"], f"error: {folder}: is a directory\n"),
    )
    for args, line in cases:
        assert fp_offline.main(args) == 2, args
        assert capsys.readouterr() == ("", line), args
    assert {p: p.read_bytes() for p in before} == before
    assert fifo.is_fifo() and not any(folder.iterdir())


def test_compare_of_json_that_is_not_a_fingerprint_has_no_traceback(tmp_path):
    import subprocess

    plain = tmp_path / "plain.json"
    plain.write_text('{"a": 1}\n')
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "replay_fingerprint.py"), "compare", str(plain),
                           str(FIXTURE)], capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stdout, proc.stderr) == (
        2, "", f"error: fingerprint {plain} is not a replay fingerprint (case 'a' is not an object of policies)\n")


def test_add_writes_the_fixture_whole_through_replace_file(tmp_path, monkeypatch, capsys):
    """add writes FIXTURE as record does (written aside, renamed), with the new policy's figures."""
    fp = _script()
    cases = {f"synth-codegen/{pred}/device{device}": {"lru": {"hit_rate": 0.5}}
             for pred in ("oracle", "markov", "context") for device in (120000, 200000)}
    fixture = tmp_path / "fp.json"
    fixture.write_text(json.dumps(cases))
    monkeypatch.setattr(fp, "_bench", lambda *args: None)
    monkeypatch.setattr(fp, "_replay", lambda *args: {"lru": {"hit_rate": 0.5}, "new": {"hit_rate": 0.75}})
    written = []
    real_replace = fp.replace_file
    monkeypatch.setattr(fp, "replace_file", lambda path, write: (written.append(Path(path)), real_replace(path, write)))
    assert fp.main(["add", str(fixture), "--policies", "new"]) == 0
    assert json.loads(fixture.read_text()) == {case: {"lru": {"hit_rate": 0.5}, "new": {"hit_rate": 0.75}}
                                               for case in cases}
    assert written[-1] == fixture
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fp.json"]
