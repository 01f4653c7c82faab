"""The shared core of the block-hash importers (``pbkv-sdk import``): conversations whose calls carry
one id per fixed-size prefix block become v1 traces.

Some public agent traces record no text, only what a KV cache sees: per LLM call its arrival time,
prompt and output token counts, and one id per ``block_size``-token block of the prompt, equal ids
meaning equal prefixes (kv-cache-tester's ``hash_ids``). A format module turns one input file into
a :class:`HashConversation` (its reader; :mod:`pbkv_sdk.importers.kv_cache_tester` is one); this
module does the rest, the same for every format:

* **Block identity.** The i-th id of a call becomes the chained hash ``h_i = chain_hash(h_{i-1},
  "id:<scope>:<id>")`` (:func:`pbkv_contract.blocks.chain_hash`), the scope being the
  conversation for ids local to it (so no two conversations share a block) or the source for ids
  global to it. One hash per block, with ``block_tokens`` = the block
  size, so a 100k-token call is ~1,600 hashes and replay keys the cache per block, never per
  token. The prompt tokens after the last whole block (fewer than a block) are one more block of
  the call's own, which no other prompt shares (a partial block: the next call's whole block at
  that place has an id of its own).
* **Shared system and tool prefix** (``shared_prefix``, off by default): a reader may mark a
  call's leading blocks as its client configuration's prefix (:attr:`HashCall.shared_key`,
  :attr:`HashCall.shared_blocks`). The first call of each configuration in a conversation fixes
  its ids there (a later call extends them while the first was shorter); every call whose leading
  ids equal them gets, for those blocks, keys of the configuration instead of the conversation,
  so conversations of one configuration share them.
  That equal configurations send equal leading tokens is an assumption the reader states.
* **Context limit** (``context_limit`` prompt tokens): a call above it is dropped (``"drop"``:
  skipped and counted) or cut to its first ``context_limit`` tokens (``"truncate"``: kept, counted).
* **Gap cap** (``max_gap_s``): on each conversation's timeline (all its agents' calls), an idle
  stretch (no call running) longer than the cap is shortened to it, and every later call moves
  earlier by the difference.
* **Workflows.** ``"conversation"``: one workflow per conversation, its calls (every agent's) as
  steps in arrival order. ``"turn"``: one workflow per human turn (from a call with
  :attr:`HashCall.opens_turn` to the next), ``session_id`` = the conversation, so replay runs the
  turns one after the other; a call belongs to the turn its :attr:`HashCall.anchor_s` falls in
  (a subagent's calls: the turn that started the subagent).
* **Accounting.** Every call a reader saw is imported or skipped with a reason, counted per reason
  (:class:`BlockImportSummary`); a file that cannot be read is one ``(name, reason)`` line, and
  a damaged or truncated archive keeps the files read before the damage (a partial import,
  :attr:`BlockImportSummary.damaged` says why).

The first line of the trace is a ``meta`` record (:class:`pbkv_contract.trace.TraceMeta`) holding
the options, so a replay of the trace says how it was made.
"""

from __future__ import annotations

import bisect
import errno
import logging
import math
import os
import tarfile
import zlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Hashable, Iterator, Sequence

from pbkv_contract.blocks import chain_hash
from pbkv_contract.files import special_file, write_target
from pbkv_contract.hints import workflow_id_from
from pbkv_contract.trace import InvocationRecord, TraceMeta, TraceWriter, WorkflowEndRecord
from pbkv_sdk.importers import archive_problem

log = logging.getLogger(__name__)

__all__ = ["WORKFLOW_MODES", "OVER_LIMIT", "BLOCK_ID_SEED", "BadFile", "HashCall", "HashConversation", "ImportOptions",
           "BlockImportSummary", "import_block_hash", "conversation_records", "iter_source_files"]

#: How calls are grouped into workflows.
WORKFLOW_MODES = ("conversation", "turn")
#: What happens to a call above the context limit.
OVER_LIMIT = ("drop", "truncate")
#: Chain seed of block ids (mixed with the scope: the conversation, or the whole source).
BLOCK_ID_SEED = b"pbkv-block-ids-v1"


class BadFile(ValueError):
    """A reader cannot use an input file at all; the message is the one-line reason."""


