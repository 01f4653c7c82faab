"""ChatDev log import on a tiny hand-made tar.gz shaped like the real WareHouse logs."""

import calendar
import io
import tarfile

import pytest

from pbkv_sdk.importers.chatdev import import_chatdev, parse_log
from pbkv_contract.trace import InvocationRecord, WorkflowEndRecord, read_trace
from pbkv_contract.blocks import prefix_hashes
from pbkv_contract.features import request_features

CEO_SYS = "ChatDev is a software company.\nYou are Chief Executive Officer. Decide on policy."
CPO_SYS = "ChatDev is a software company.\nYou are Chief Product Officer. Own the product."
PROG_SYS = "ChatDev is a software company.\nYou are Programmer. Write code."
REV_SYS = "ChatDev is a software company.\nYou are Code Reviewer. Review code."

LOG = f"""[2023-18-09 11:05:21 INFO] **[Preprocessing]**

**ChatDev Starts** (20230918110521)

**task_prompt**: Build a BMI calculator

[2023-18-09 11:05:23 INFO] flask app.py did not start for online log
[2023-18-09 11:05:23 INFO] System: **[chatting]**

| Parameter | Value |
| --- | --- |
| **task_prompt** | Build a BMI calculator |
| **assistant_role_name** | Chief Product Officer |
| **user_role_name** | Chief Executive Officer |
| **phase_name** | DemandAnalysis |
| **chat_turn_limit** | 10 |

[2023-18-09 11:05:25 INFO] System: **[RolePlaying]**

| Parameter | Value |
| --- | --- |
| **assistant_role_name** | Chief Product Officer |
| **user_role_name** | Chief Executive Officer |

[2023-18-09 11:05:27 INFO] Chief Executive Officer: **[Start Chat]**

[{CPO_SYS}]

Decide the product modality.

[2023-18-09 11:05:29 INFO] **[OpenAI_Usage_Info Send]**
num_tokens: 440
max_tokens: 15944

[2023-18-09 11:05:33 INFO] **[OpenAI_Usage_Info Receive]**
prompt_tokens: 440
completion_tokens: 4
total_tokens: 444

[2023-18-09 11:05:35 INFO] Chief Product Officer: **Chief Product Officer<->Chief Executive Officer on : DemandAnalysis, turn 0**

[{CEO_SYS}]

<INFO> Application

[2023-18-09 11:05:37 INFO] **[Seminar Conclusion]**:

 <INFO> Application

[2023-18-09 11:07:00 INFO] System: **[chatting]**

| Parameter | Value |
| --- | --- |
| **assistant_role_name** | Code Reviewer |
| **user_role_name** | Programmer |
| **phase_name** | CodeReviewComment |

[2023-18-09 11:07:01 INFO] System: **[RolePlaying]**

| Parameter | Value |
| --- | --- |
| **assistant_role_name** | Code Reviewer |
| **user_role_name** | Programmer |

[2023-18-09 11:07:02 INFO] Programmer: **[Start Chat]**

[{REV_SYS}]

Review main.py please.

[2023-18-09 11:07:03 INFO] **[OpenAI_Usage_Info Send]**
num_tokens: 2064

[2023-18-09 11:07:18 INFO] **[OpenAI_Usage_Info Receive]**
prompt_tokens: 2064
completion_tokens: 120
total_tokens: 2184

[2023-18-09 11:07:18 INFO] **[OpenAI_Usage_Info Send]**
num_tokens: 2332

[2023-18-09 11:07:20 INFO] **[OpenAI_Usage_Info Receive]**
prompt_tokens: 2332
completion_tokens: 7
total_tokens: 2339

[2023-18-09 11:07:20 INFO] Code Reviewer: **Code Reviewer<->Programmer on : CodeReviewComment, turn 0**

[{PROG_SYS}]

Add input validation.

[2023-18-09 11:07:20 INFO] Programmer: **Code Reviewer<->Programmer on : CodeReviewComment, turn 0**

[{REV_SYS}]

<INFO> Finished

[2023-18-09 11:07:21 INFO] **[Seminar Conclusion]**:

 Add input validation.
"""

