"""``pbkv-sdk``: record an existing app's traces, summarise and validate traces, import logs.

Commands::

    pbkv-sdk record --out run.jsonl [--app NAME] [--server-url URL] -- python my_app.py ...
    pbkv-sdk stats run.jsonl [--json]
    pbkv-sdk validate run.jsonl          # exit status 1 if any line is invalid
    pbkv-sdk import chatdev logs.tar.gz --out chatdev.jsonl
    pbkv-sdk import ghcp downloaded_data/ --out ghcp.jsonl
    pbkv-sdk import kv-cache-tester traces.tar.gz --out claude-code.jsonl
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from pbkv_contract.extras import missing_module_line
from pbkv_contract.files import make_parents, output_problem, special_file
from pbkv_contract.trace import InvocationRecord, WorkflowEndRecord, looks_like_trace
from pbkv_sdk.context import ENV_APP, ENV_BODY_HINTS, ENV_SERVER_URL, ENV_TRACE_PATH
from pbkv_sdk.stats import TraceSummary, ValidationReport, summarize, validate_file

app = typer.Typer(add_completion=False, no_args_is_help=True, help="PBKV client SDK tools.")
import_app = typer.Typer(no_args_is_help=True, help="Convert other systems' logs to PBKV traces.")
app.add_typer(import_app, name="import")

console = Console()
err_console = Console(stderr=True, soft_wrap=True)  # one-line messages stay one line

#: Environment that switches CrewAI's telemetry and tracing off in recorded apps. Not
#: ``OTEL_SDK_DISABLED``: CrewAI honours its own switches, and that one would also silence the
#: app's OpenTelemetry spans, which ``pbkv_sdk.integrations.otel`` turns into hints.
TELEMETRY_OFF = {"CREWAI_DISABLE_TELEMETRY": "true", "CREWAI_DISABLE_TRACKING": "true", "CREWAI_TRACING_ENABLED": "false"}


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def record(
    command: List[str] = typer.Argument(..., help="The app's command line, after '--'."),
    out: Path = typer.Option(..., "--out", "-o", help="Trace file to write (JSONL, trace format v1)."),
    app_name: Optional[str] = typer.Option(None, "--app", help="App name recorded in the trace (overrides the app's own)."),
    server_url: Optional[str] = typer.Option(None, "--server-url", help="PBKV server for end signals."),
    body_hints: bool = typer.Option(False, "--body-hints", help="Also send hints in custom_params.pbkv."),
    append: bool = typer.Option(False, "--append", help="Append to an existing trace instead of starting anew."),
    top: int = typer.Option(5, "--top", min=0, help="How many transitions to list in the summary."),
) -> None:
    """Run COMMAND with trace recording switched on by environment, then print a summary.

    The app must already use a PBKV integration (instrument(...) / instrument_team(...)); it
    reads PBKV_TRACE_PATH, PBKV_APP, PBKV_SERVER_URL and PBKV_BODY_HINTS. CrewAI telemetry is
    switched off. Exits with the app's exit status (127: command not found, 126: not
    executable, 2: the trace file cannot be created, or exists and is not a trace: a typo in
    --out must not delete the app's own files), or 1 when the app succeeded but recorded no
    LLM invocation: then one line names the interpreter that ran. Whatever the way out (the
    command cannot run, the app fails or is interrupted before its first LLM call), a trace file
    that this command created and that holds no invocation is removed again, and one line says
    so. Without --append an existing trace is replaced, but only by a recording that holds an
    invocation: it is moved to OUT.previous while the app runs and put back if the new recording
    is empty or the command cannot run. Ctrl-C reaches the app too; a second one stops the wait
    (exit 130), leaving the file to an app that still runs (and OUT.previous where it is).
    """
    out = out.resolve()
    created = append is False or not out.exists()
    previous: Path | None = None  # an earlier trace moved aside until the new one holds an invocation
    try:
        if out.is_dir():
            raise IsADirectoryError(f"{out} is a directory")
        if (kind := special_file(out)) is not None:  # reading a fifo would block; a device is not a trace
            err_console.print(f"[bold red]error:[/] cannot write the trace file {escape(str(out))}: it is {kind}, "
                              "not a regular file", highlight=False, soft_wrap=True)
            raise typer.Exit(2)
        if out.exists() and not looks_like_trace(out):
            err_console.print(_not_a_trace_line(out), highlight=False, soft_wrap=True)
            raise typer.Exit(2)
        if out.exists() and not append:
            if out.stat().st_size > 0:
                previous = out.with_name(out.name + ".previous")
                os.replace(out, previous)
            else:
                out.unlink()
        make_parents(out)
        with open(out, "a", encoding="utf-8"):  # fail here, not inside the app, if it cannot be written
            pass
    except OSError as exc:
        err_console.print(f"[bold red]error:[/] cannot write the trace file {out}: {_os_reason(exc)}", highlight=False, soft_wrap=True)
        raise typer.Exit(2)
    env = dict(os.environ, **TELEMETRY_OFF)
    env[ENV_TRACE_PATH] = str(out)
    for name, value in ((ENV_APP, app_name), (ENV_SERVER_URL, server_url), (ENV_BODY_HINTS, "1" if body_hints else None)):
        if value:
            env[name] = value
    try:
        status = _run_app(command, env)
    except FileNotFoundError:
        removed = _remove_if_ours(out, created) + _put_back(previous, out)
        err_console.print(f"[bold red]error:[/] command not found: {escape(command[0])}{removed}", highlight=False, soft_wrap=True)
        raise typer.Exit(127)
    except OSError as exc:  # not executable, bad interpreter line, ...
        removed = _remove_if_ours(out, created) + _put_back(previous, out)
        err_console.print(f"[bold red]error:[/] cannot run {escape(command[0])}: {escape(_os_reason(exc))}{removed}",
                          highlight=False, soft_wrap=True)
        raise typer.Exit(126)
    if status is None:
        kept = f"; the previous trace is in {escape(str(previous))}" if previous is not None else ""
        err_console.print(f"[bold red]error:[/] interrupted; the app is still running and may still record into {escape(str(out))} "
                          f"(kept){kept}", highlight=False, soft_wrap=True)
        raise typer.Exit(130)
    report = validate_file(out) if out.exists() else ValidationReport()
    if not any(isinstance(r, InvocationRecord) for r in report.records):
        if created and out.exists():
            out.unlink()  # ours, and useless: leave no file that looks like a recording
        ends = sum(isinstance(r, WorkflowEndRecord) for r in report.records)
        what = f"only {ends} workflow end(s)" if ends else "nothing"
        fate = _put_back(previous, out).removeprefix("; ") or f"{'removed' if created else 'kept'} {escape(str(out))}"
        err_console.print(
            f"[bold red]error:[/] no LLM invocation was recorded ({what}; {fate}): "
            f"the app ran with {escape(_interpreter(command))}; is pbkv installed there, does the app call a PBKV "
            f"instrument(...) function, and do its LLM calls reach the server?",
            highlight=False, soft_wrap=True,
        )
        raise typer.Exit(status or 1)
    if previous is not None:
        previous.unlink(missing_ok=True)  # replaced by a recording that holds invocations
    _print_summary(summarize(report.records), top)
    if report.invalid:
        err_console.print(f"[red]{len(report.invalid)} invalid line(s) in {out}[/red]")
    raise typer.Exit(status)


@app.command()
def stats(
    file: Path = typer.Argument(..., exists=True, dir_okay=False, help="Trace file."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    top: int = typer.Option(10, "--top", min=0, help="How many transitions to list."),
) -> None:
    """Summarise a trace: workflows, invocations, agents, tokens, most common transitions.

    Invalid lines are skipped with a note; a file without any invocation record exits 1.
    """
    report = _read_report(file)
    if not _has_invocation(report):
        err_console.print(_no_records_message(file, report), highlight=False)
        raise typer.Exit(1)
    summary = summarize(report.records)
    if as_json:
        print(json.dumps({**summary.to_json(), "invalid_lines": len(report.invalid)}, indent=2))
        return
    _print_summary(summary, top)
    if report.invalid:
        err_console.print(f"[yellow]{len(report.invalid)} invalid line(s) skipped; run `pbkv-sdk validate`[/yellow]")


@app.command()
def validate(file: Path = typer.Argument(..., exists=True, dir_okay=False, help="Trace file.")) -> None:
    """Check every line of a trace; list invalid ones and exit 1 if there are any, or no invocation record."""
    report = _read_report(file)
    if report.valid == 0 and report.invalid:
        # not one trace record: another tool's file (a ChatDev log, chat-completions JSONL...), so
        # one line saying so beats one error per line
        lineno, reason = report.invalid[0]
        err_console.print(f"[bold red]error:[/] {escape(str(file))} is not a PBKV trace (v1): none of its {len(report.invalid)} line(s) is "
                          f"a trace record (line {lineno}: {escape(reason)}). {_importers_line()}",
                          highlight=False, soft_wrap=True)
        raise typer.Exit(1)
    for lineno, reason in report.invalid[:50]:
        console.print(f"{file}:{lineno}: {reason}", markup=False, highlight=False, soft_wrap=True)  # one line per problem, for grep
    if len(report.invalid) > 50:
        console.print(f"... and {len(report.invalid) - 50} more")
    console.print(f"{report.valid} valid, {len(report.invalid)} invalid line(s)")
    if report.invalid:
        raise typer.Exit(1)
    if not _has_invocation(report):
        err_console.print(_no_records_message(file, report), highlight=False)
        raise typer.Exit(1)


@import_app.command("chatdev")
def import_chatdev_cmd(
    src: Path = typer.Argument(..., help="ChatDev logs: .tar.gz, directory or .log file."),
    out: Path = typer.Option(..., "--out", "-o", help="Trace file to write."),
    agent_key: str = typer.Option("role", "--agent-key", help="Agent naming: role, phase or phase_role."),
) -> None:
    """Import ChatDev execution logs as a trace (one workflow per log file).

    Exits 2 with one line when the logs cannot be read or OUT cannot be written (no ``.partial``
    file is left), OUT exists and is not a PBKV trace or is one of the logs, or no log held a
    usable workflow (then nothing is written, as ``stats`` and ``validate`` refuse an empty trace).
    Each skipped log is one line; a truncated archive is a partial import (exit 0, said so).
    """
    try:
        from pbkv_sdk.importers.chatdev import LOG_SUFFIX, import_chatdev
    except ImportError as exc:
        line = missing_module_line("pbkv-sdk", exc, "")
        err_console.print(escape(line) if line else f"[bold red]error:[/] the ChatDev importer is not available ({escape(str(exc))})",
                          highlight=False, soft_wrap=True)
        raise typer.Exit(2)
    _check_src_exists(src)
    _check_import_out(out, src, (LOG_SUFFIX,))
    try:
        summary = import_chatdev(src, out, agent_key=agent_key)
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        err_console.print(f"[bold red]error:[/] cannot import: {escape(where + (exc.strerror or str(exc)))}", highlight=False, soft_wrap=True)
        raise typer.Exit(2)
    except ValueError as exc:
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        raise typer.Exit(2)
    if summary.workflows == 0:
        why = (f"{summary.files} log file(s), none usable" if summary.files
               else "no .log file read" if summary.damaged else "no .log file found")
        if summary.skipped:
            name, reason = summary.skipped[0]
            why += f" (first: {os.path.basename(name)}: {reason})"
        if summary.damaged:
            why += f"; {_damage_note(src, summary.damaged)}"
        err_console.print(
            f"[bold red]error:[/] {escape(str(src))}: no ChatDev workflow imported: {escape(why)}; nothing written to {escape(str(out))}",
            highlight=False, soft_wrap=True,
        )
        raise typer.Exit(2)
    for name, reason in summary.skipped:
        err_console.print(f"skipped {escape(os.path.basename(name))}: {escape(reason)}", highlight=False, soft_wrap=True)
    console.print(
        f"{summary.files} log file(s): {summary.workflows} workflows, {summary.invocations} invocations, "
        f"{len(summary.skipped)} skipped -> {escape(str(out))}"
        + (f"; PARTIAL IMPORT: {escape(_damage_note(src, summary.damaged))}" if summary.damaged else ""),
        highlight=False, soft_wrap=True
    )


@import_app.command("ghcp")
def import_ghcp_cmd(
    src: Path = typer.Argument(..., help="GitHub Copilot coding-agent release: a directory of "
                                                     "date=*/shard-*.jsonl.gz, or one shard."),
    out: Path = typer.Option(..., "--out", "-o", help="Trace file to write."),
    block_tokens: int = typer.Option(1024, "--block-tokens", min=1, help="tokens per hashed block"),
    max_sessions: Optional[int] = typer.Option(None, "--max-sessions", min=1, help="import at most this many sessions"),
) -> None:
    """Import the GitHub Copilot coding-agent traces (Azure Public Dataset 2026) as a trace.

    Each session becomes a session, each user turn a workflow, each LLM call an invocation with
    its real token counts; block identity comes from the calls' message_metadata segments. Prints
    the trace's own repeated-prefix share next to the release's cached share. Exits 2 when the
    input cannot be read or OUT cannot be written, or exists and is not a PBKV trace or is one of
    the shards, or no session was usable (nothing is written then).
    """
    from pbkv_sdk.importers.ghcp import SHARD_SUFFIXES, import_ghcp

    _check_src_exists(src)
    _check_import_out(out, src, SHARD_SUFFIXES)
    try:
        summary = import_ghcp(src, out, block_tokens=block_tokens, max_sessions=max_sessions)
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        err_console.print(f"[bold red]error:[/] cannot import: {escape(where + (exc.strerror or str(exc)))}", highlight=False,
                          soft_wrap=True)
        raise typer.Exit(2)
    except ValueError as exc:
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        raise typer.Exit(2)
    skipped = sum(summary.skipped.values())
    note = ""
    if skipped and summary.first is not None:
        where, reason = summary.first
        note = f"; skipped {skipped} item(s) (first: {where}: {reason})"
    if summary.sessions == 0:
        why = note.removeprefix("; ") or "no session found"
        err_console.print(f"[bold red]error:[/] {escape(str(src))}: {summary.files} shard file(s), no session imported ({escape(why)}); "
                          f"nothing written to {escape(str(out))}", highlight=False, soft_wrap=True)
        raise typer.Exit(2)
    recorded = summary.recorded_cached_share
    console.print(
        f"{summary.files} shard file(s): {summary.sessions} sessions, {summary.workflows} turns, "
        f"{summary.invocations} LLM calls, {summary.tool_batches} tool batches "
        f"(mean {summary.tool_batch_ms / max(1, summary.tool_batches) / 1000:.2f} s){escape(note)} -> {escape(str(out))}",
        highlight=False, soft_wrap=True)
    console.print(
        f"cached share: recorded (calls' cached / prompt) "
        f"{'unknown' if recorded is None else f'{recorded:.3f}'}; trace's own repeated prefix "
        f"{summary.trace_cached_share:.3f}" + (f"; {summary.no_segments} call(s) without message_metadata"
                                               if summary.no_segments else ""),
        highlight=False, soft_wrap=True)


@import_app.command("kv-cache-tester")
def import_kv_cache_tester_cmd(
    src: Optional[Path] = typer.Argument(None, help="traces: a .tar.gz of trace_*.json, a directory or one file "
                                                    "(default: $PBKV_DATA_DIR/claude-code/traces.tar.gz)"),
    out: Path = typer.Option(..., "--out", "-o", help="Trace file to write."),
    workflow: str = typer.Option("conversation", "--workflow",
                                 help="one workflow per conversation, or per human turn (turn; session = conversation)"),
    max_gap: Optional[float] = typer.Option(None, "--max-gap", help="cap idle gaps at this many seconds "
                                                                    "(default: as recorded)"),
    context_limit: Optional[int] = typer.Option(None, "--context-limit", min=1,
                                                help="most prompt tokens a call may have (default: no limit)"),
    over_limit: str = typer.Option("drop", "--over-limit", help="calls above --context-limit: drop, or truncate "
                                                                "(keep the first context-limit tokens)"),
    shared_prefix: str = typer.Option("none", "--shared-prefix",
                                      help="share the tool (tools) or tool and system (tools+system) prefix between "
                                           "conversations of one client configuration; default none"),
    app_name: str = typer.Option("claude-code", "--app", help="app name of the trace"),
    max_conversations: Optional[int] = typer.Option(None, "--max-conversations", min=1,
                                                    help="import at most this many conversations (source order)"),
) -> None:
    """Import kv-cache-tester block-hash traces (Claude Code conversations with subagents) as a trace.

    Each call becomes an invocation with one hash per 64-token block (block_tokens), subagents
    agents of their conversation. Prints what was imported and skipped (per reason), the shape
    and the options; the options are also the trace's first (meta) line. Exits 2 when the input
    cannot be read, an option is bad or OUT cannot be written, or exists and is not a PBKV trace
    or is one of the input files, or no conversation was usable (nothing is written then; the
    first bad file is named and the skip reasons are listed). A truncated archive is a partial
    import (exit 0, said so).
    """
    from pbkv_sdk.importers.blockhash import ImportOptions
    from pbkv_sdk.importers.kv_cache_tester import FILE_SUFFIX, import_kv_cache_tester

    if src is None:
        data_dir = os.environ.get("PBKV_DATA_DIR")
        if not data_dir:
            err_console.print("[bold red]error:[/] give the traces (SRC) or set PBKV_DATA_DIR to the folder that holds "
                              "claude-code/traces.tar.gz", highlight=False, soft_wrap=True)
            raise typer.Exit(2)
        src = Path(data_dir) / "claude-code" / "traces.tar.gz"
        if not src.exists():
            err_console.print(f"[bold red]error:[/] PBKV_DATA_DIR={escape(data_dir)} does not hold claude-code/traces.tar.gz; "
                              f"give SRC", highlight=False, soft_wrap=True)
            raise typer.Exit(2)
    else:
        _check_src_exists(src)
    _check_import_out(out, src, (FILE_SUFFIX,))
    options = ImportOptions(app=app_name, workflow=workflow, max_gap_s=max_gap, context_limit=context_limit,
                            over_limit=over_limit, shared_prefix=shared_prefix, max_conversations=max_conversations)
    try:
        summary = import_kv_cache_tester(src, out, options)
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        err_console.print(f"[bold red]error:[/] cannot import: {escape(where + (exc.strerror or str(exc)))}", highlight=False,
                          soft_wrap=True)
        raise typer.Exit(2)
    except ValueError as exc:
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        raise typer.Exit(2)
    if summary.conversations == 0:
        first = (f" (first: {summary.bad_files[0][0]}: {summary.bad_files[0][1]})" if summary.bad_files else "")
        calls = f", all {summary.calls_seen:,} call(s) skipped" if summary.calls_seen else ""
        damaged = f"; {_damage_note(src, summary.damaged)}" if summary.damaged else ""
        err_console.print(f"[bold red]error:[/] {escape(str(src))}: {summary.files} file(s), {len(summary.bad_files)} bad"
                          f"{escape(first)}{calls}, no conversation imported{escape(damaged)}; "
                          f"nothing written to {escape(str(out))}", highlight=False, soft_wrap=True)
        for line in skip_lines(summary.skipped):
            err_console.print(escape(line), highlight=False, soft_wrap=True)
        raise typer.Exit(2)
    for name, reason in summary.bad_files:
        err_console.print(f"bad file {escape(name)}: {escape(reason)}", highlight=False, soft_wrap=True)
    for line in block_import_lines(summary, options, src, out):
        console.print(escape(line), highlight=False, soft_wrap=True)


def block_import_lines(summary, options, src: Path, out: Path) -> List[str]:
    """What a block-hash import prints: files (and a damaged archive: the import is partial), calls
    (imported, skipped per reason), shape, options."""
    skipped = sum(summary.skipped.values())
    lines = [
        f"{summary.files} file(s), {len(summary.bad_files)} bad: {summary.conversations} "
        f"conversation{'' if summary.conversations == 1 else 's'} ({summary.subagents} subagents), "
        f"{summary.workflows} workflow{'' if summary.workflows == 1 else 's'} -> {out}"
        + (f"; {summary.empty} conversation(s) with no call left" if summary.empty else "")
        + (f"; PARTIAL IMPORT: {_damage_note(src, summary.damaged)}" if summary.damaged else ""),
        f"calls: {summary.calls_seen:,} seen = {summary.calls:,} imported"
        + (f" ({summary.truncated:,} truncated to the context limit)" if summary.truncated else "")
        + f" + {skipped:,} skipped",
    ]
    lines += skip_lines(summary.skipped)
    agents = ", ".join(f"{a} {n:,}" for a, n in summary.agents.most_common())
    lines.append(f"shape: {summary.calls:,} calls ({agents}), mean prompt {summary.mean_prompt_tokens:,.0f} tokens "
                 f"(largest {summary.max_prompt_tokens:,}), mean output "
                 f"{summary.completion_tokens / max(1, summary.calls):,.0f}, {summary.blocks:,} block hashes "
                 f"({summary.blocks / max(1, summary.calls):,.0f} per call)")
    gaps = (f"; {summary.gaps_capped:,} gaps capped ({summary.gap_s_removed / 3600:,.1f} h taken out)"
            if options.max_gap_s is not None else "")
    shared = f"; {summary.shared_blocks:,} blocks keyed by client configuration" if options.shared_prefix != "none" else ""
    lines.append(f"options: {options.note()}{gaps}{shared}")
    return lines


def skip_lines(skipped) -> List[str]:
    """One line per reason calls were skipped (``"  skipped 3: request without a usable 't'"``),
    most frequent first: printed whether some calls were imported or none."""
    return [f"  skipped {n:,}: {reason}" for reason, n in skipped.most_common()]


def _damage_note(src: Path, damage: str) -> str:
    """Says plainly that the archive ``src`` could not be read to its end (``damage``: why)."""
    return f"the archive {src.name} is damaged or truncated ({damage})"


def _run_app(command: List[str], env: dict) -> int | None:
    """Run the app to its end; its exit status in shell terms (128 + N when killed by signal N).

    Ctrl-C reaches the app too (same process group); we wait for it to finish writing, so the
    summary of what was recorded still prints. From the second Ctrl-C on we wait only
    :data:`_GRACE_S` more: ``None`` when the app is still running then.

    Ctrl-C is counted by a handler, never raised as ``KeyboardInterrupt``: the app and ``record``
    get the same SIGINT, and a ``KeyboardInterrupt`` raised just after ``waitpid`` reaped the app
    loses its status (``Popen`` then reads 0 from a second ``waitpid``), so an app killed by the
    second Ctrl-C read as one that exited 0.

    Raises:
        OSError: the command cannot be started (``FileNotFoundError``: not found).
    """
    proc = subprocess.Popen(command, env=env)
    interrupts = 0

    def count(_signum, _frame) -> None:
        nonlocal interrupts
        interrupts += 1

    # signal handlers can only be set from the main thread; elsewhere no Ctrl-C arrives anyway
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, count) if main else None
    try:
        told, give_up_at = False, None
        while True:
            try:
                status = proc.wait(timeout=_POLL_S)
                return 128 - status if status < 0 else status
            except subprocess.TimeoutExpired:
                pass
            if interrupts and not told:  # say why nothing happens yet, and how to stop waiting
                told = True
                err_console.print("interrupted: waiting for the app to finish writing its trace "
                                  "(Ctrl-C again to stop waiting)", highlight=False, soft_wrap=True)
            if interrupts >= 2:
                give_up_at = give_up_at or time.monotonic() + _GRACE_S
                if time.monotonic() >= give_up_at:
                    return None
    finally:
        if main and previous is not None:  # None: a handler set outside Python, nothing to put back
            signal.signal(signal.SIGINT, previous)


#: Seconds ``record`` still waits for the app after a second Ctrl-C.
_GRACE_S = 0.5
#: Seconds between checks on the app (and on Ctrl-C) while ``record`` waits for it.
_POLL_S = 0.05


def _remove_if_ours(out: Path, created: bool) -> str:
    """Remove ``out`` when this command created it and it holds no invocation record; the note to
    add to the one-line message (``"; nothing recorded, removed PATH"`` or ``""``)."""
    try:
        if not created or not out.exists() or any(isinstance(r, InvocationRecord) for r in validate_file(out).records):
            return ""
        out.unlink()
    except OSError:
        return ""
    return f"; nothing recorded, removed {escape(str(out))}"


def _put_back(previous: Path | None, out: Path) -> str:
    """Move the trace that ``record`` set aside back to ``out`` (nothing was recorded to replace
    it); the note to add to the one-line message (``"; the previous trace is back in PATH"``)."""
    if previous is None or out.exists():
        return ""
    try:
        os.replace(previous, out)
    except OSError:
        return f"; the previous trace is in {escape(str(previous))}"
    return f"; the previous trace is back in {escape(str(out))}"


def _not_a_trace_line(out: Path) -> str:
    """The one line of a command that refuses to replace ``out``, an existing file that is not a trace."""
    return f"[bold red]error:[/] refusing to overwrite {escape(str(out))}: it is not a PBKV trace"


def _check_src_exists(src: Path) -> None:
    """Exit 2 with one line (not click's boxed usage error) when an import's SRC does not exist."""
    if not src.exists():
        err_console.print(f"[bold red]error:[/] {escape(str(src))}: no such file or directory", highlight=False, soft_wrap=True)
        raise typer.Exit(2)


def _check_import_out(out: Path, src: Path, suffixes: tuple[str, ...]) -> None:
    """Exit 2 with one line, before any input is read, when an import reading ``src`` must not write ``out``.

    Shared by every ``pbkv-sdk import`` command. Refused: an ``out`` that :func:`output_problem`
    rejects (a directory, not writable, the single input file itself), one of the files the import
    reads from a ``src`` folder (an existing file under it whose name ends with one of
    ``suffixes``), and any other existing file that is not a PBKV trace (as ``record`` refuses it):
    a typo in ``--out`` must not destroy a user's file. An existing trace may be replaced.
    """
    problem = output_problem(out, [src], writes_trace=True)
    if problem is None and src.is_dir() and out.is_file() and out.name.endswith(suffixes) \
            and out.resolve().is_relative_to(src.resolve()):
        problem = f"is one of the input files in {src}; writing it would destroy it"
    if problem is not None:
        err_console.print(f"[bold red]error:[/] cannot import: --out {escape(str(out))} {escape(problem)}", highlight=False,
                          soft_wrap=True)
        raise typer.Exit(2)
    try:
        trace = not out.exists() or looks_like_trace(out)
    except OSError as exc:
        err_console.print(f"[bold red]error:[/] cannot import: --out {escape(str(out))} cannot be read: {escape(_os_reason(exc))}",
                          highlight=False, soft_wrap=True)
        raise typer.Exit(2)
    if not trace:
        err_console.print(_not_a_trace_line(out), highlight=False, soft_wrap=True)
        raise typer.Exit(2)


def _importers_line() -> str:
    """Names the importers that convert other tools' logs (the ``pbkv-sdk import`` commands)."""
    names = [c.name or c.callback.__name__ for c in import_app.registered_commands]
    return ("To convert another tool's log: " + "; ".join(f"pbkv-sdk import {n} SRC --out OUT" for n in names)
            + " (see pbkv-sdk import --help).")


def _read_report(file: Path) -> ValidationReport:
    """``validate_file(file)``, or a clear message and exit 2 when the file cannot be read."""
    try:
        return validate_file(file)
    except OSError as exc:
        err_console.print(f"[bold red]error:[/] cannot read {file}: {_os_reason(exc)}", highlight=False)
        raise typer.Exit(2)


def _os_reason(exc: OSError) -> str:
    """``"Permission denied: 'x'"``: the OS reason and the path it is about, without errno noise."""
    if exc.strerror and exc.filename:
        return f"{exc.strerror}: {exc.filename!r}"
    return exc.strerror or str(exc)


def _has_invocation(report: ValidationReport) -> bool:
    return any(isinstance(r, InvocationRecord) for r in report.records)


def _no_records_message(file: Path, report: ValidationReport) -> str:
    if report.invalid and not report.records:
        return f"[bold red]error:[/] {file}: no valid trace record ({len(report.invalid)} invalid line(s); run `pbkv-sdk validate`)"
    if report.records:
        return (f"[bold red]error:[/] {file}: no invocation record, only {len(report.records)} workflow end(s): the app's LLM "
                f"requests were not stamped (does it call a PBKV instrument(...) function?)")
    return f"[bold red]error:[/] {file}: empty trace (no records)"


def _interpreter(command: List[str]) -> str:
    """The program that ran: its resolved path, and for a ``python`` its version, e.g. ``/usr/bin/python3 (Python 3.11.7)``."""
    path = shutil.which(command[0]) or command[0]
    if "python" not in os.path.basename(path).lower():
        return path
    try:
        version = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10)
        return f"{path} ({(version.stdout or version.stderr).strip()})"
    except (OSError, subprocess.SubprocessError):
        return path


