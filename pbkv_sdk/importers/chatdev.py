"""Import raw ChatDev v1 execution logs (``WareHouse/**/*.log``) as v1 traces.

ChatDev runs a chain of *phases* (DemandAnalysis, Coding, CodeReviewComment, ...). Each phase is a
role-playing chat between an assistant role and a user role, and every LLM call is logged as::

    [2023-18-09 11:05:29 INFO] **[OpenAI_Usage_Info Send]**        (newer logs only)
    num_tokens: 440
    [2023-18-09 11:05:33 INFO] **[OpenAI_Usage_Info Receive]**
    prompt_tokens: 440
    completion_tokens: 4

followed, once the chat turn is complete, by one utterance per call, in call order::

    [2023-18-09 11:05:35 INFO] Chief Product Officer: **Chief Product Officer<->Chief Executive Officer on : DemandAnalysis, turn 0**
    [system message of the other role]
    <reply text>

The chat itself opens with ``System: **[chatting]**`` (phase name and roles, a Markdown table),
``System: **[RolePlaying]**`` (roles) and ``<user role>: **[Start Chat]**`` (the assistant's
system message in brackets, then the phase prompt). Note the log's dates are YYYY-DD-MM.

Each call becomes one invocation: agent = the role that produced the reply (or the phase, or
``Phase:Role``, see :data:`AGENT_KEYS`), times from the log (Send -> Receive), the real token
counts, and prefix hashes and features of the prompt rebuilt from the logged texts (the
speaker's system message, then the chat so far). Logs of the older AgentTech format and logs
without token counts are skipped and listed, as are unreadable files; a damaged or truncated
archive keeps the logs read before the damage (a partial import); nothing is edited.
"""

from __future__ import annotations

import calendar
import errno
import logging
import os
import re
import tarfile
import zlib
from collections import Counter
from dataclasses import dataclass, field
from typing import IO, Iterator

from pbkv_contract.files import special_file, write_target
from pbkv_contract.trace import InvocationRecord, TraceWriter, WorkflowEndRecord
from pbkv_contract.blocks import DEFAULT_BLOCK_CHARS, prefix_hashes
from pbkv_contract.features import request_features
from pbkv_contract.hints import workflow_id_from
from pbkv_sdk.importers import archive_problem

log = logging.getLogger(__name__)

APP_NAME = "chatdev"
#: How an invocation's agent name is formed: the replying role, the phase, or ``Phase:Role``.
AGENT_KEYS = ("role", "phase", "phase_role")
#: Phase name of role-plays that run outside the phase chain (ChatDev's task-prompt self-improvement).
UNPHASED = "TaskPromptImprovement"
#: Files read from a directory or archive.
LOG_SUFFIX = ".log"

_ENTRY_RE = re.compile(r"^\[(\d{4})-(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2}) INFO\] ?(.*)$")
_UTTER_RE = re.compile(r"^(?P<speaker>[^:*\[\]]+?): \*\*(?P<a>[^*]+?)<->(?P<b>[^*]+?) on : (?P<phase>[\w ]+), turn (?P<turn>\d+)\*\*\s*$")
_START_RE = re.compile(r"^(?P<role>[^:*\[\]]+?): \*\*\[Start Chat\]\*\*\s*$")
_PLAIN_RE = re.compile(r"^(?P<role>[A-Za-z][A-Za-z ]{0,60}): (?P<text>.*)$")
_ROW_RE = re.compile(r"^\| \*\*(?P<key>\w+)\*\* \| (?P<value>.*?) \|\s*$")
_NUM_RE = re.compile(r"^(prompt_tokens|completion_tokens|num_tokens): (\d+)\s*$", re.M)


@dataclass
class ImportSummary:
    """What :func:`import_chatdev` did.

    Attributes:
        files: log files found in the source.
        workflows: workflows written (one per usable log file).
        invocations: invocation records written.
        prompt_tokens: sum of the real prompt token counts written.
        skipped: ``(file name, reason)`` of every log file not imported.
        damaged: why the source archive could not be read to its end (``""``: it could): the
            trace holds only the logs before the damage (a partial import).
        agents: invocations per agent name.
    """

    files: int = 0
    workflows: int = 0
    invocations: int = 0
    prompt_tokens: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)
    damaged: str = ""
    agents: Counter = field(default_factory=Counter)