@dataclass(slots=True)
class HashCall:
    """One LLM call as a block-hash format records it.

    Attributes:
        t: arrival, seconds from the conversation's start.
        prompt_tokens / completion_tokens: token counts.
        hash_ids: one id per whole block of the prompt, in order (ints or strings; equal ids in
            one scope are equal prefixes).
        agent: the agent that made it (``"main"``, a subagent's type).
        duration_s: how long the call took (arrival to last token), if known.
        ttft_s: time to first token, if known.
        opens_turn: a human input starts here (the main agent's first call of a turn).
        anchor_s: the time that decides the call's turn (its own arrival, or a subagent's start);
            ``None``: ``t``.
        shared_key: the client configuration whose prefix the call's leading blocks are
            (``shared_prefix``), or ``None``.
        shared_blocks: how many leading blocks that prefix holds.
    """

    t: float
    prompt_tokens: int
    completion_tokens: int
    hash_ids: Sequence[Hashable]
    agent: str = "main"
    duration_s: float | None = None
    ttft_s: float | None = None
    opens_turn: bool = False
    anchor_s: float | None = None
    shared_key: str | None = None
    shared_blocks: int = 0


@dataclass
class HashConversation:
    """One input file as a reader returns it.

    Attributes:
        conv_id: the conversation's id (its file's, if it names none).
        block_size: tokens per block.
        calls: every usable call, of every agent, in any order.
        skipped: calls the reader saw but could not use, per reason.
        global_ids: the ids are global to the source (else local to the conversation).
        subagents: subagents the conversation ran.
    """

    conv_id: str
    block_size: int
    calls: list[HashCall]
    skipped: Counter = field(default_factory=Counter)
    global_ids: bool = False
    subagents: int = 0


@dataclass(frozen=True)
class ImportOptions:
    """What shapes the trace (all of it recorded in the trace's ``meta`` line).

    Attributes:
        app: the trace's app name.
        workflow: one of :data:`WORKFLOW_MODES`.
        max_gap_s: longest idle gap kept, seconds (``None``: as recorded).
        context_limit: most prompt tokens a call may have (``None``: no limit).
        over_limit: one of :data:`OVER_LIMIT`: what happens to a call above the limit.
        shared_prefix: the reader's shared-prefix mode (``"none"``: conversations share nothing).
        max_conversations: stop after this many imported conversations (``None``: all).
    """

    app: str
    workflow: str = "conversation"
    max_gap_s: float | None = None
    context_limit: int | None = None
    over_limit: str = "drop"
    shared_prefix: str = "none"
    max_conversations: int | None = None

    def check(self) -> None:
        """Raise ``ValueError`` for a setting out of range."""
        if self.workflow not in WORKFLOW_MODES:
            raise ValueError(f"workflow must be one of {', '.join(WORKFLOW_MODES)}, got {self.workflow!r}")
        if self.over_limit not in OVER_LIMIT:
            raise ValueError(f"over_limit must be one of {', '.join(OVER_LIMIT)}, got {self.over_limit!r}")
        if self.max_gap_s is not None and not (math.isfinite(self.max_gap_s) and self.max_gap_s >= 0):
            raise ValueError(f"the gap cap must be a number of seconds >= 0, got {self.max_gap_s}")
        if self.context_limit is not None and self.context_limit < 1:
            raise ValueError(f"the context limit must be >= 1 token, got {self.context_limit}")
        if self.max_conversations is not None and self.max_conversations < 1:
            raise ValueError("max_conversations must be >= 1")
        if not self.app:
            raise ValueError("the app name must not be empty")

    def note(self) -> str:
        """The options in one line (printed by the import and by every replay of the trace)."""
        gap = "not capped" if self.max_gap_s is None else f"capped at {self.max_gap_s:g} s"
        fate = "dropped" if self.over_limit == "drop" else "cut to it"
        limit = "none" if self.context_limit is None else f"{self.context_limit:,} prompt tokens (calls above {fate})"
        return (f"workflow = {self.workflow}; gaps {gap}; context limit {limit}; "
                f"shared system/tool prefix: {self.shared_prefix}")