OLD_LOG = """[2023-25-06 20:10:30 INFO] AgentTech Starts (20230625201030)

[2023-25-06 20:10:32 INFO] [32m[0] AI Assistant (Chief Product Officer):

<INFO> GUI Application.
"""


def _tar(path, files: dict[str, str]) -> None:
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"chatdev/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def _t(day, month, hh, mm, ss):
    return float(calendar.timegm((2023, month, day, hh, mm, ss, 0, 0, 0)))


def test_import_turns_each_logged_call_into_an_invocation(tmp_path):
    src, out = tmp_path / "logs.tar.gz", tmp_path / "chatdev.jsonl"
    _tar(src, {"BMI_Calc_20230918110521.log": LOG})
    summary = import_chatdev(src, out)
    assert (summary.files, summary.workflows, summary.invocations) == (1, 1, 3)
    assert summary.prompt_tokens == 440 + 2064 + 2332
    recs = read_trace(out)
    inv = [r for r in recs if isinstance(r, InvocationRecord)]
    assert [r.agent for r in inv] == ["Chief Product Officer", "Code Reviewer", "Programmer"]
    assert [(r.prompt_tokens, r.completion_tokens) for r in inv] == [(440, 4), (2064, 120), (2332, 7)]
    assert [r.step for r in inv] == [0, 1, 2]
    assert {r.workflow_id for r in inv} == {"BMI_Calc_20230918110521"}
    assert {r.app for r in inv} == {"chatdev"}
    # Dates are YYYY-DD-MM in the logs; Send -> Receive gives the call's span.
    assert (inv[0].t_start, inv[0].t_end) == (_t(18, 9, 11, 5, 29), _t(18, 9, 11, 5, 33))
    assert (inv[2].t_start, inv[2].t_end) == (_t(18, 9, 11, 7, 18), _t(18, 9, 11, 7, 20))
    end = [r for r in recs if isinstance(r, WorkflowEndRecord)]
    assert len(end) == 1 and end[0].t == _t(18, 9, 11, 7, 20) and end[0].status == "completed"


def test_prefix_hashes_come_from_the_speakers_system_message_and_the_chat_so_far(tmp_path):
    src, out = tmp_path / "logs.tar.gz", tmp_path / "chatdev.jsonl"
    _tar(src, {"BMI.log": LOG})
    import_chatdev(src, out)
    inv = [r for r in read_trace(out) if isinstance(r, InvocationRecord)]
    reviewer_prompt = [
        {"role": "system", "content": REV_SYS},
        {"role": "user", "content": "Review main.py please."},
    ]
    programmer_prompt = [
        {"role": "system", "content": PROG_SYS},
        {"role": "assistant", "content": "Review main.py please."},
        {"role": "user", "content": "Add input validation."},
    ]
    assert inv[1].prefix_hashes == prefix_hashes(reviewer_prompt)
    assert inv[2].prefix_hashes == prefix_hashes(programmer_prompt)
    assert inv[2].features == request_features(programmer_prompt)
    # The product officer's first call: its own system message, then the phase prompt.
    assert inv[0].prefix_hashes == prefix_hashes([{"role": "system", "content": CPO_SYS}, {"role": "user", "content": "Decide the product modality."}])


def test_agent_key_phase_and_phase_role(tmp_path):
    src = tmp_path / "logs.tar.gz"
    _tar(src, {"BMI.log": LOG})
    import_chatdev(src, tmp_path / "a.jsonl", agent_key="phase")
    import_chatdev(src, tmp_path / "b.jsonl", agent_key="phase_role")
    agents = lambda p: [r.agent for r in read_trace(p) if isinstance(r, InvocationRecord)]  # noqa: E731
    assert agents(tmp_path / "a.jsonl") == ["DemandAnalysis", "CodeReviewComment", "CodeReviewComment"]
    assert agents(tmp_path / "b.jsonl")[2] == "CodeReviewComment:Programmer"
    with pytest.raises(ValueError, match="agent_key"):
        import_chatdev(src, tmp_path / "c.jsonl", agent_key="bogus")


