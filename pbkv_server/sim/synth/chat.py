"""Seeded synthetic chat traffic (non-agent), alone or mixed with agent workflows, as v1 traces.

Chat is the traffic a serving system mostly sees besides agents: multi-turn conversations in
which every turn is one request that resends the whole conversation so far. Each turn is its own
workflow (one invocation, then its end), as a chat frontend that stamps every request would send
it, and the turns of one conversation share a ``session_id`` so that a replay runs them in order,
each after its user's think time. Conversations start with one of a few shared system prompts
whose popularity follows a Zipf law (a few assistants serve most users).

Prompt of turn t of conversation c (chat order)::

    [system prompt k(c)] [user 0] [reply 0] ... [user t-1] [reply t-1] [user t]

so a turn's prompt extends the previous turn's prompt plus its reply: the reuse is each
conversation's own history, seconds to minutes later, and the shared system prompts.

``chat-mix`` interleaves chat conversations with workflows of an agent graph of
:mod:`pbkv_server.sim.synth.agents` (``codegen`` by default), one unit at a time, to measure both traffic
classes on one server (the replay reports figures per app: ``chat`` and the agent app).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Iterator

from pbkv_contract.features import request_features
from pbkv_contract.trace import InvocationRecord, TraceRecord, WorkflowEndRecord

from pbkv_server.sim.nominal import EPOCH, nominal_times
from pbkv_server.sim.synth.agents import GRAPHS, agent_workflow
from pbkv_server.sim.synth.common import CHARS_PER_TOKEN, Hasher, loguniform, random_words

__all__ = ["ChatSpec", "CHAT", "CHAT_GRAPHS", "generate_chat"]


@dataclass(frozen=True)
class ChatSpec:
    """Shape of the chat traffic (token ranges are drawn log-uniformly).

    Attributes:
        app: app name of the chat requests.
        system_prompts: number of distinct system prompts (assistants).
        zipf_s: Zipf exponent of their popularity: prompt k (0-based) is chosen with probability
            proportional to ``1 / (k + 1) ** zipf_s``.
        system_tokens: length range of a system prompt.
        continue_p: probability of one more turn after each turn (geometric turn count, mean
            ``1 / (1 - continue_p)``), capped at ``max_turns``.
        user_tokens / reply_tokens: length ranges of a user message and of a reply.
        think_s: seconds between a reply and the user's next message.
        words: vocabulary of the messages (feeds the request features).
    """

    app: str = "chat"
    system_prompts: int = 24
    zipf_s: float = 1.1
    system_tokens: tuple[int, int] = (300, 3000)
    continue_p: float = 0.75
    max_turns: int = 20
    user_tokens: tuple[int, int] = (20, 600)
    reply_tokens: tuple[int, int] = (40, 700)
    think_s: tuple[float, float] = (3.0, 40.0)
    words: tuple[str, ...] = tuple(
        "explain summarize translate why how what example code error fix list compare write plan "
        "recipe travel email essay story poem question answer detail shorter longer".split())


CHAT = ChatSpec()
#: Graph names :func:`pbkv_server.sim.synth.agents.generate` hands to this module, with the agent graph mixed in.
CHAT_GRAPHS = {"chat": None, "chat-mix": "codegen"}


def generate_chat(graph: str, units: int, seed: int, block_chars: int, mean_interarrival_s: float,
                  spec: ChatSpec = CHAT, agent_share: float = 0.5) -> Iterator[TraceRecord]:
    """Records of ``units`` conversations (``chat``) or conversations and agent workflows
    (``chat-mix``, each unit an agent workflow with probability ``agent_share``), lazily.

    Args:
        graph: ``"chat"`` or ``"chat-mix"`` (see :data:`CHAT_GRAPHS`).
        units: conversations (and agent workflows) to generate.
        seed: random seed; the output is a pure function of the arguments.
        block_chars: characters per prefix-hash block.
        mean_interarrival_s: mean gap between unit starts in the recorded timestamps, seconds.
        spec: the chat traffic's shape.
        agent_share: share of agent workflows in ``chat-mix``.
    """
    rng = random.Random(seed)
    agent_graph = GRAPHS[CHAT_GRAPHS[graph]] if CHAT_GRAPHS[graph] else None
    roles = {a.name: loguniform(rng, *a.role_tokens) for a in agent_graph.agents.values()} if agent_graph else {}
    systems = [loguniform(rng, *spec.system_tokens) for _ in range(spec.system_prompts)]
    popularity = [1.0 / (k + 1) ** spec.zipf_s for k in range(spec.system_prompts)]
    hasher = Hasher(block_chars)
    t = EPOCH
    for index in range(units):
        t += rng.expovariate(1.0 / mean_interarrival_s)
        if agent_graph is not None and rng.random() < agent_share:
            yield from agent_workflow(agent_graph, roles, f"{agent_graph.app}-s{seed}-{index:06d}", t, rng, hasher)
            continue
        k = rng.choices(range(spec.system_prompts), weights=popularity)[0]
        yield from _conversation(spec, f"{spec.app}-s{seed}-{index:06d}", k, systems[k], t, rng, hasher)


def _conversation(spec: ChatSpec, cid: str, k: int, system_tokens: int, t: float, rng: random.Random,
                  hasher: Hasher) -> Iterator[TraceRecord]:
    turns = 1
    while turns < spec.max_turns and rng.random() < spec.continue_p:
        turns += 1
    segments = [(f"{spec.app}/system/{k}", system_tokens * CHARS_PER_TOKEN)]
    for turn in range(turns):
        wid = f"{cid}-t{turn}"
        user = loguniform(rng, *spec.user_tokens)
        segments.append((f"{cid}/user{turn}", user * CHARS_PER_TOKEN))
        hashes, block_tokens = hasher.hashes_and_tokens(segments)
        prompt_tokens = sum(block_tokens)
        reply = loguniform(rng, *spec.reply_tokens)
        ttft, t_end = nominal_times(t, prompt_tokens, reply)
        yield InvocationRecord(
            app=spec.app, workflow_id=wid, step=0, agent="assistant", t_start=round(t, 3),
            t_end=round(t_end, 3), ttft_s=round(ttft, 3), prompt_tokens=prompt_tokens, completion_tokens=reply,
            prefix_hashes=hashes, block_chars=hasher.block_chars,
            features=request_features(random_words(rng, spec.words, 8)), block_tokens=block_tokens, session_id=cid,
        )
        yield WorkflowEndRecord(app=spec.app, workflow_id=wid, t=round(t_end, 3), status="completed")
        segments.append((f"{cid}/reply{turn}", reply * CHARS_PER_TOKEN))
        t = t_end + math.exp(rng.uniform(math.log(spec.think_s[0]), math.log(spec.think_s[1])))
    hasher.forget_workflows()
