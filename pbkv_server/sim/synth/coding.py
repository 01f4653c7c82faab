"""Seeded synthetic coding-agent sessions shaped after the GitHub Copilot coding-agent traces.

Source of the published figures: Azure/AzurePublicDataset, ``GitHubCopilotCodingAgentDataset2026.md``
and ``analysis/GitHubCopilotCodingAgents/DATASET_CARD.md`` (dataset statistics table: 301,026
sessions, 1,189,581 user turns, 9,310,255 LLM calls, 7,767,261 tool batches, 8,681,190 tool calls,
631,401,670,144 prompt, 4,914,633,421 completion and 540,950,119,440 cached prompt tokens). Every
parameter, its value and where it comes from is listed in ``docs/coding-agent-workload.md``;
:data:`PUBLISHED` holds the targets the generator is checked against.

A session is a sequence of user turns; a turn is a sequence of LLM calls; between two calls of a
turn the agent usually runs a tool batch whose result is appended to the prompt. Each turn is one
workflow of the trace (``workflow_id = <session>-t<turn>``), its calls the workflow's invocations,
and the session's turns share a ``session_id`` so a replay runs them in order, after the user's
idle time. The prompt of a call (chat order)::

    [system prompt + tool schemas (shared by every session)] [session instructions]
    [turn 0 user message + context] [call 0 output + tool results] ... [turn 1 user message] ...

so each call's prompt extends the previous call's prompt (the previous output and its tool results
are appended). When the prompt would exceed :data:`CONTEXT_LIMIT` tokens the history is compacted
(the agent summarises it): the prompt becomes system, instructions, a summary and the newest
content, and only the system and instructions still repeat the previous call's prefix. Texts are
segments hashed with :class:`pbkv_server.sim.synth.common.Hasher` (the sharing structure of real text).

A call's ``agent`` is its initiator (schema field ``initiator_type``): ``user`` for a turn's first
call, ``agent`` for the follow-up calls, as ``pbkv-sdk import ghcp`` names them.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Iterator

from pbkv_contract.features import request_features
from pbkv_contract.trace import InvocationRecord, TraceRecord, WorkflowEndRecord

from pbkv_server.sim.nominal import EPOCH, nominal_times
from pbkv_server.sim.synth.common import CHARS_PER_TOKEN, Hasher, loguniform, random_words

__all__ = ["CodingAgentSpec", "CODING_AGENT", "GRAPH_NAME", "DEFAULT_BLOCK_CHARS", "PUBLISHED", "generate_coding_agent"]

#: Graph name of :func:`pbkv_server.sim.synth.agents.generate`.
GRAPH_NAME = "coding-agent"
#: Block size of this graph: 4,096 characters = 1,024 tokens. Prompts average ~68k tokens, so
#: 64-token blocks would put ~1,000 hashes on every call (a 1,000-call trace of 70 MB); at 1,024
#: tokens a call has ~66 blocks and the last, partial block (never shared) costs ~0.8 % of the
#: repeated-prefix share.
DEFAULT_BLOCK_CHARS = 4096

#: Published marginals (DATASET_CARD.md statistics table), per LLM call / turn / session.
PUBLISHED = {
    "prompt_tokens_per_call": 631_401_670_144 / 9_310_255,      # 67,818
    "cached_share": 540_950_119_440 / 631_401_670_144,          # 0.8567
    "completion_tokens_per_call": 4_914_633_421 / 9_310_255,    # 527.9
    "calls_per_turn": 9_310_255 / 1_189_581,                    # 7.83
    "turns_per_session": 1_189_581 / 301_026,                   # 3.95
    "tool_batches_per_turn": 7_767_261 / 1_189_581,             # 6.53
    "tool_calls_per_turn": 8_681_190 / 1_189_581,               # 7.30
    "tool_calls_per_batch": 8_681_190 / 7_767_261,              # 1.118
}


@dataclass(frozen=True)
class CodingAgentSpec:
    """Shape of the sessions. Token ranges ``(low, high)`` are drawn log-uniformly.

    Attributes:
        app: app name of the trace.
        turns_per_session: mean turns of a session (1 + geometric).
        calls_per_turn: mean LLM calls of a turn (1 + geometric).
        batch_p: probability that a call other than a turn's last is followed by a tool batch
            (else the next call follows at once).
        extra_tool_p: a batch holds 1 + geometric(extra_tool_p) tool calls.
        system_tokens: system prompt + tool schemas, shared by every session.
        instruction_tokens: per-session custom instructions.
        user_tokens: a turn's user message + attached context.
        completion_tokens: output of a call.
        tool_tokens: result of one tool call appended to the prompt.
        summary_tokens: the summary that replaces the history at compaction.
        context_limit: prompt tokens above which the history is compacted.
        tool_batch_s: wall-clock duration of a tool batch, seconds.
        user_idle_s: the user's idle time between turns, seconds.
    """

    app: str = GRAPH_NAME
    turns_per_session: float = PUBLISHED["turns_per_session"]
    calls_per_turn: float = PUBLISHED["calls_per_turn"]
    batch_p: float = PUBLISHED["tool_batches_per_turn"] / (PUBLISHED["calls_per_turn"] - 1.0)
    extra_tool_p: float = 1.0 - 1.0 / PUBLISHED["tool_calls_per_batch"]
    system_tokens: int = 12_000
    instruction_tokens: tuple[int, int] = (200, 4_000)
    user_tokens: tuple[int, int] = (500, 12_000)
    completion_tokens: tuple[int, int] = (50, 2_000)
    tool_tokens: tuple[int, int] = (800, 30_000)
    summary_tokens: tuple[int, int] = (2_000, 8_000)
    context_limit: int = 128_000
    tool_batch_s: tuple[float, float] = (0.3, 30.0)
    user_idle_s: tuple[float, float] = (10.0, 600.0)


CODING_AGENT = CodingAgentSpec()
CONTEXT_LIMIT = CODING_AGENT.context_limit

_WORDS = tuple("read_file grep_search run_in_terminal apply_patch edit tests failing passed diff function "
               "module import error traceback build lint fix refactor repository branch commit".split())


def generate_coding_agent(sessions: int, seed: int, block_chars: int, mean_interarrival_s: float,
                          spec: CodingAgentSpec = CODING_AGENT) -> Iterator[TraceRecord]:
    """Records of ``sessions`` sessions (each turn a workflow with the session's ``session_id``), lazily.

    Args:
        sessions: number of sessions (>= 1).
        seed: random seed; the output is a pure function of the arguments.
        block_chars: characters per prefix-hash block (a multiple of ``CHARS_PER_TOKEN``).
        mean_interarrival_s: mean gap between session starts in the recorded timestamps, seconds.
        spec: the sessions' shape.
    """
    rng = random.Random(seed)
    hasher = Hasher(block_chars)
    t = EPOCH
    for index in range(sessions):
        t += rng.expovariate(1.0 / mean_interarrival_s)
        yield from _session(spec, f"{spec.app}-s{seed}-{index:06d}", t, rng, hasher)


def _count(rng: random.Random, mean: float) -> int:
    """1 + geometric: mean ``mean`` (>= 1), support 1, 2, ...; inverse-CDF draw."""
    if mean <= 1.0:
        return 1
    p_more = 1.0 - 1.0 / mean
    return 1 + int(math.log(1.0 - rng.random()) / math.log(p_more))


def _session(spec: CodingAgentSpec, sid: str, t: float, rng: random.Random, hasher: Hasher) -> Iterator[TraceRecord]:
    turns = _count(rng, spec.turns_per_session)
    head = [(f"{spec.app}/system", spec.system_tokens * CHARS_PER_TOKEN),
            (f"{sid}/instructions", loguniform(rng, *spec.instruction_tokens) * CHARS_PER_TOKEN)]
    history: list[tuple[str, int]] = []  # segments after the head, characters
    compactions = 0
    for turn in range(turns):
        wid = f"{sid}-t{turn}"
        history.append((f"{sid}/t{turn}/user", loguniform(rng, *spec.user_tokens) * CHARS_PER_TOKEN))
        calls = _count(rng, spec.calls_per_turn)
        for j in range(calls):
            if sum(n for _, n in head + history) > spec.context_limit * CHARS_PER_TOKEN and len(history) > 1:
                # compaction: the history becomes a summary; the newest content stays after it
                compactions += 1
                summary = (f"{sid}/summary{compactions}", loguniform(rng, *spec.summary_tokens) * CHARS_PER_TOKEN)
                history = [summary, history[-1]]
            hashes, block_tokens = hasher.hashes_and_tokens(head + history)
            prompt = sum(block_tokens)
            completion = loguniform(rng, *spec.completion_tokens)
            ttft, t_end = nominal_times(t, prompt, completion)
            yield InvocationRecord(
                app=spec.app, workflow_id=wid, step=j, agent="user" if j == 0 else "agent",
                t_start=round(t, 3), t_end=round(t_end, 3), ttft_s=round(ttft, 3), prompt_tokens=prompt,
                completion_tokens=completion, prefix_hashes=hashes, block_chars=hasher.block_chars,
                features=request_features(random_words(rng, _WORDS, 8)), block_tokens=block_tokens, session_id=sid,
            )
            appended = completion
            gap = 0.0
            if j + 1 < calls and rng.random() < spec.batch_p:
                tools = _count(rng, 1.0 / (1.0 - spec.extra_tool_p))
                appended += sum(loguniform(rng, *spec.tool_tokens) for _ in range(tools))
                gap = math.exp(rng.uniform(math.log(spec.tool_batch_s[0]), math.log(spec.tool_batch_s[1])))
            history.append((f"{sid}/t{turn}/c{j}", appended * CHARS_PER_TOKEN))
            t = t_end + gap
        yield WorkflowEndRecord(app=spec.app, workflow_id=wid, t=round(t, 3), status="completed")
        t += math.exp(rng.uniform(math.log(spec.user_idle_s[0]), math.log(spec.user_idle_s[1])))
    hasher.forget_workflows()