@dataclass
class BlockImportSummary:
    """What :func:`import_block_hash` did.

    Attributes:
        files: input files read; ``bad_files`` the ``(name, reason)`` of those that could not be used.
        damaged: why the source archive could not be read to its end (``""``: it could): the
            import holds only the files before the damage, which are not counted in ``files``.
        conversations / workflows: written.
        empty: conversations of usable files with no call left to write (all skipped).
        calls_seen: calls the readers saw in usable files; each is imported or in ``skipped``.
        calls: imported; ``truncated`` of them cut to the context limit.
        skipped: reason -> calls not imported.
        prompt_tokens / completion_tokens / blocks: sums over the imported calls (blocks: hashes).
        max_prompt_tokens: the largest imported prompt.
        agents: imported calls per agent; ``subagents`` run by the imported conversations.
        gaps_capped / gap_s_removed: idle gaps the cap shortened, and the seconds it took out.
        shared_blocks: blocks given a client configuration's key (``shared_prefix``).
    """

    files: int = 0
    bad_files: list[tuple[str, str]] = field(default_factory=list)
    damaged: str = ""
    conversations: int = 0
    workflows: int = 0
    empty: int = 0
    calls_seen: int = 0
    calls: int = 0
    truncated: int = 0
    skipped: Counter = field(default_factory=Counter)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    blocks: int = 0
    max_prompt_tokens: int = 0
    agents: Counter = field(default_factory=Counter)
    subagents: int = 0
    gaps_capped: int = 0
    gap_s_removed: float = 0.0
    shared_blocks: int = 0

    @property
    def mean_prompt_tokens(self) -> float:
        return self.prompt_tokens / self.calls if self.calls else 0.0


Reader = Callable[[str, bytes, ImportOptions], HashConversation]


def import_block_hash(src_path: str | os.PathLike[str], out_path: str | os.PathLike[str], read: Reader,
                      options: ImportOptions, *, writer: str, suffix: str = ".json") -> BlockImportSummary:
    """Convert every ``suffix`` file of ``src_path`` with ``read`` and write one v1 trace.

    Args:
        src_path: a ``.tar.gz``/``.tar`` (read in place, in archive order), a directory (searched
            recursively, in path order) or one file.
        out_path: trace to write, through ``out_path + ".partial"``, which replaces it when the
            import is done and is removed on any failure; when no conversation could be imported,
            nothing is written and an existing ``out_path`` stays as it was.
        read: the format's reader: ``read(file name, bytes, options)``; raises :class:`BadFile`
            (or any ``ValueError``) for a file it cannot use.
        options: see :class:`ImportOptions`.
        writer: the command named in the trace's ``meta`` line.
        suffix: file names to read.

    Raises:
        ValueError: a bad option, or ``src_path`` is named or compressed like a tar archive but
            is not a readable one.
        FileNotFoundError: ``src_path`` does not exist.
        IsADirectoryError: ``out_path`` is a directory.
        OSError: the output cannot be written.
    """
    options.check()
    if not os.path.exists(src_path):
        raise FileNotFoundError(errno.ENOENT, "no such file or directory", os.fspath(src_path))
    if (problem := archive_problem(src_path)) is not None:
        raise ValueError(problem)
    out = os.fspath(write_target(out_path))  # a link is written through; a device or fifo refused below
    if (kind := special_file(out)) is not None:
        raise OSError(errno.EINVAL, f"is {kind}, not a regular file; give a trace file path", out)
    tmp = out + ".partial"
    for path in (out, tmp):
        if os.path.isdir(path):
            raise IsADirectoryError(errno.EISDIR, "is a directory; give a trace file path", path)
    summary = BlockImportSummary()
    meta = TraceMeta(writer=writer, source=os.path.basename(os.fspath(src_path)), options=_options_json(options),
                     note=options.note())
    try:
        with TraceWriter(tmp) as trace:
            trace.write(meta)
            used: set[str] = set()
            for name, data in iter_source_files(src_path, suffix, summary):
                if options.max_conversations is not None and summary.conversations >= options.max_conversations:
                    break
                summary.files += 1
                try:
                    conv = read(name, data, options)
                except ValueError as exc:  # BadFile, and whatever else a reader finds unusable
                    _bad(summary, name, str(exc))
                    continue
                conv.conv_id = _unique(workflow_id_from(conv.conv_id, max_chars=100, empty="conversation"), used)
                for rec in conversation_records(conv, options, summary):
                    trace.write(rec)
        if summary.conversations:
            os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return summary