def test_old_format_and_truncated_logs_are_skipped_with_their_reason(tmp_path):
    # the summary names each skipped log and why (the CLI prints one line each; the library logs
    # them at debug level only, so that a bad log is not reported twice)
    src, out = tmp_path / "logs.tar.gz", tmp_path / "chatdev.jsonl"
    cut = LOG[: LOG.index("[2023-18-09 11:07:00")]  # ends after the first phase
    _tar(src, {"a_old.log": OLD_LOG, "b_full.log": LOG, "c_cut.log": cut, "d_empty.log": ""})
    summary = import_chatdev(src, out)
    assert summary.files == 4 and summary.workflows == 2
    assert sorted(name for name, _ in summary.skipped) == ["a_old.log", "d_empty.log"]
    assert all(reason for _, reason in summary.skipped)
    per_wf = {}
    for r in read_trace(out):
        if isinstance(r, InvocationRecord):
            per_wf[r.workflow_id] = per_wf.get(r.workflow_id, 0) + 1
    assert per_wf == {"b_full": 3, "c_cut": 1}


def test_damaged_archive_keeps_what_was_read_and_does_not_crash(tmp_path):
    src, out = tmp_path / "logs.tar.gz", tmp_path / "chatdev.jsonl"
    _tar(src, {"a.log": LOG, "b.log": LOG * 40})
    data = src.read_bytes()
    src.write_bytes(data[: len(data) - 200])
    summary = import_chatdev(src, out)
    # the damage is the import's (a partial import), not a skipped log's
    assert summary.skipped == [] and "b.log and any later logs not read" in summary.damaged
    assert summary.workflows == 1
    assert {r.workflow_id for r in read_trace(out)} == {"a"}


def test_parse_log_of_text_without_calls_is_empty():
    assert parse_log("") == []
    assert parse_log(OLD_LOG) == []


def test_an_output_path_that_is_a_directory_is_refused_before_reading(tmp_path, monkeypatch):
    src, out = tmp_path / "logs.tar.gz", tmp_path / "outdir"
    _tar(src, {"a.log": LOG})
    out.mkdir()
    read = []
    monkeypatch.setattr("pbkv_sdk.importers.chatdev.parse_log", lambda text: read.append(text) or [])
    with pytest.raises(IsADirectoryError, match="is a directory"):
        import_chatdev(src, out)
    assert read == [] and not (tmp_path / "outdir.partial").exists()


@pytest.mark.parametrize("error", [OSError(28, "No space left on device"), KeyboardInterrupt()])
def test_a_failure_mid_import_removes_the_partial_file_and_keeps_the_old_output(tmp_path, monkeypatch, error):
    src, out = tmp_path / "logs.tar.gz", tmp_path / "chatdev.jsonl"
    _tar(src, {"a.log": LOG})
    out.write_text("previous trace\n")

    def fail(messages):
        raise error

    monkeypatch.setattr("pbkv_sdk.importers.chatdev.request_features", fail)
    with pytest.raises(type(error)):
        import_chatdev(src, out)
    assert not (tmp_path / "chatdev.jsonl.partial").exists()
    assert out.read_text() == "previous trace\n"


def test_an_import_without_workflows_writes_nothing_and_keeps_the_old_output(tmp_path):
    src, out = tmp_path / "noise.bin", tmp_path / "chatdev.jsonl"
    src.write_bytes(bytes(range(256)) * 4)
    out.write_text("previous trace\n")
    summary = import_chatdev(src, out)
    assert (summary.files, summary.workflows, summary.invocations) == (1, 0, 0)
    assert summary.skipped == [("noise.bin", "no LLM calls with token counts (older or truncated log format)")]
    assert out.read_text() == "previous trace\n" and not (tmp_path / "chatdev.jsonl.partial").exists()
    fresh = tmp_path / "fresh.jsonl"
    assert import_chatdev(tmp_path / "noise.bin", fresh).workflows == 0 and not fresh.exists()