def import_chatdev(
    src_path: str | os.PathLike[str],
    out_path: str | os.PathLike[str],
    *,
    agent_key: str = "role",
    block_chars: int = DEFAULT_BLOCK_CHARS,
) -> ImportSummary:
    """Turn ChatDev logs into one v1 trace file (one workflow per log, ``app = "chatdev"``).

    Args:
        src_path: a ``.tar.gz``/``.tar`` of the logs (read in place with :mod:`tarfile`), a
            directory searched recursively for ``*.log``, or one ``.log`` file.
        out_path: trace file to write, through ``out_path + ".partial"``, which replaces it
            atomically when the import is done and is removed on any failure. When no workflow
            could be imported (``summary.workflows == 0``) nothing is written and an existing
            ``out_path`` is left as it was.
        agent_key: one of :data:`AGENT_KEYS`.
        block_chars: characters per prefix-hash block.

    Returns:
        An :class:`ImportSummary`; unusable files are listed in ``skipped`` (and logged at debug
        level); a damaged archive's reason is in ``damaged``.

    Raises:
        ValueError: unknown ``agent_key``, or ``src_path`` is named or compressed like a tar
            archive but is not a readable one.
        FileNotFoundError: ``src_path`` does not exist.
        IsADirectoryError: ``out_path`` (or its ``.partial`` file) is a directory.
        OSError: the output cannot be written, or a single ``.log`` source cannot be read.
    """
    if agent_key not in AGENT_KEYS:
        raise ValueError(f"agent_key must be one of {AGENT_KEYS}, got {agent_key!r}")
    if not os.path.exists(src_path):
        raise FileNotFoundError(errno.ENOENT, "no such file or directory", os.fspath(src_path))
    if (problem := archive_problem(src_path)) is not None:
        raise ValueError(problem)
    out = os.fspath(write_target(out_path))  # a link is written through; a device or fifo refused below
    if (kind := special_file(out)) is not None:
        raise OSError(errno.EINVAL, f"is {kind}, not a regular file; give a trace file path", out)
    tmp = out + ".partial"
    for path in (out, tmp):
        # Checked before reading anything: a directory here would only fail after the whole import.
        if os.path.isdir(path):
            raise IsADirectoryError(errno.EISDIR, "is a directory; give a trace file path", path)
    if os.path.exists(tmp):
        os.remove(tmp)
    try:
        summary = _write_trace(src_path, tmp, agent_key, block_chars)
        if summary.workflows:
            os.replace(tmp, out)
    finally:
        # Whatever happened (no workflow, an error, Ctrl-C), no half-written file stays behind.
        if os.path.exists(tmp):
            os.remove(tmp)
    return summary


def _write_trace(src_path: str | os.PathLike[str], tmp: str, agent_key: str, block_chars: int) -> ImportSummary:
    """The import proper: every usable log of ``src_path`` as one workflow in the trace ``tmp``."""
    summary = ImportSummary()
    used_ids: set[str] = set()
    with TraceWriter(tmp) as writer:
        for name, text in _iter_logs(src_path, summary):
            summary.files += 1
            try:
                calls = parse_log(text)
            except Exception as exc:  # an odd file must never stop the import
                _skip(summary, name, f"unparseable ({type(exc).__name__}: {exc})")
                continue
            if not calls:
                _skip(summary, name, "no LLM calls with token counts (older or truncated log format)")
                continue
            wid = _workflow_id(name, used_ids)
            for step, call in enumerate(calls):
                agent = {"role": call.role, "phase": call.phase, "phase_role": f"{call.phase}:{call.role}"}[agent_key]
                writer.write(
                    InvocationRecord(
                        app=APP_NAME, workflow_id=wid, step=step, agent=agent,
                        t_start=call.t_start, t_end=call.t_end,
                        prompt_tokens=call.prompt_tokens, completion_tokens=call.completion_tokens,
                        prefix_hashes=prefix_hashes(call.messages, block_chars), block_chars=block_chars,
                        features=request_features(call.messages),
                    )
                )
                summary.agents[agent] += 1
                summary.prompt_tokens += call.prompt_tokens
            writer.write(WorkflowEndRecord(app=APP_NAME, workflow_id=wid, t=max(c.t_end for c in calls), status="completed"))
            summary.workflows += 1
            summary.invocations += len(calls)
    return summary


