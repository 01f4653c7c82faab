"""Read kv-cache-tester traces (``traces/trace_*.json``: real Claude Code conversations) for the
block-hash importer (``pbkv-sdk import kv-cache-tester``).

The format (github.com/callanjfox/kv-cache-tester, ``docs/trace_replay_tester.md``): one JSON
object per conversation with ``id``, ``models``, ``block_size`` (64), ``hash_id_scope``
(``"local"``: ids are the conversation's own), ``tool_tokens``, ``system_tokens``, ``totals`` and
``requests``. A request is ``{"t": arrival s, "type": "s"|"n", "model", "in", "out", "hash_ids":
one id per whole block of the prompt, "input_types": new content's types, "output_types",
"stop": "tool_use"|"end_turn"|"", "api_time": s, "think_time": s}``; an entry of ``type``
``"subagent"`` (``agent_id``, ``subagent_type``, ``tool_tokens``, ``system_tokens``, ``status``,
``requests``) is a subagent the conversation ran, its requests' ``t`` counted from the entry's.

How it maps (:mod:`pbkv_sdk.importers.blockhash` does the rest):

* every request, the subagents' included, is one call; agent ``main``, or the subagent's
  ``subagent_type`` (``Explore``, ``Plan``...), so subagents are agents of their conversation;
* subagents share their conversation's id scope: in these files their ids continue the parent's
  numbering and sibling subagents start with the same ids (their common system and tool prefix),
  so one conversation's calls, main and subagents, are one scope; ``hash_id_scope: "global"``
  makes the whole source one scope;
* a call's duration is its ``api_time``; a human turn opens at the main agent's first call, at
  a call after one that stopped with ``end_turn``, and at a call whose new input is text without a
  ``tool_result`` (the user typed; a ``tool_result`` means the agent loop went on);
* the shared prefix (``--shared-prefix``): ``tools`` marks a call's first ``tool_tokens // 64``
  blocks as the prefix of the client configuration (call's model, ``tool_tokens``);
  ``tools+system`` its first ``(tool_tokens + system_tokens) // 64`` blocks, configuration
  (model, ``tool_tokens``, ``system_tokens``) (subagents: their entry's counts).

A request that lacks a usable ``t``, ``in``, ``out`` or ``hash_ids``, or holds more ids than its
prompt fills, is skipped and counted; a file that is not such an object is a bad file.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from typing import Any

from .blockhash import BadFile, BlockImportSummary, HashCall, HashConversation, ImportOptions, import_block_hash

__all__ = ["APP_NAME", "FILE_SUFFIX", "SHARED_PREFIX_MODES", "WRITER", "import_kv_cache_tester", "read_trace_file"]

#: App name of the imported trace (the public set is Claude Code's).
APP_NAME = "claude-code"
#: ``--shared-prefix`` values.
SHARED_PREFIX_MODES = ("none", "tools", "tools+system")
#: The command named in the trace's ``meta`` line.
WRITER = "pbkv-sdk import kv-cache-tester"
#: Files read from a directory or archive (``trace_*.json``).
FILE_SUFFIX = ".json"
#: The main agent's name.
MAIN = "main"
#: Subagent nesting followed at most (the files hold one level).
MAX_DEPTH = 8


def import_kv_cache_tester(src_path: str | os.PathLike[str], out_path: str | os.PathLike[str],
                           options: ImportOptions) -> BlockImportSummary:
    """Convert the ``*.json`` traces of ``src_path`` (a ``.tar.gz``, a directory or one file) into
    one v1 trace (:func:`pbkv_sdk.importers.blockhash.import_block_hash` says how, and what it raises).

    Raises:
        ValueError: also ``options.shared_prefix`` not one of :data:`SHARED_PREFIX_MODES`.
    """
    if options.shared_prefix not in SHARED_PREFIX_MODES:
        raise ValueError(f"the shared prefix must be one of {', '.join(SHARED_PREFIX_MODES)}, "
                         f"got {options.shared_prefix!r}")
    return import_block_hash(src_path, out_path, read_trace_file, options, writer=WRITER, suffix=FILE_SUFFIX)


def read_trace_file(name: str, data: bytes, options: ImportOptions) -> HashConversation:
    """One ``trace_*.json`` as a :class:`HashConversation`.

    Raises:
        BadFile: not JSON, not an object, no ``requests`` list, a bad ``block_size`` or an unknown
            ``hash_id_scope``.
    """
    try:
        doc = json.loads(data)
    except ValueError as exc:  # also UnicodeDecodeError
        raise BadFile(f"not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise BadFile("not a JSON object")
    requests = doc.get("requests")
    if not isinstance(requests, list):
        raise BadFile("no 'requests' list")
    block = doc.get("block_size", 64)
    if isinstance(block, bool) or not isinstance(block, int) or block < 1:
        raise BadFile(f"block_size must be an integer >= 1, got {block!r}")
    scope = doc.get("hash_id_scope", "local")
    if scope not in ("local", "per_context", "global"):
        raise BadFile(f"unknown hash_id_scope {scope!r} (local or global)")
    stem = os.path.splitext(os.path.basename(name))[0]
    conv_id = doc.get("id") if isinstance(doc.get("id"), str) and doc.get("id") else stem
    conv = HashConversation(conv_id, block, [], Counter(), global_ids=scope == "global")
    prefix = (_count(doc.get("tool_tokens")), _count(doc.get("system_tokens")))
    _read_requests(requests, 0.0, MAIN, prefix, None, conv, options.shared_prefix, 0)
    return conv


def _read_requests(requests: list, t0: float, agent: str, prefix: tuple[int, int], anchor: float | None,
                   conv: HashConversation, mode: str, depth: int) -> None:
    """Add the calls of one agent's ``requests`` (times from ``t0``) to ``conv``."""
    previous_stop: str | None = None
    first = True
    for req in requests:
        if not isinstance(req, dict):
            conv.skipped["request is not a JSON object"] += 1
            continue
        if req.get("type") == "subagent":
            _read_subagent(req, t0, prefix, anchor, conv, mode, depth)
            continue
        call, reason = _call(req, t0, conv.block_size)
        if call is None:
            conv.skipped[reason] += 1
            continue
        inputs = req.get("input_types") if isinstance(req.get("input_types"), list) else []
        if agent == MAIN:
            call.opens_turn = first or previous_stop == "end_turn" or ("text" in inputs and "tool_result" not in inputs)
            previous_stop = req.get("stop") if isinstance(req.get("stop"), str) else None
            first = False
        call.agent = agent
        call.anchor_s = anchor
        if mode != "none":
            tools, system = prefix
            model = req.get("model") if isinstance(req.get("model"), str) else ""
            if mode == "tools":
                call.shared_key, call.shared_blocks = f"{model}|tools={tools}", tools // conv.block_size
            else:
                call.shared_key = f"{model}|tools={tools}|system={system}"
                call.shared_blocks = (tools + system) // conv.block_size
        conv.calls.append(call)