def _print_summary(summary: TraceSummary, top: int) -> None:
    ended = ", ".join(f"{n} {s}" for s, n in summary.ended.most_common()) or "none"
    n = summary.invocations
    cached = "cached: unknown" if summary.cached_tokens is None else (
        f"{summary.cached_tokens:,} cached{_known_part(summary.cached_known, n)}")
    ttft = "unknown" if summary.mean_ttft_s is None else (
        f"{summary.mean_ttft_s * 1000:.1f} ms{_known_part(summary.ttft_known, n)}")
    internal = f" ({summary.internal} internal, left out of the transitions)" if summary.internal else ""
    console.print(
        f"[bold]{summary.workflows}[/bold] workflows ({ended} ended), [bold]{n}[/bold] invocations, "
        f"{summary.steps_per_workflow:.1f} per workflow{internal}; tokens: {summary.prompt_tokens:,} prompt, "
        f"{cached}, {summary.completion_tokens:,} completion; mean TTFT {ttft}"
    )
    agents = Table(title="agents")
    agents.add_column("agent")
    agents.add_column("invocations", justify="right")
    for name, n in summary.agents.most_common():
        agents.add_row(name, str(n))
    console.print(agents)
    transitions = Table(title=f"most common transitions (top {top})")
    transitions.add_column("from")
    transitions.add_column("to")
    transitions.add_column("count", justify="right")
    for (a, b), n in summary.transitions.most_common(top):
        transitions.add_row(a, b, str(n))
    console.print(transitions)


def _known_part(known: int, total: int) -> str:
    """`` (of 40/60 invocations that report it)`` when only some invocations know a figure, else ``""``."""
    return "" if known == total else f" (of {known}/{total} invocations that report it)"


def main() -> None:  # pragma: no cover - console-script convenience
    """Entry point for ``python -m pbkv_sdk.cli``."""
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