@dataclass
class LoggedCall:
    """One LLM call recovered from a log (times in Unix seconds, read as UTC)."""

    phase: str
    role: str
    t_start: float
    t_end: float
    prompt_tokens: int
    completion_tokens: int
    messages: list[dict[str, str]]


def parse_log(text: str) -> list[LoggedCall]:
    """Recover the LLM calls of one ChatDev v1 log, in log (= time) order.

    Returns an empty list for logs without ``OpenAI_Usage_Info Receive`` entries (older formats).
    """
    calls: list[LoggedCall] = []
    chat: _Chat | None = None
    pending_phase: str | None = None
    send_t: float | None = None
    prev_t: float | None = None
    for t, head, body in _entries(text):
        if head.startswith("System: **[chatting]**"):
            pending_phase = _table(body).get("phase_name") or pending_phase
        elif head.startswith("System: **[RolePlaying]**"):
            if chat is not None:
                calls.extend(chat.finish())
            row = _table(body)
            chat = _Chat(pending_phase or UNPHASED, row.get("assistant_role_name", ""), row.get("user_role_name", ""))
            pending_phase = None
        elif head.startswith("**[OpenAI_Usage_Info Send]**"):
            send_t = t
        elif head.startswith("**[OpenAI_Usage_Info Receive]**"):
            nums = {k: int(v) for k, v in _NUM_RE.findall(body)}
            if chat is not None and "prompt_tokens" in nums:
                start = send_t if send_t is not None else (prev_t if prev_t is not None else t)
                chat.calls.append((start, t, nums["prompt_tokens"], nums.get("completion_tokens", 0)))
            send_t = None
        elif chat is not None:
            chat.observe(head, body)
        prev_t = t
    if chat is not None:
        calls.extend(chat.finish())
    return calls


# --------------------------------------------------------------------------- helpers


class _Chat:
    """One role-playing chat: its start message, utterances and calls, paired when it ends."""

    def __init__(self, phase: str, assistant: str, user: str):
        self.phase, self.assistant, self.user = phase, assistant, user
        self.start: tuple[str, str] | None = None  # (author, content)
        self.utterances: list[tuple[str, str]] = []  # (speaker, content)
        self.system: dict[str, str] = {}  # role -> its system message
        self.calls: list[tuple[float, float, int, int]] = []

    def observe(self, head: str, body: str) -> None:
        m = _START_RE.match(head)
        if m:
            bracket, content = _split_bracket(body)
            self._learn_system(bracket)
            if self.start is None:
                self.start = (m["role"].strip(), content)
            return
        m = _UTTER_RE.match(head)
        if m:
            bracket, content = _split_bracket(body)
            self._learn_system(bracket)
            if self.phase == UNPHASED:
                self.phase = m["phase"].strip()
            self.utterances.append((m["speaker"].strip(), content))
            return
        m = _PLAIN_RE.match(head)
        if m and m["role"] in (self.assistant, self.user) and m["role"]:
            # Replies logged on the head line itself (e.g. the prompt engineer's "<INFO> ...").
            self.utterances.append((m["role"], (m["text"] + "\n" + body).strip()))

    def finish(self) -> list[LoggedCall]:
        out = []
        for i, (t0, t1, ptok, ctok) in enumerate(self.calls):
            # The i-th call produced the i-th utterance; calls without one were the assistant's.
            speaker = self.utterances[i][0] if i < len(self.utterances) else (self.assistant or self.user or "unknown")
            out.append(LoggedCall(self.phase, speaker, t0, t1, ptok, ctok, self._prompt(speaker, i)))
        return out

    def _prompt(self, speaker: str, i: int) -> list[dict[str, str]]:
        messages = [{"role": "system", "content": self.system.get(speaker, "")}]
        history = ([self.start] if self.start else []) + self.utterances[:i]
        for author, content in history:
            messages.append({"role": "assistant" if author == speaker else "user", "content": content})
        return messages

    def _learn_system(self, bracket: str) -> None:
        for role in (self.assistant, self.user):
            if role and role not in self.system and f"You are {role}" in bracket:
                self.system[role] = bracket