def iter_source_files(src: str | os.PathLike[str], suffix: str,
                      summary: BlockImportSummary) -> Iterator[tuple[str, bytes]]:
    """``(name, bytes)`` of each ``suffix`` file of a directory, an archive or one file; unreadable
    files go to ``summary.bad_files``, and why a damaged or truncated archive could not be read to
    its end to ``summary.damaged`` (the files before the damage are still yielded)."""
    path = os.fspath(src)
    if os.path.isdir(path):
        for name in sorted(os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs if f.endswith(suffix)):
            try:
                with open(name, "rb") as fh:
                    data = fh.read()
            except OSError as exc:
                _bad(summary, name, f"unreadable ({exc})")
                continue
            yield os.path.relpath(name, path), data
        return
    if not tarfile.is_tarfile(path):
        with open(path, "rb") as fh:
            yield os.path.basename(path), fh.read()
        return
    try:
        with tarfile.open(path, "r:*") as tar:
            for member in tar:  # streamed: a damaged tail loses only the files after it
                if not (member.isfile() and member.name.endswith(suffix)):
                    continue
                try:
                    fh = tar.extractfile(member)
                    if fh is None:
                        raise OSError("not a regular file")
                    data = fh.read()
                except (OSError, tarfile.TarError, EOFError, zlib.error) as exc:
                    # a member's data that cannot be read is the archive's damage: nothing after it can be
                    summary.damaged = f"{exc}; {member.name.removeprefix('./')} and any later files not read"
                    return
                yield member.name.removeprefix("./"), data
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        summary.damaged = f"{exc}; any later files not read"


# --------------------------------------------------------------------------- one conversation


def conversation_records(conv: HashConversation, options: ImportOptions,
                         summary: BlockImportSummary) -> list[InvocationRecord | WorkflowEndRecord]:
    """The trace records of one conversation under ``options`` (see the module docstring); counts
    go to ``summary``."""
    summary.calls_seen += len(conv.calls) + sum(conv.skipped.values())
    summary.skipped.update(conv.skipped)
    calls = []
    for call in conv.calls:
        if options.context_limit is not None and call.prompt_tokens > options.context_limit:
            if options.over_limit == "drop":
                summary.skipped[f"prompt above the context limit ({options.context_limit:,} tokens), dropped"] += 1
                continue
            summary.truncated += 1
        calls.append(call)
    if not calls:
        summary.empty += 1
        return []
    calls.sort(key=lambda c: c.t)  # stable: a format's order breaks ties
    starts, ends = _timeline(calls, options.max_gap_s, summary)
    groups = _workflows(conv.conv_id, calls, options.workflow)
    keys = _BlockKeys(conv, options)
    out: list[InvocationRecord | WorkflowEndRecord] = []
    session = conv.conv_id if options.workflow == "turn" else None
    for wid, members in groups:
        t_end = 0.0
        for step, i in enumerate(members):
            call = calls[i]
            hashes, toks = keys.blocks(call, i, options.context_limit)
            prompt = sum(toks)
            out.append(InvocationRecord(
                app=options.app, workflow_id=wid, step=step, agent=call.agent, t_start=round(starts[i], 3),
                t_end=round(ends[i], 3), prompt_tokens=prompt, completion_tokens=call.completion_tokens,
                prefix_hashes=hashes, block_tokens=toks, session_id=session, ttft_s=call.ttft_s))
            t_end = max(t_end, ends[i])
            summary.calls += 1
            summary.prompt_tokens += prompt
            summary.completion_tokens += call.completion_tokens
            summary.blocks += len(hashes)
            summary.max_prompt_tokens = max(summary.max_prompt_tokens, prompt)
            summary.agents[call.agent] += 1
        out.append(WorkflowEndRecord(app=options.app, workflow_id=wid, t=round(t_end, 3), status="completed"))
        summary.workflows += 1
    summary.conversations += 1
    summary.subagents += conv.subagents
    summary.shared_blocks += keys.shared
    return out


def _timeline(calls: list[HashCall], cap: float | None, summary: BlockImportSummary) -> tuple[list[float], list[float]]:
    """Start and end of each call (sorted by arrival), with idle stretches above ``cap`` shortened."""
    starts, ends = [], []
    shift = 0.0
    busy_until = -math.inf  # latest end of the calls so far (recorded times)
    for call in calls:
        end = call.t + (call.duration_s or 0.0)
        idle = call.t - busy_until
        if cap is not None and idle > cap and busy_until > -math.inf:
            shift += idle - cap
            summary.gaps_capped += 1
            summary.gap_s_removed += idle - cap
        starts.append(call.t - shift)
        ends.append(end - shift)
        busy_until = max(busy_until, end)
    return starts, ends