def _read_subagent(entry: dict, t0: float, parent_prefix: tuple[int, int], anchor: float | None,
                   conv: HashConversation, mode: str, depth: int) -> None:
    requests = entry.get("requests")
    if not isinstance(requests, list):
        conv.skipped["subagent entry without a 'requests' list"] += 1
        return
    start = _time(entry.get("t"))
    if start is None:
        conv.skipped["subagent entry without a usable 't'"] += _count_calls(requests)
        return
    if depth >= MAX_DEPTH:
        conv.skipped[f"subagent nested deeper than {MAX_DEPTH}"] += _count_calls(requests)
        return
    conv.subagents += 1
    name = entry.get("subagent_type")
    agent = name if isinstance(name, str) and name.strip() else "subagent"
    prefix = (_count(entry.get("tool_tokens")), _count(entry.get("system_tokens")))
    if prefix == (0, 0):
        prefix = parent_prefix
    # its calls belong to the turn it started in (anchor: the outermost subagent's start)
    _read_requests(requests, t0 + start, agent, prefix, t0 + start if anchor is None else anchor, conv, mode,
                   depth + 1)


def _call(req: dict, t0: float, block: int) -> tuple[HashCall | None, str]:
    """The call of one request, or ``(None, reason)``."""
    t = _time(req.get("t"))
    if t is None:
        return None, "request without a usable 't'"
    prompt, completion = _int(req.get("in")), _int(req.get("out"))
    if prompt is None or completion is None:
        return None, "request without usable 'in'/'out' token counts"
    ids = req.get("hash_ids")
    if not isinstance(ids, list) or not all(isinstance(h, (int, str)) and not isinstance(h, bool) for h in ids):
        return None, "request without a 'hash_ids' list of ints"
    if len(ids) > -(-prompt // block):
        return None, "request with more hash_ids than its prompt fills"
    api = req.get("api_time")
    ttft = req.get("ttft")
    return HashCall(t0 + t, prompt, completion, ids, duration_s=_time(api),
                    ttft_s=_time(ttft)), ""


def _count_calls(requests: list) -> int:
    n = 0
    for req in requests:
        if isinstance(req, dict) and req.get("type") == "subagent" and isinstance(req.get("requests"), list):
            n += _count_calls(req["requests"])
        else:
            n += 1
    return n


def _time(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return None
    return float(value)


def _int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0 \
            or value != int(value):
        return None
    return int(value)


def _count(value: Any) -> int:
    n = _int(value)
    return n or 0
