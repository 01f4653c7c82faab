"""Seeded synthetic multi-agent workloads written as v1 traces (``docs/architecture.md``, "Simulator").

A workflow walks a call graph: a prologue of agents, then a loop body repeated a number of times,
then END; in a routed graph (``supervisor``) the first agent also picks one of several
(prologue, loop) routes, which every later round repeats. The loop count depends on a hidden
per-workflow property (task difficulty, claim hop count, ...) that also chooses the words of the
task and of the newest messages, so the request features (:func:`pbkv_contract.features.request_features`
of the newest message) carry a learnable signal. The "signal" agent's output (a test log, an
evidence summary) additionally says whether another round follows (truthfully with probability
0.9), as a real tool result would.

Prompt layout of agent X at step i of workflow w (chat order, as group-chat frameworks build it)::

    [app preamble (shared by all agents of the app)] [X's role prompt + tool descriptions
    (shared by all workflows)] [w's task] [history message 0] ... [history message i-1]

History message j is invocation j's output plus its tool result, so history accumulates and an
agent's next call extends its previous prompt. Texts are not generated: each prompt is a sequence
of segments (id, characters) and the chained block hash of a block hashes the (segment, offset,
length) pieces it holds, which has exactly the sharing structure of hashing real text whose
segments are distinct (:mod:`pbkv_server.sim.synth.common`). Tokens are ``characters / CHARS_PER_TOKEN``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Iterator

from pbkv_contract.trace import InvocationRecord, TraceRecord, TraceWriter, WorkflowEndRecord
from pbkv_contract.features import request_features

from pbkv_server.sim.nominal import EPOCH, HANDOFF_GAP_S, MEAN_INTERARRIVAL_S, SEARCH_TOOL_GAP_S, nominal_times
from pbkv_server.sim.synth.common import CHARS_PER_TOKEN, Hasher, loguniform, random_words

__all__ = [
    "GRAPHS",
    "CHARS_PER_TOKEN",
    "DEFAULT_SYNTH_BLOCK_CHARS",
    "AgentSpec",
    "HiddenProperty",
    "Route",
    "GraphSpec",
    "generate",
    "write_trace",
    "agent_workflow",
]

#: Block size of synthetic traces: 256 characters = 64 tokens (an SGLang-page-sized block).
DEFAULT_SYNTH_BLOCK_CHARS = 256
#: Probability that the signal agent's output tells the truth about whether another round follows.
SIGNAL_TRUTH = 0.9


@dataclass(frozen=True)
class AgentSpec:
    """One agent of a synthetic app. Token ranges are (low, high) drawn log-uniformly.

    Attributes:
        name: agent name.
        role_tokens: length of its role prompt + tool descriptions (fixed per app and seed).
        output_tokens: completion length of each call.
        tool_tokens: tokens of the tool result appended after its output (``(0, 0)``: no tool).
        tool_gap_s: seconds the tool runs before the next call (the framework hand-off,
            :data:`pbkv_server.sim.nominal.HANDOFF_GAP_S`, when no tool).
        words: vocabulary of its messages.
    """

    name: str
    role_tokens: tuple[int, int]
    output_tokens: tuple[int, int]
    tool_tokens: tuple[int, int] = (0, 0)
    tool_gap_s: tuple[float, float] = HANDOFF_GAP_S
    words: tuple[str, ...] = ()


@dataclass(frozen=True)
class HiddenProperty:
    """A hidden per-workflow property value: it sets the loop count and the task's words.

    Attributes:
        label: value name (recorded nowhere in the trace: only its words leak into features).
        weight: sampling weight among the graph's properties.
        min_loops: loops always done.
        p_continue: probability of each further loop (geometric), capped by the graph's max.
        words: words of the task and of messages about it.
        route_weights: sampling weights of the graph's :class:`Route` s for workflows with this
            value (same order as ``GraphSpec.routes``; empty: uniform). Harder tasks favour longer
            strategies, so the route an agent history shows also hints at the loop count.
    """

    label: str
    weight: float
    min_loops: int
    p_continue: float
    words: tuple[str, ...]
    route_weights: tuple[float, ...] = ()


@dataclass(frozen=True)
class Route:
    """A strategy the first agent picks once per workflow and every repair round repeats.

    Models a supervisor-style app (a LangGraph supervisor, an AutoGen selector) whose planner
    decides, from the task, whether to reproduce the bug first, look up code and docs first, or go
    straight to a patch: the choice shows in which agents run, and rounds of different routes have
    different lengths, so the next agents depend on the workflow's earlier agents, not only on the
    current agent and the step.

    Attributes:
        name: route name (recorded nowhere in the trace).
        prologue: agents of the first round.
        loop: agents of each repair round.
    """

    name: str
    prologue: tuple[str, ...]
    loop: tuple[str, ...]


@dataclass(frozen=True)
class GraphSpec:
    """A call graph: ``prologue`` then ``loop`` repeated ``loops`` times, then END.

    Attributes:
        app: application name of the traces.
        preamble_tokens: length of the app-wide shared system preamble.
        agents: the agents by name.
        prologue: agents of the first round.
        loop: agents of each further round (empty: static workflow).
        properties: hidden property values.
        task_tokens: length range of the workflow's task message.
        signal_agent: agent whose message says whether another round follows (``None``: none).
        max_loops: cap on further rounds.
        common_words: filler vocabulary of the app.
        continue_words / stop_words: outcome words of the signal agent's message.
        routes: alternative (prologue, loop) strategies drawn per workflow with the hidden
            property's ``route_weights``; when set they replace ``prologue`` and ``loop``.
    """

    app: str
    preamble_tokens: int
    agents: dict[str, AgentSpec]
    prologue: tuple[str, ...]
    loop: tuple[str, ...]
    properties: tuple[HiddenProperty, ...]
    task_tokens: tuple[int, int]
    signal_agent: str | None = None
    max_loops: int = 8
    common_words: tuple[str, ...] = ()
    continue_words: tuple[str, ...] = ()
    stop_words: tuple[str, ...] = ()
    routes: tuple[Route, ...] = ()


def _w(text: str) -> tuple[str, ...]:
    return tuple(text.split())


CODEGEN = GraphSpec(
    app="codegen",
    preamble_tokens=900,
    agents={
        "planner": AgentSpec("planner", (700, 1000), (250, 600), words=_w("plan steps first then files module change approach")),
        "coder": AgentSpec("coder", (1400, 1900), (400, 1200), (300, 1500), (3.0, 20.0),
                           _w("patch diff function edit def return import class fix")),
        "tester": AgentSpec("tester", (900, 1300), (100, 300), words=_w("tests run result check pytest suite")),
        "analyzer": AgentSpec("analyzer", (800, 1200), (200, 500), words=_w("root cause because failing line trace reason")),
    },
    prologue=("planner", "coder", "tester"),
    loop=("analyzer", "coder", "tester"),
    properties=(
        HiddenProperty("easy", 0.25, 0, 0.3, _w("typo rename docstring comment spelling readme label string")),
        HiddenProperty("medium", 0.40, 0, 0.65, _w("parser validation edge case argument option default config")),
        HiddenProperty("hard", 0.35, 1, 0.8, _w("concurrency race deadlock migration refactor async cache protocol")),
    ),
    # The task is the issue text plus the retrieved source files it concerns: SWE-bench-style
    # prompts carry thousands of tokens of code context next to a few hundred of issue text.
    # Measured on the shared data (4 characters per token): SWE-bench Lite issue texts have a
    # median of ~260 tokens (p90 ~800) and 90 % of gold patches touch one file, whose source is
    # typically a few thousand tokens; the real ChatDev logs' prompts have a median of ~1,500
    # tokens (p90 ~2,700) for small programs. The range matters for the study: the task is the
    # context a workflow's own later calls repeat, so the size of pbkv's gain over lru in the
    # 20-35 % LRU regime moves with it (issue-text-only tasks, 200-800 tokens, give less to keep).
    # Re-measure the ratio with the study (`pbkv-bench study`) rather than quote it here: it
    # changes with the cost model and the policies.
    task_tokens=(1500, 6000),
    signal_agent="coder",
    max_loops=8,
    common_words=_w("the issue repository code user expected behaviour report version error please"),
    continue_words=_w("failed assertionerror traceback errors failing"),
    stop_words=_w("passed ok green success all"),
)

RESEARCH = GraphSpec(
    app="research",
    preamble_tokens=700,
    agents={
        "retriever": AgentSpec("retriever", (600, 900), (80, 200), (800, 2000), SEARCH_TOOL_GAP_S,
                               _w("search query wikipedia article page title")),
        "summarizer": AgentSpec("summarizer", (700, 1000), (200, 500), words=_w("summary evidence states mentions source")),
        "verifier": AgentSpec("verifier", (800, 1100), (60, 200), words=_w("claim verdict supported refuted label")),
    },
    prologue=("retriever", "summarizer", "verifier"),
    loop=("retriever", "summarizer", "verifier"),
    properties=(
        HiddenProperty("2-hop", 0.4, 1, 0.1, _w("born city film")),
        HiddenProperty("3-hop", 0.35, 2, 0.1, _w("born city film whose director which studio")),
        HiddenProperty("4-hop", 0.25, 3, 0.1, _w("born city film whose director which studio founded country that")),
    ),
    task_tokens=(150, 400),
    signal_agent="summarizer",
    max_loops=6,
    common_words=_w("claim the a is was of in and by"),
    continue_words=_w("missing unknown need more evidence unresolved"),
    stop_words=_w("complete covers all resolved enough"),
)

FINANCE = GraphSpec(
    app="finance",
    preamble_tokens=800,
    agents={
        "researcher": AgentSpec("researcher", (700, 1000), (150, 400), (1500, 3000), (1.0, 4.0),
                                _w("filing 10k page excerpt table")),
        "analyst": AgentSpec("analyst", (900, 1200), (300, 700), words=_w("ratio margin growth compute year")),
        "writer": AgentSpec("writer", (600, 900), (150, 400), words=_w("answer final report concise")),
    },
    prologue=("researcher", "analyst", "writer"),
    loop=(),
    properties=(
        HiddenProperty("metrics", 0.4, 0, 0.0, _w("revenue eps ratio fy2022 capex")),
        HiddenProperty("domain", 0.35, 0, 0.0, _w("segment strategy risk guidance")),
        HiddenProperty("novel", 0.25, 0, 0.0, _w("compare trend why outlook")),
    ),
    task_tokens=(100, 300),
    common_words=_w("company question financial statement the of"),
)

# A supervisor-routed coding app: the planner picks a route from the task and each repair round
# repeats it, so which agent follows the analyzer (and how long a round is) depends on an agent
# that ran many steps earlier. CODEGEN's agents plus a bug reproducer and a code/docs searcher.
SUPERVISOR = GraphSpec(
    app="supervisor",
    preamble_tokens=900,
    agents={
        **CODEGEN.agents,
        "reproducer": AgentSpec("reproducer", (800, 1100), (150, 400), (300, 1200), (2.0, 10.0),
                                _w("reproduce script minimal example observed output run")),
        "searcher": AgentSpec("searcher", (600, 900), (80, 200), (800, 2000), SEARCH_TOOL_GAP_S,
                              _w("grep definition usage docs reference symbol")),
    },
    prologue=CODEGEN.prologue,
    loop=CODEGEN.loop,
    routes=(
        Route("direct", ("planner", "coder", "tester"), ("analyzer", "coder", "tester")),
        Route("reproduce", ("planner", "reproducer", "coder", "tester"), ("analyzer", "reproducer", "coder", "tester")),
        Route("lookup", ("planner", "searcher", "coder", "tester"), ("analyzer", "searcher", "coder", "tester")),
    ),
    properties=(
        HiddenProperty("easy", 0.3, 0, 0.3, _w("typo rename docstring comment spelling readme label string"), (0.6, 0.1, 0.3)),
        HiddenProperty("medium", 0.4, 0, 0.6, _w("parser validation edge case argument option default config"), (0.3, 0.3, 0.4)),
        HiddenProperty("hard", 0.3, 1, 0.75, _w("concurrency race deadlock migration refactor async cache protocol"), (0.1, 0.6, 0.3)),
    ),
    task_tokens=(1500, 6000),
    signal_agent="coder",
    max_loops=6,
    common_words=CODEGEN.common_words,
    continue_words=CODEGEN.continue_words,
    stop_words=CODEGEN.stop_words,
)

#: Built-in graphs by name; ``"mixed"`` in :func:`generate` draws one per workflow.
GRAPHS: dict[str, GraphSpec] = {g.app: g for g in (CODEGEN, RESEARCH, FINANCE, SUPERVISOR)}


# --------------------------------------------------------------------------- public API


def generate(
    graph: str = "codegen",
    workflows: int = 100,
    seed: int = 0,
    block_chars: int | None = None,
    mean_interarrival_s: float = MEAN_INTERARRIVAL_S,
) -> Iterator[TraceRecord]:
    """The records of ``workflows`` synthetic workflows (each workflow's invocations, then its end), lazily.

    Args:
        graph: a name of :data:`GRAPHS`, ``"mixed"`` (each workflow picks one uniformly), or a
            chat graph of :mod:`pbkv_server.sim.synth.chat` (``"chat"``: multi-turn conversations,
            each turn its own workflow; ``"chat-mix"``: conversations and agent workflows), or
            ``"coding-agent"`` (:mod:`pbkv_server.sim.synth.coding`: sessions shaped after the
            GitHub Copilot coding-agent traces, each user turn a workflow).
        workflows: number of workflows (>= 1); for the chat graphs, of conversations (and agent
            workflows), each conversation holding one workflow per turn; for ``coding-agent``,
            of sessions.
        seed: random seed; the output is a pure function of the arguments.
        block_chars: characters per prefix-hash block (a multiple of :data:`CHARS_PER_TOKEN`);
            ``None``: :data:`DEFAULT_SYNTH_BLOCK_CHARS`, or for ``coding-agent`` its own default.
        mean_interarrival_s: mean gap between workflow starts in the recorded timestamps, seconds.

    Raises:
        ValueError: unknown graph, ``workflows`` < 1, or a bad ``block_chars``.
    """
    # Checked here, not in the generator body, so bad arguments fail at the call, before a
    # caller such as write_trace creates its output file.
    from pbkv_server.sim.synth import coding as synth_coding  # both import this module
    from pbkv_server.sim.synth.chat import CHAT_GRAPHS, generate_chat

    if graph != "mixed" and graph not in GRAPHS and graph not in CHAT_GRAPHS and graph != synth_coding.GRAPH_NAME:
        raise ValueError(f"unknown graph {graph!r}; known: {', '.join(sorted(GRAPHS))}, mixed, "
                         f"{', '.join(CHAT_GRAPHS)}, {synth_coding.GRAPH_NAME}")
    if block_chars is None:
        block_chars = synth_coding.DEFAULT_BLOCK_CHARS if graph == synth_coding.GRAPH_NAME else DEFAULT_SYNTH_BLOCK_CHARS
    if workflows < 1:
        raise ValueError("workflows must be >= 1")
    if block_chars < CHARS_PER_TOKEN or block_chars % CHARS_PER_TOKEN:
        raise ValueError(f"block_chars must be a positive multiple of {CHARS_PER_TOKEN}")
    if graph in CHAT_GRAPHS:
        return generate_chat(graph, workflows, seed, block_chars, mean_interarrival_s)
    if graph == synth_coding.GRAPH_NAME:
        return synth_coding.generate_coding_agent(workflows, seed, block_chars, mean_interarrival_s)
    return _generate(graph, workflows, seed, block_chars, mean_interarrival_s)


def _generate(graph: str, workflows: int, seed: int, block_chars: int,
              mean_interarrival_s: float) -> Iterator[TraceRecord]:
    rng = random.Random(seed)
    specs = sorted(GRAPHS) if graph == "mixed" else [graph]
    # Role prompt lengths are properties of the app, fixed once per seed.
    roles = {
        name: {a.name: loguniform(rng, *a.role_tokens) for a in GRAPHS[name].agents.values()} for name in specs
    }
    hasher = Hasher(block_chars)
    t = EPOCH
    for index in range(workflows):
        spec = GRAPHS[rng.choice(specs)]
        t += rng.expovariate(1.0 / mean_interarrival_s)
        yield from agent_workflow(spec, roles[spec.app], f"{spec.app}-s{seed}-{index:06d}", t, rng, hasher)


def write_trace(path: str, **kwargs) -> tuple[int, int]:
    """Write :func:`generate` (same keyword arguments) to ``path``; return (workflows, invocations).

    Raises:
        ValueError: bad arguments (see :func:`generate`), raised before ``path`` is created.
        OSError: ``path`` cannot be written.
    """
    n_wf = n_inv = 0
    records = generate(**kwargs)
    with TraceWriter(path) as writer:
        for rec in records:
            writer.write(rec)
            if isinstance(rec, InvocationRecord):
                n_inv += 1
            else:
                n_wf += 1
    return n_wf, n_inv


# --------------------------------------------------------------------------- generation


@dataclass
class _Msg:
    seg: str
    tokens: int


def agent_workflow(spec: GraphSpec, roles: dict[str, int], wid: str, t0: float, rng: random.Random,
                   hasher: Hasher) -> Iterator[TraceRecord]:
    """The records of one workflow of ``spec`` (its invocations, then its end), drawn from ``rng``.

    Args:
        spec: the app's call graph.
        roles: role prompt tokens per agent of the app (fixed once per seed).
        wid: the workflow id.
        t0: start time, seconds (the trace's clock).
        rng: the generator's random source (advanced by the draws).
        hasher: the trace's block hasher (its memo of workflow prompts is dropped at the end).
    """
    prop = rng.choices(spec.properties, weights=[p.weight for p in spec.properties])[0]
    loops = prop.min_loops
    while spec.loop and loops < spec.max_loops and rng.random() < prop.p_continue:
        loops += 1
    if not spec.loop:
        loops = 0
    prologue, loop = spec.prologue, spec.loop
    if spec.routes:  # drawn only for routed graphs, so the other graphs' traces stay as they were
        route = rng.choices(spec.routes, weights=prop.route_weights or None)[0]
        prologue, loop = route.prologue, route.loop
    sequence = list(prologue) + list(loop) * loops
    rounds = [0] * len(prologue) + [r + 1 for r in range(loops) for _ in loop]

    task_tokens = loguniform(rng, *spec.task_tokens)
    task_text = random_words(rng, spec.common_words, 6) + random_words(rng, prop.words, 5)
    history: list[_Msg] = []
    newest = task_text
    t = t0
    for step, agent_name in enumerate(sequence):
        agent = spec.agents[agent_name]
        segments = [(f"{spec.app}/preamble", spec.preamble_tokens * CHARS_PER_TOKEN),
                    (f"{spec.app}/role/{agent_name}", roles[agent_name] * CHARS_PER_TOKEN),
                    (f"{wid}/task", task_tokens * CHARS_PER_TOKEN)]
        segments += [(m.seg, m.tokens * CHARS_PER_TOKEN) for m in history]
        hashes, block_tokens = hasher.hashes_and_tokens(segments)
        prompt_tokens = sum(block_tokens)
        completion = loguniform(rng, *agent.output_tokens)
        ttft, t_end = nominal_times(t, prompt_tokens, completion)
        yield InvocationRecord(
            app=spec.app, workflow_id=wid, step=step, agent=agent_name, t_start=round(t, 3),
            t_end=round(t_end, 3), ttft_s=round(ttft, 3), prompt_tokens=prompt_tokens,
            completion_tokens=completion, prefix_hashes=hashes, block_chars=hasher.block_chars,
            features=request_features(newest), block_tokens=block_tokens,
        )
        tool = loguniform(rng, *agent.tool_tokens) if agent.tool_tokens[1] > 0 else 0
        history.append(_Msg(f"{wid}/msg{step}", completion + tool))
        # The newest message of the next call: this call's output (and tool result).
        newest = (random_words(rng, agent.words, 5) + random_words(rng, prop.words, 2)
                  + random_words(rng, spec.common_words, 3))
        if agent_name == spec.signal_agent:
            more = rounds[step] < loops
            if rng.random() >= SIGNAL_TRUTH:
                more = not more
            newest += random_words(rng, spec.continue_words if more else spec.stop_words, 3)
        t = t_end + rng.uniform(*agent.tool_gap_s)
    hasher.forget_workflows()
    yield WorkflowEndRecord(app=spec.app, workflow_id=wid, t=round(t, 3), status="completed")