def _workflows(conv_id: str, calls: list[HashCall], mode: str) -> list[tuple[str, list[int]]]:
    """``(workflow id, call indices in order)`` of each workflow of one conversation."""
    if mode == "conversation":
        return [(conv_id, list(range(len(calls))))]
    opens = sorted(c.t for c in calls if c.opens_turn)
    turns: dict[int, list[int]] = {}
    for i, call in enumerate(calls):
        anchor = call.t if call.anchor_s is None else call.anchor_s
        turns.setdefault(max(0, bisect.bisect_right(opens, anchor) - 1), []).append(i)
    return [(f"{conv_id}-t{k}", members) for k, members in sorted(turns.items())]


class _BlockKeys:
    """Chained block hashes and tokens of one conversation's calls (module docstring)."""

    def __init__(self, conv: HashConversation, options: ImportOptions):
        self.size = conv.block_size
        # every id and tail is labelled with its scope, also after a shared prefix (whose keys
        # depend on the configuration only, so every conversation of it makes the same ones)
        self.scope = b"global" if conv.global_ids else f"conversation:{options.app}/{conv.conv_id}".encode()
        self.seed = chain_hash(BLOCK_ID_SEED, b"blocks").encode()
        self.share = options.shared_prefix != "none"
        self.canonical: dict[str, Sequence[Hashable]] = {}  # shared key -> the conversation's ids there
        self.memo: dict[tuple[bytes, bytes], str] = {}  # (previous hash, id) -> hash: prompts repeat their prefix
        self.shared = 0

    def blocks(self, call: HashCall, index: int, limit: int | None) -> tuple[list[str], list[int]]:
        prompt = call.prompt_tokens if limit is None else min(call.prompt_tokens, limit)
        ids = call.hash_ids[: prompt // self.size]
        hashes: list[str] = []
        prev, start = self.seed, 0
        if self.share and call.shared_key is not None and call.shared_blocks > 0:
            canon = self.canonical.setdefault(call.shared_key, list(call.hash_ids[: call.shared_blocks]))
            n = 0
            while n < min(len(ids), len(canon)) and ids[n] == canon[n]:
                n += 1
            if n == len(canon) < call.shared_blocks:  # an earlier call was shorter: this one extends it
                canon.extend(ids[n:call.shared_blocks])
                n = len(canon)
            if n:
                label = b"shared:" + call.shared_key.encode()
                for _ in range(n):
                    digest = self._link(prev, label)
                    hashes.append(digest)
                    prev = digest.encode()
                start = n
                self.shared += n
        scope = self.scope
        for block_id in ids[start:]:
            digest = self._link(prev, b"id:" + scope + b":" + str(block_id).encode())
            hashes.append(digest)
            prev = digest.encode()
        toks = [self.size] * len(hashes)
        tail = prompt - self.size * len(hashes)
        if tail > 0:  # the tokens after the last whole block: a block of this call's own
            hashes.append(chain_hash(prev, b"tail:" + self.scope + f":{index}".encode()))
            toks.append(tail)
        return hashes, toks

    def _link(self, prev: bytes, label: bytes) -> str:
        digest = self.memo.get((prev, label))
        if digest is None:
            digest = self.memo[(prev, label)] = chain_hash(prev, label)
        return digest


# --------------------------------------------------------------------------- helpers


def _options_json(options: ImportOptions) -> dict:
    return {"app": options.app, "workflow": options.workflow, "max_gap_s": options.max_gap_s,
            "context_limit": options.context_limit, "over_limit": options.over_limit,
            "shared_prefix": options.shared_prefix, "max_conversations": options.max_conversations}


def _unique(base: str, used: set[str]) -> str:
    wid, n = base, 1
    while wid in used:
        n += 1
        wid = f"{base}.{n}"
    used.add(wid)
    return wid


def _bad(summary: BlockImportSummary, name: str, reason: str) -> None:
    summary.bad_files.append((name, reason))
    # debug only: the summary holds it, and the command prints it, once
    log.debug("block-hash import: skipping %s: %s", name, reason)