def _entries(text: str) -> Iterator[tuple[float, str, str]]:
    """(unix time, head line text, body) of every ``[date INFO]`` entry."""
    t: float | None = None
    head = ""
    body: list[str] = []
    for line in text.splitlines():
        m = _ENTRY_RE.match(line)
        if m:
            if t is not None:
                yield t, head, "\n".join(body)
            t, head, body = _timestamp(m), m.group(7), []
        elif t is not None:
            body.append(line)
    if t is not None:
        yield t, head, "\n".join(body)


def _timestamp(m: re.Match) -> float:
    year, a, b, hh, mm, ss = (int(m.group(i)) for i in range(1, 7))
    day, month = (a, b) if b <= 12 else (b, a)  # ChatDev writes YYYY-DD-MM
    return float(calendar.timegm((year, month, day, hh, mm, ss, 0, 0, 0)))


def _table(body: str) -> dict[str, str]:
    return {m["key"]: m["value"].strip() for m in map(_ROW_RE.match, body.splitlines()) if m}


def _split_bracket(body: str) -> tuple[str, str]:
    """Split ``[system message]\\n\\ncontent`` into its two parts (no bracket: empty system)."""
    text = body.strip("\n")
    if text.startswith("["):
        end = text.find("]\n")
        if end < 0 and text.endswith("]"):
            end = len(text) - 1
        if end > 0:
            return text[1:end], text[end + 1 :].strip()
    return "", text.strip()


def _iter_logs(src: str | os.PathLike[str], summary: ImportSummary) -> Iterator[tuple[str, str]]:
    """(file name, text) of each ``.log`` under ``src`` (directory: name order; archive: archive order)."""
    path = os.fspath(src)
    if os.path.isdir(path):
        names = sorted(os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs if f.endswith(LOG_SUFFIX))
        for name in names:
            try:
                with open(name, "rb") as fh:
                    yield os.path.basename(name), _decode(fh)
            except OSError as exc:
                _skip(summary, name, f"unreadable ({exc})")
        return
    if not tarfile.is_tarfile(path):
        with open(path, "rb") as fh:
            yield os.path.basename(path), _decode(fh)
        return
    try:
        with tarfile.open(path, "r:*") as tar:
            # Stream members in archive order so a damaged tail loses only the files after it.
            for member in tar:
                if not (member.isfile() and member.name.endswith(LOG_SUFFIX)):
                    continue
                try:
                    fh = tar.extractfile(member)
                    if fh is None:
                        raise OSError("not a regular file")
                    text = _decode(fh)
                except (OSError, tarfile.TarError, EOFError, zlib.error) as exc:
                    # a member's data that cannot be read is the archive's damage: nothing after it can be
                    summary.damaged = f"{exc}; {os.path.basename(member.name)} and any later logs not read"
                    return
                yield os.path.basename(member.name), text
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:  # truncated archive: keep what was read
        summary.damaged = f"{exc}; any later logs not read"


def _decode(fh: IO[bytes]) -> str:
    return fh.read().decode("utf-8", errors="replace")


def _workflow_id(name: str, used: set[str]) -> str:
    # 120 characters leave room for the ".N" that tells apart logs of the same name
    base = workflow_id_from(name[:-4] if name.endswith(".log") else name, max_chars=120, empty="log")
    wid, n = base, 1
    while wid in used:
        n += 1
        wid = f"{base}.{n}"
    used.add(wid)
    return wid


def _skip(summary: ImportSummary, name: str, reason: str) -> None:
    summary.skipped.append((name, reason))
    # debug only: the summary holds it, and the command prints it, once
    log.debug("chatdev import: skipping %s: %s", name, reason)
